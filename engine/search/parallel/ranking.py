"""What the parallelism search hands back: ranked candidates, the counts of its walk, and their JSON form;
and the bounded list of the fastest candidates that both stages keep while they walk (``Best``)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from itertools import count

from tilewright.engine.results.result import Result
from tilewright.engine.search.parallel.candidate import Candidate


@dataclass
class Ranked:
    candidate: Candidate
    iteration_time_s: float  # fast estimate (the analytic engine's model)
    peak_memory_bytes: float
    event: Result | None = None
    spatial_splits: list[dict] = field(default_factory=list)  # grid devices: each forward op's split per stage


@dataclass
class SearchResult:
    ranked: list[Ranked]
    global_batch: int
    devices: int
    space: int = 0  # candidates before pruning
    evaluated: int = 0  # memory computed
    feasible: int = 0  # fit in memory
    timed: int = 0  # iteration time estimated (the rest were bounded out)
    extended: int = 0  # second-stage candidates (ep, cp, ZeRO-2/3, FSDP, offload, overlap) timed analytically
    wall_time_s: float = 0.0
    search_time_s: float = 0.0  # enumeration and ranking, before re-simulation
    notes: list[str] = field(default_factory=list)


class Best:
    """The ``keep`` fastest candidates so far; its worst time is the bound others must beat."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.heap: list[tuple[float, int, Ranked]] = []
        self._n = count()

    @property
    def bound(self) -> float:
        return -self.heap[0][0] if len(self.heap) >= self.keep else float("inf")

    def offer(self, r: Ranked) -> None:
        item = (-r.iteration_time_s, next(self._n), r)
        if len(self.heap) < self.keep:
            heapq.heappush(self.heap, item)
        elif r.iteration_time_s < -self.heap[0][0]:
            heapq.heapreplace(self.heap, item)

    def sorted(self) -> list[Ranked]:
        return [r for _, _, r in sorted(self.heap, key=lambda t: (-t[0], t[1]))]


# what a candidate re-simulated on the event engine reports (``resimulate``); null on the others
EVENT_FIELDS = ("event_iteration_time_s", "event_samples_per_s", "event_peak_memory_bytes", "event_oom")


def result_json(result: SearchResult) -> dict:
    rows = []
    for r in result.ranked:
        row = r.candidate.as_json()
        row.update(
            iteration_time_s=r.iteration_time_s,
            samples_per_s=result.global_batch / r.iteration_time_s if r.iteration_time_s > 0 else 0.0,
            peak_memory_bytes=r.peak_memory_bytes,
        )
        # Every row has every key, null where a candidate has no value (not re-simulated, not a grid device):
        # a reader of the JSON then needs no ``.get`` to tell "absent" from "missing".
        row["spatial_splits"] = r.spatial_splits or None
        row.update(dict.fromkeys(EVENT_FIELDS))
        if r.event is not None:
            row["event_iteration_time_s"] = r.event.iteration_time_s
            row["event_samples_per_s"] = result.global_batch / r.event.iteration_time_s
            row["event_peak_memory_bytes"] = r.event.peak_memory_bytes
            row["event_oom"] = r.event.oom is not None or r.event.host_oom is not None  # offloaded state too
        rows.append(row)
    return {
        "candidates": rows,
        "devices": result.devices,
        "global_batch": result.global_batch,
        "space": result.space,
        "evaluated": result.evaluated,
        "feasible": result.feasible,
        "timed": result.timed,
        "extended": result.extended,
        "search_time_s": result.search_time_s,
        "wall_time_s": result.wall_time_s,
        "notes": result.notes,
    }
