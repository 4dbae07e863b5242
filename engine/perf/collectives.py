"""Collectives decomposed by algorithm onto the real topology, as link-usage patterns.

Groups on a grid of devices (meshes, tori, rings, meshes of meshes) get the algorithms of
``collective_grid`` — bidirectional lines on open axes, rings only where the ring closes in one step,
row-then-column on 2-D meshes and tori, hierarchical in-chip then cross-chip — chosen by cost. Groups
behind switches or graphs (GPU nodes and clusters) keep the algorithms below.

A collective over a group becomes one or more *phases*; in each phase every member sends the same
number of bytes along its own route, at one common rate. A phase is therefore one flow entity whose
``usage[link]`` counts how many members' routes cross that link — the event engine shares links
max-min fairly between such entities, the analytic engine reads the same phase without contention.

Algorithms (Thakur et al., "Optimization of Collective Communication Operations in MPICH", 2005;
NCCL's ring and tree; hierarchical as in Megatron/NCCL over DGX nodes):
- ring: all-reduce moves 2(p-1)/p·N per member in 2(p-1) steps; reduce-scatter/all-gather (p-1)/p·N;
  bidirectional (half the data each way round the ring), since links are full duplex.
- hierarchical: reduce-scatter inside each domain (node, die), all-reduce of the 1/q shard across
  domains (q parallel rings, one per local rank — the "rails"), all-gather inside each domain.
- torus / mesh (``collective_grid``): a group filling a box of grid coordinates runs per dimension
  (bucket algorithm), data shrinking by each dimension's size — rings where the axis wraps, else lines.
- tree: small messages (< 64 KiB): 2·log2(p) latency-bound steps of the whole message.
- pairwise exchange (HyPar's halving levels): member i and member i XOR stride swap equal amounts, every
  pair at once, each direction over its own route.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.perf.collective_costs import has_protocols, protocol_phases
from tilewright.engine.perf.collective_grid import (
    REDUCTIONS,
    SMALL_MESSAGE_BYTES,
    grid_candidates,
    grid_collective,
    grid_of,
)
from tilewright.engine.perf.collective_grid import concurrent as grid_concurrent
from tilewright.engine.perf.collective_grid import snake_order as _ring_order
from tilewright.engine.perf.collective_phase import Collective, Kind, Phase, merge_collectives, ring_usage
from tilewright.engine.perf.collective_phase import merge_phases as _merge
from tilewright.engine.perf.collective_phase import route_latency as _route_latency

__all__ = [
    "SMALL_MESSAGE_BYTES",
    "Collective",
    "Kind",
    "Phase",
    "candidates",
    "collective",
    "concurrent_collective",
    "pairwise_exchange",
    "point_to_point",
    "ring_phase",
]


def ring_phase(hw: HardwareGraph, group: list[int], steps_factor: float, volume: float) -> Phase:
    """``volume`` bytes per member over a bidirectional ring (half each way: links are full duplex);
    ``steps_factor`` steps of per-hop latency."""
    ring = _ring_order(hw, group)
    usage, hop_latency = ring_usage(hw, ring)
    if len(ring) > 2:
        back, _ = ring_usage(hw, ring[::-1])
        usage.update(back)
        volume /= 2
    return Phase(dict(usage), volume, steps_factor * hop_latency)


def candidates(hw: HardwareGraph, kind: Kind, group: list[int], nbytes: float) -> list[Collective]:
    """Every algorithm ``collective`` chooses among for this group (one, where the topology offers no
    choice); ``collective`` returns the cheapest. Search fits each as a line in the message size."""
    if len(group) > 1 and nbytes > 0 and kind in REDUCTIONS:
        grid = grid_of(hw, group)
        if grid is not None:
            return grid_candidates(grid, kind, group, nbytes)
    return [collective(hw, kind, group, nbytes)]


def _domains(hw: HardwareGraph, group: list[int]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for d in group:
        out[hw.devices[d].node.rsplit("/", 1)[0]].append(d)
    return out


def collective(
    hw: HardwareGraph, kind: Kind, group: list[int], nbytes: float, algorithm: str | None = None
) -> Collective:
    """Decompose a collective of ``nbytes`` (the full tensor) over ``group`` into phases. ``algorithm``
    (grids only) restricts the choice to algorithms whose name starts with it, e.g. "ring" or "line"."""
    p = len(group)
    if p <= 1 or nbytes <= 0:
        return Collective(kind, "none", ())
    if kind in REDUCTIONS:
        grid = grid_of(hw, group)
        if grid is not None:
            return grid_collective(grid, kind, group, nbytes, algorithm)
    if algorithm:
        raise ValueError(f"algorithm {algorithm!r}: only groups on a grid choose among algorithms")
    protocols = has_protocols(hw, group)  # NCCL's protocols: its small-message path within a node is LL
    if kind == "all-reduce" and nbytes < SMALL_MESSAGE_BYTES and p > 2 and not protocols:
        ring = _ring_order(hw, group)
        _, hop = ring_usage(hw, ring)
        steps = 2 * math.ceil(math.log2(p))
        tree_usage: Counter = Counter()
        for i in range(1, p):  # binomial tree edges, each crossed once up and once down
            parent = ring[(i - 1) // 2]
            tree_usage.update(hw.device_route(ring[i], parent))
            tree_usage.update(hw.device_route(parent, ring[i]))
        return Collective(kind, "tree", (Phase(dict(tree_usage), nbytes, steps * hop),))
    domains = _domains(hw, group)
    sizes = {len(v) for v in domains.values()}
    if len(domains) > 1 and len(sizes) == 1 and sizes.pop() > 1:
        name, parts = "hierarchical", _hierarchical(hw, kind, domains, nbytes)
    else:
        f = (p - 1) / p
        steps, volume = (2 * (p - 1), 2 * f * nbytes) if kind == "all-reduce" else (p - 1, f * nbytes)
        name, parts = "ring", [(ring_phase(hw, group, steps, volume), steps, group)]
    timed = protocol_phases(hw, parts) if protocols else None
    if timed is not None:
        return Collective(kind, name, *timed)
    return Collective(kind, name, tuple(ph for ph, _, _ in parts))


def concurrent_collective(hw: HardwareGraph, kind: Kind, groups: list[list[int]], nbytes: float) -> Collective:
    """The same collective on disjoint groups at once (the lines of one axis of a 2-D tensor group), as one
    collective whose phases carry every group's link usage. Congruent groups choose the same algorithm and
    merge phase by phase; where they would not, groups on one grid run the cheapest algorithm they can all
    run (``collective_grid.concurrent``), others one after the other (an upper bound)."""
    parts = [collective(hw, kind, g, nbytes) for g in groups]
    if len(parts) == 1 or not parts[0].phases:
        return parts[0]
    if len({(c.algorithm, len(c.phases)) for c in parts}) == 1:
        return merge_collectives(kind, parts)
    grid = grid_of(hw, [d for g in groups for d in g]) if kind in REDUCTIONS else None
    if grid is not None:
        return grid_concurrent(grid, kind, groups, nbytes)
    return Collective(kind, "sequential", tuple(ph for c in parts for ph in c.phases))


def _hierarchical(
    hw: HardwareGraph, kind: Kind, domains: dict[str, list[int]], nbytes: float
) -> list[tuple[Phase, float, list[int]]]:
    """Phases of the hierarchical algorithm, each with its steps and the members whose fabric carries it."""
    groups = list(domains.values())
    q = len(groups[0])  # members per domain
    n = len(groups)  # domains
    local_f, cross_f = (q - 1) / q, (n - 1) / n
    inner = _merge([ring_phase(hw, g, q - 1, local_f * nbytes) for g in groups])
    rails = [[g[i] for g in groups] for i in range(q)]
    shard = nbytes / q
    local = (inner, q - 1, groups[0])
    if kind == "all-reduce":
        cross = _merge([ring_phase(hw, r, 2 * (n - 1), 2 * cross_f * shard) for r in rails])
        return [local, (cross, 2 * (n - 1), rails[0]), local]
    cross = _merge([ring_phase(hw, r, n - 1, cross_f * shard) for r in rails])
    outer = (cross, n - 1, rails[0])
    return [local, outer] if kind == "reduce-scatter" else [outer, local]


def _sends(hw: HardwareGraph, pairs: list[tuple[int, int]], nbytes: float) -> Phase | None:
    """Concurrent sends of ``nbytes`` each over their own routes, as one phase (None: nothing moves)."""
    usage: Counter = Counter()
    latency = 0.0
    for a, b in pairs:
        if a == b:
            continue
        route = hw.device_route(a, b)
        usage.update(route)
        latency = max(latency, _route_latency(hw, route))
    return Phase(dict(usage), nbytes, latency) if usage else None


def point_to_point(hw: HardwareGraph, pairs: list[tuple[int, int]], nbytes: float) -> Collective:
    """Parallel sends (member i of one group to member i of the next), ``nbytes`` each."""
    phase = _sends(hw, pairs, nbytes)
    if phase is None:
        return Collective("p2p", "none", ())
    return Collective("p2p", "direct", (phase,))


def pairwise_exchange(hw: HardwareGraph, group: list[int], stride: int, nbytes: float) -> Collective:
    """Member i of ``group`` sends ``nbytes`` to member i XOR ``stride`` — so every pair swaps, both
    directions — all at once on the real routes. With ``stride`` = p / 2^h this is the exchange between
    the two halves of every level-h group of HyPar's array (Song et al., HPCA 2019): the halves of a
    group sit ``stride`` apart in the array order, and each member carries its share of the group's tensor.
    """
    p = len(group)
    if stride < 1 or p % (2 * stride):
        raise ValueError(f"a pairwise exchange at stride {stride} needs a multiple of {2 * stride} members, got {p}")
    phase = _sends(hw, [(group[i], group[i ^ stride]) for i in range(p)], nbytes) if nbytes > 0 else None
    if phase is None:
        return Collective("exchange", "none", ())
    return Collective("exchange", "pairwise", (phase,))
