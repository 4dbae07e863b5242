"""Uncontended timing both engines and search share: one pass's times, and search's closed form.

``closed_form`` is the cheaper estimate search uses to rank thousands of candidates:
    T = m·P + (Σ_r (F_r + B_r) − P)/v + 2·Σ d,   P = max_r (F_r + B_r)
exact for balanced pipelines ((m + (p−1)/v)·(f+b), Narayanan et al. SC'21 §2.2), within a few percent
when interleaved chunks are unbalanced. ``engine.plan.recurrence`` is the exact pipeline.
"""

from __future__ import annotations

from tilewright.engine.plan.passes import ChunkPass
from tilewright.engine.plan.plan import Plan


def pass_times(plan: Plan, r: int, ps: ChunkPass, replica: int = 0) -> tuple[float, float, float]:
    """(busy, compute, tp comm) seconds of one pass of stage ``r`` on one replica's tensor group,
    uncontended: its segments' rooflines (or DRAM streams, if longer) and its collectives."""
    comm = sum(plan.tp_time(r, replica, *seg.comm) for seg in ps.segments if seg.comm)
    busy = sum(plan.segment_seconds(r, seg) for seg in ps.segments) if ps.has_dram else ps.busy_s
    return busy, ps.compute_s, comm


def pass_parts(plan: Plan, r: int, ps: ChunkPass | None) -> tuple[float, float, float, float]:
    """(duration, compute, memory stall, tp comm) of one pass of stage ``r``, uncontended."""
    if ps is None:
        return 0.0, 0.0, 0.0, 0.0
    busy, compute, comm = pass_times(plan, r, ps)
    return busy + comm, compute, busy - compute, comm


def closed_form(stage_fb: list[float], m: int, v: int, sends: list[float]) -> float:
    period = max(stage_fb)
    return m * period + (sum(stage_fb) - period) / v + 2.0 * sum(sends)
