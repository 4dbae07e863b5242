"""The uncontended pipeline: each stage's steps in table order, each starting when its stage is free and
its input has arrived (producer's end + uncontended send). Exact for what the event engine runs with
contention off, in a few microseconds per step.

This is the one recurrence: the analytic engine runs it for training and inference alike, and search
(``engine.search.parallel.estimate``) for the few candidates it refines. ``split_wait`` is the one
place a pipeline wait is split into transfer and bubble; the event engine uses it too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from tilewright.engine.ir.mapping import Schedule
from tilewright.engine.plan.steps import StepRow, Table, training_table


@dataclass
class StageTimes:
    finish: float = 0.0  # end of its last pipeline step
    waits: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    last_backward: dict[int, float] = field(default_factory=dict)  # chunk → end of its last backward
    last_backward_start: dict[int, float] = field(default_factory=dict)  # chunk → start of it


def split_wait(times: dict[str, float], free: float, ready: float, sent: float) -> None:
    """A stage free at ``free`` waited until ``ready`` for an input its producer finished at ``sent``:
    the part after both is the transfer (pp_comm), the rest waiting for the producer (bubble)."""
    comm = min(ready - free, max(0.0, ready - max(sent, free)))
    times["pp_comm"] += comm
    times["bubble"] += ready - free - comm


def run_table(
    table: Table,
    duration: Mapping[tuple, float],  # StepRow.dkey → seconds (a backward's includes its recompute)
    send: Mapping[tuple, float],  # StepRow.send → seconds to the consumer
    log: list[tuple[int, StepRow, float, float]] | None = None,  # gets (rank, row, start, end) per step
    end: dict[tuple, float] | None = None,  # gets StepRow.key → end of that step
    blocking: bool = False,
) -> list[StageTimes]:
    """``blocking`` (``plan.pipeline_p2p``): a stage waits for each of its sends (its ``pp_comm``), which
    arrives as the stage is free again; otherwise it computes on while the send flies."""
    pp = len(table)
    end = {} if end is None else end
    arrive: dict[tuple, float] = {}
    out = [StageTimes() for _ in range(pp)]
    pos = [0] * pp
    clock = [0.0] * pp
    remaining = sum(len(rows) for rows in table)
    while remaining:
        moved = False
        for r in range(pp):
            rows, st = table[r], out[r]
            while pos[r] < len(rows):
                row = rows[pos[r]]
                ready = clock[r]
                dep = row.dep
                if dep is not None:
                    got = arrive.get(dep)
                    if got is None:
                        break
                    if got > ready:
                        split_wait(st.waits, ready, got, end[dep])
                        ready = got
                t = ready + duration[row.dkey]
                key = row.key
                end[key] = t
                if log is not None:
                    log.append((r, row, ready, t))
                if row.send is None:
                    arrive[key] = t
                else:
                    arrive[key] = sent = t + send[row.send]
                    if blocking:
                        st.waits["pp_comm"] += sent - t
                        t = sent
                if row.kind == "B":
                    st.last_backward[row.chunk] = t  # what follows it (the reduction) waits for a blocking send
                    st.last_backward_start[row.chunk] = ready
                clock[r] = t
                pos[r] += 1
                remaining -= 1
                moved = True
            st.finish = clock[r]
        if not moved:
            raise RuntimeError("pipeline schedule deadlocked")  # cannot happen for the tables we build
    return out


def run_pipeline(
    schedule: Schedule,
    pp: int,
    m: int,
    v: int,
    duration: Mapping[tuple[int, int, str], float],  # (rank, chunk, "F"|"B") → seconds (B includes recompute)
    send: Mapping[tuple[int, bool], float],  # (virtual stage, backward) → seconds to the next/previous one
    log: list[tuple[int, StepRow, float, float]] | None = None,
    blocking: bool = False,
) -> list[StageTimes]:
    """One training iteration of ``schedule`` by the recurrence (``blocking``: as ``run_table``)."""
    return run_table(training_table(schedule, pp, m, v), duration, send, log, blocking=blocking)
