"""Simulation units and the traffic they can issue, known before the run starts.

A *unit* is what one simpy process stands for: ``(replica, member)``. Aggregated (the default), one unit
per stage stands for every data-parallel replica and every device of its tensor group; not aggregated,
every device of every replica is its own unit. Knowing every link-usage pattern up front lets the flow
network shrink them (``compress``) and lets tensor-parallel collectives on links nothing else touches
be folded into compute.
"""

from __future__ import annotations

from tilewright.engine.perf.collectives import Collective
from tilewright.engine.plan.plan import Plan

WHOLE_GROUP = -1  # the member index of an aggregated unit
Unit = tuple[int, int]  # (data-parallel replica, tensor-parallel member or WHOLE_GROUP)


def member_of(u: Unit) -> int | None:
    return None if u[1] == WHOLE_GROUP else u[1]


def dram_usage(plan: Plan, r: int, u: Unit, shared: bool = True) -> dict[int, float]:
    """An aggregated unit stands for every replica's tensor group: with links shared (contention on) its
    DRAM stream carries all of them, since replicas in lockstep share their ports; alone (contention off)
    it is one replica's group, as the analytic engine times it."""
    if u[1] == WHOLE_GROUP:
        return plan.dram_usage_replicas(r) if shared else plan.dram_usage(r, u[0])
    return plan.dram_usage_member(r, u[0], u[1])


def p2p(plan: Plan, vs: int, u: Unit, backward: bool) -> Collective:
    if u[1] == WHOLE_GROUP:
        return plan.p2p(vs, u[0], backward)
    return plan.p2p_member(vs, u[0], backward, u[1])


def traffic_patterns(
    plan: Plan, units: list[Unit], shared: bool = True
) -> tuple[set[tuple[int, int]], list[dict[int, float]]]:
    """Every link-usage pattern this run can issue, and the (stage, replica) tensor groups whose
    collectives' links carry no other traffic (those are folded into compute)."""
    tp_links: dict[tuple[int, int], set[int]] = {}
    tp_patterns: dict[tuple[int, int], list[dict[int, float]]] = {}
    for r, st in enumerate(plan.stages):
        for j in range(plan.dp):
            links: set[int] = set()
            pats = []
            for ps in (*st.passes.values(), *st.alone.values()):  # alone: the combined 1F1B's (plan.schedules)
                for seg in ps.segments:
                    if seg.comm:
                        for ph in plan.tp_collective(r, j, seg.comm[0], seg.comm[1]).phases:
                            links.update(ph.usage)  # in place (``|=`` with a keys view builds a new set)
                            pats.append(ph.usage)
            tp_links[(r, j)] = links
            tp_patterns[(r, j)] = pats
    count: dict[int, int] = {}
    for links in tp_links.values():
        for lk in links:
            count[lk] = count.get(lk, 0) + 1
    busy: set[int] = {lk for lk, n in count.items() if n > 1}  # links more than one tensor group crosses
    others: list[dict[int, float]] = []
    members = sorted({u[1] for u in units})
    for vs in range(plan.virtual_stages - 1):
        for j in range(plan.dp):
            for back in (False, True):
                for i in members:
                    others += [ph.usage for ph in p2p(plan, vs, (j, i), back).phases]
    for r, st in enumerate(plan.stages):
        for c in st.chunk_layers:
            for part in plan.dp_buckets(r, c):
                others += [ph.usage for ph in part.phases]
        others += [ph.usage for ph in plan.zero_gather(r).phases]
        if any(ps.has_dram for ps in st.passes.values()):
            others += [dram_usage(plan, r, u, shared) for u in units]
    others += [ph.usage for ph in plan.tied_collective().phases]  # the tied embedding's all-reduce
    for usage in others:  # in place: ``busy |= usage.keys()`` copied the growing set once per pattern
        busy.update(usage)
    private = {key for key, links in tp_links.items() if links and not links & busy}
    patterns = others + [u for key, pats in tp_patterns.items() if key not in private for u in pats]
    return private, patterns
