"""Collects what a simulation did: slices per lane, time per category per stage, memory changes over time
(the result builder turns them into memory tracks)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
from tilewright.engine.results.result import MEMORY_CATEGORIES
from tilewright.engine.results.timeline import Timeline


@dataclass
class StageLedger:
    """Where one stage's wall time went (the categories add up to its finish time), and its memory
    changes as (time, category, delta) records, turned into occupancy rows only when asked."""

    times: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    changes: list[tuple[float, str, float]] = field(default_factory=list)
    finish: float = 0.0

    def memory(self, t: float, category: str, delta: float) -> None:
        self.changes.append((t, category, delta))

    def columns(self) -> tuple[list[float], dict[str, list[float]]]:
        """Occupancy by category after each distinct time, vectorised (long runs have ~10^5 changes)."""
        if not self.changes:
            return [], {c: [] for c in MEMORY_CATEGORIES}
        n = len(self.changes)
        times = np.fromiter((c[0] for c in self.changes), float, n)
        cat_index = {c: i for i, c in enumerate(MEMORY_CATEGORIES)}
        cats = np.fromiter((cat_index[c[1]] for c in self.changes), int, n)
        deltas = np.fromiter((c[2] for c in self.changes), float, n)
        per_cat = np.zeros((len(MEMORY_CATEGORIES), n))
        per_cat[cats, np.arange(n)] = deltas
        levels = np.cumsum(per_cat, axis=1)
        last = np.append(times[1:] != times[:-1], True)  # the state after the last change at each time
        return times[last].tolist(), {c: levels[i, last].tolist() for i, c in enumerate(MEMORY_CATEGORIES)}


class Recorder:
    def __init__(self) -> None:
        self.timeline = Timeline()
        self.ledgers: dict[int, StageLedger] = defaultdict(StageLedger)

    def slice(self, lane: int, start: float, dur: float, category: str, label: str, stage: int, mb: int, layer: int):
        if dur > 0:
            self.timeline.add(lane, start, dur, category, label, stage, mb, layer)
