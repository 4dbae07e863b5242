"""Pipeline timing without an event queue: each stage's steps in schedule order, each starting when
its stage is free and its input has arrived (producer's end + uncontended send). Exact for the
schedules the event engine runs with contention off, in a few microseconds per step.

``closed_form`` is the cheaper estimate search uses to rank thousands of candidates:
    T = m·P + (Σ_r (F_r + B_r) − P)/v + 2·Σ d,   P = max_r (F_r + B_r)
exact for balanced pipelines ((m + (p−1)/v)·(f+b), Narayanan et al. SC'21 §2.2), within a few percent
when interleaved chunks are unbalanced.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache

from tilewright.engine.ir.mapping import Schedule
from tilewright.engine.sim.schedules import Step, predecessor, stage_order


@dataclass
class StageTimes:
    finish: float = 0.0  # end of its last pipeline step
    waits: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    last_backward: dict[int, float] = field(default_factory=dict)  # chunk → end of its last backward
    last_backward_start: dict[int, float] = field(default_factory=dict)  # chunk → start of it


@lru_cache(maxsize=64)  # a search asks for many shapes: keep the recent ones, not all
def _orders(schedule: Schedule, pp: int, m: int, v: int) -> tuple[tuple[Step, ...], ...]:
    return tuple(tuple(stage_order(schedule, r, pp, m, v)) for r in range(pp))


def run_pipeline(
    schedule: Schedule,
    pp: int,
    m: int,
    v: int,
    duration: dict[tuple[int, int, str], float],  # (rank, chunk, "F"|"B") → seconds (B includes recompute)
    send: dict[tuple[int, bool], float],  # (virtual stage, backward) → seconds to the next/previous one
    log: list[tuple[int, Step, float, float]] | None = None,  # gets (rank, step, start, end) per step
) -> list[StageTimes]:
    orders = _orders(schedule, pp, m, v)
    end: dict[tuple, float] = {}
    arrive: dict[tuple, float] = {}
    out = [StageTimes() for _ in range(pp)]
    pos = [0] * pp
    clock = [0.0] * pp
    last_vs = pp * v - 1
    remaining = sum(len(o) for o in orders)
    while remaining:
        moved = False
        for r in range(pp):
            order, st = orders[r], out[r]
            while pos[r] < len(order):
                step = order[pos[r]]
                dep = predecessor(step, r, pp, v)
                ready = clock[r]
                if dep is not None:
                    got = arrive.get(dep)
                    if got is None:
                        break
                    if got > ready:
                        sent = end[dep]
                        comm = min(got - ready, max(0.0, got - max(sent, ready)))
                        st.waits["pp_comm"] += comm
                        st.waits["bubble"] += got - ready - comm
                        ready = got
                t = ready + duration[(r, step.chunk, step.kind)]
                key = (step.kind, step.micro_batch, step.chunk, r)
                end[key] = t
                vs = step.chunk * pp + r
                if step.kind == "F":
                    arrive[key] = t + (send[(vs, False)] if vs < last_vs else 0.0)
                else:
                    arrive[key] = t + (send[(vs - 1, True)] if vs > 0 else 0.0)
                    st.last_backward[step.chunk] = t
                    st.last_backward_start[step.chunk] = ready
                if log is not None:
                    log.append((r, step, ready, t))
                clock[r] = t
                pos[r] += 1
                remaining -= 1
                moved = True
            st.finish = clock[r]
        if not moved:
            raise RuntimeError("pipeline schedule deadlocked")  # cannot happen for the schedules we build
    return out


def closed_form(stage_fb: list[float], m: int, v: int, sends: list[float]) -> float:
    period = max(stage_fb)
    return m * period + (sum(stage_fb) - period) / v + 2.0 * sum(sends)
