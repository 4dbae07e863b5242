"""Collects what a simulation did: slices per lane, time per category per stage, memory over time."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from engine.results.result import MEMORY_CATEGORIES
from engine.results.timeline import Timeline


@dataclass
class StageLedger:
    """Where one stage's wall time went (the categories add up to its finish time), and its memory
    changes as (time, category, delta) records, turned into occupancy rows only when asked."""

    times: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    changes: list[tuple[float, str, float]] = field(default_factory=list)
    finish: float = 0.0

    def memory(self, t: float, category: str, delta: float) -> None:
        self.changes.append((t, category, delta))

    def rows(self) -> tuple[list[float], list[dict[str, float]]]:
        """Occupancy by category after each distinct time."""
        current = dict.fromkeys(MEMORY_CATEGORIES, 0.0)
        times: list[float] = []
        rows: list[dict[str, float]] = []
        for t, cat, delta in self.changes:
            current[cat] += delta
            if times and times[-1] == t:
                rows[-1] = dict(current)
            else:
                times.append(t)
                rows.append(dict(current))
        return times, rows

    def peak(self) -> tuple[float, dict[str, float]]:
        best, row = 0.0, dict.fromkeys(MEMORY_CATEGORIES, 0.0)
        for r in self.rows()[1]:
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
