"""Uncontended timing both engines and search share: one pass's times, the DRAM floor, search's closed form.

``dram_floor``: a training iteration can never end before its busiest DRAM link — a port's channel, or a
NoC link on the way to the ports — has carried every byte all stages stream across it. Passes timed one
by one see only their own group on a link; stages whose streams share ports (a wafer's edge DRAM, dies
whose ports several stages use) are then bounded by this floor, which both engines apply (the event
engine with contention off; with contention on its flows respect it by construction).

``closed_form`` is the cheaper estimate search uses to rank thousands of candidates:
    T = m·P + (Σ_r (F_r + B_r) − P)/v + 2·Σ d,   P = max_r (F_r + B_r)
exact for balanced pipelines ((m + (p−1)/v)·(f+b), Narayanan et al. SC'21 §2.2), within a few percent
when interleaved chunks are unbalanced. ``engine.plan.recurrence`` is the exact pipeline.
"""

from __future__ import annotations

from tilewright.engine.plan.passes import ChunkPass
from tilewright.engine.plan.plan import Plan
from tilewright.engine.plan.sharding import comm_category, spans_replicas


def pass_times(plan: Plan, r: int, ps: ChunkPass, replica: int = 0) -> tuple[float, float, float]:
    """(busy, compute, tp comm) seconds of one pass of stage ``r`` on one replica's tensor group,
    uncontended: its segments' rooflines (or DRAM streams, if longer) and its collectives."""
    comm = sum(plan.tp_time(r, replica, *seg.comm) for seg in ps.segments if seg.comm)
    busy = sum(plan.segment_seconds(r, seg) for seg in ps.segments) if ps.has_dram else ps.busy_s
    return busy, ps.compute_s, comm


def pass_replica_comm(plan: Plan, r: int, ps: ChunkPass | None) -> dict[str, float]:
    """Seconds of a pass's collectives over replicas, part of its comm time, by the category each is
    reported under (``plan.sharding.comm_category``: ZeRO-2/3's ``dp_comm``, the context ring's ``cp_comm``,
    the experts' all-to-all ``ep_comm``); the rest of the pass's comm is ``tp_comm``."""
    out: dict[str, float] = {}
    if ps is None or not ps.has_dp_comm:
        return out
    for seg in ps.segments:
        if seg.comm and spans_replicas(seg.comm[0]):
            category = comm_category(seg.comm[0])
            out[category] = out.get(category, 0.0) + plan.tp_time(r, 0, *seg.comm)
    return out


def pass_parts(plan: Plan, r: int, ps: ChunkPass | None) -> tuple[float, float, float, float, float]:
    """(duration, compute, memory stall, tp comm, host wait) of one pass of stage ``r``, uncontended. Host
    wait: the device idle for the host (kernels issued slower than they run, ``plan.launch``; the serving
    runtime's step, ``Compute.runtime_step_s``); memory stall the rest of the pass's busy time beyond
    its arithmetic."""
    if ps is None:
        return 0.0, 0.0, 0.0, 0.0, 0.0
    busy, compute, comm = pass_times(plan, r, ps)
    host = host_wait(ps, busy - compute)
    return busy + comm, compute, busy - compute - host, comm, host


def host_wait(ps: ChunkPass, beyond_compute: float) -> float:
    """Seconds of a pass (or segment) the device waits for the host, at most its time beyond arithmetic."""
    return min(ps.dispatch_wait_s, max(beyond_compute, 0.0))


def closed_form(stage_fb: list[float], m: int, v: int, sends: list[float]) -> float:
    period = max(stage_fb)
    return m * period + (sum(stage_fb) - period) / v + 2.0 * sum(sends)


def dram_link_bytes(plan: Plan) -> dict[int, float]:
    """Bytes each link carries in one training iteration for every stage's DRAM streams (all replicas)."""
    from tilewright.engine.plan.program import TrainingProgram  # program imports the plan; timing stays light

    program = TrainingProgram(plan)
    load: dict[int, float] = {}
    for r, st in enumerate(plan.stages):
        if not any(ps.has_dram for ps in st.passes.values()):
            continue
        per_member = 0.0
        for pre, ps, _grow, _free in program.work(r):
            for p in (pre, ps):
                if p is not None and p.has_dram:
                    per_member += sum(seg.dram_bytes for seg in p.segments)
        for j in range(len(st.groups)):
            for lk, u in plan.dram_usage(r, j).items():
                load[lk] = load.get(lk, 0.0) + u * per_member
    return load


def dram_floor(plan: Plan) -> tuple[float, int | None]:
    """(seconds, link) of the busiest DRAM link over one training iteration; (0, None) without DRAM streams.
    Cached on the plan (its passes never change once built)."""
    hit = plan.__dict__.get("_dram_floor")
    if hit is None:
        best, link = 0.0, None
        if any(ps.has_dram for st in plan.stages for ps in st.passes.values()):
            for lk, nbytes in dram_link_bytes(plan).items():
                t = nbytes / plan.hw.links[lk].bandwidth
                if t > best:
                    best, link = t, lk
        hit = plan.__dict__["_dram_floor"] = (best, link)
    return hit


def floor_note(plan: Plan, end: float) -> str | None:
    """The note a result carries when the DRAM floor, not the passes, set the iteration's end."""
    floor, link = dram_floor(plan)
    if link is None or floor <= end:
        return None
    lk = plan.hw.links[link]
    return (f"DRAM bound: {lk.src} → {lk.dst} carries {floor * lk.bandwidth / 1e9:.4g} GB of every stage's DRAM "
            f"streams per iteration, ≥ {floor:.4g} s; the passes timed alone would end at {end:.4g} s")
