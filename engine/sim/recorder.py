"""Collects what a simulation did: slices per lane, time per category per stage, memory over time."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from engine.results.result import MEMORY_CATEGORIES
from engine.results.timeline import Timeline


@dataclass
class StageLedger:
    """Where one stage's wall time went; the categories add up to its finish time."""

    times: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    mem_times: list[float] = field(default_factory=list)
    mem_rows: list[dict[str, float]] = field(default_factory=list)
    current: dict[str, float] = field(default_factory=lambda: dict.fromkeys(MEMORY_CATEGORIES, 0.0))
    finish: float = 0.0

    def memory(self, t: float, category: str, delta: float) -> None:
        self.current[category] += delta
        if self.mem_times and self.mem_times[-1] == t:
            self.mem_rows[-1] = dict(self.current)
        else:
            self.mem_times.append(t)
            self.mem_rows.append(dict(self.current))

    def peak(self) -> tuple[float, dict[str, float]]:
        best, row = 0.0, dict(self.current)
        for r in self.mem_rows:
            total = sum(r.values())
            if total > best:
                best, row = total, r
        return best, row


class Recorder:
    def __init__(self) -> None:
        self.timeline = Timeline()
        self.ledgers: dict[int, StageLedger] = defaultdict(StageLedger)

    def slice(self, lane: int, start: float, dur: float, category: str, label: str, stage: int, mb: int, layer: int):
        if dur > 0:
            self.timeline.add(lane, start, dur, category, label, stage, mb, layer)
