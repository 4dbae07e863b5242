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
from dataclasses import dataclass

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.perf.collective_costs import ProtocolChoice, has_protocols, protocol_choice
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
    usage, hop, halve = _ring_shape(hw, group)
    return Phase(dict(usage), volume / 2 if halve else volume, steps_factor * hop)


def _ring_shape(hw: HardwareGraph, group: list[int]) -> tuple[dict[int, float], float, bool]:
    """A bidirectional ring's link usage (both directions), slowest hop latency and whether the volume is
    halved (more than two members: half each way round), kept on ``hw`` per group (size-independent);
    callers copy the usage before handing it out."""
    cache = hw.__dict__.setdefault("_ring_shape", {})
    key = tuple(group)
    hit = cache.get(key)
    if hit is None:
        ring = _ring_order(hw, group)
        usage, hop_latency = ring_usage(hw, ring)
        if len(ring) > 2:
            back, _ = ring_usage(hw, ring[::-1])
            usage.update(back)
        hit = cache[key] = (dict(usage), hop_latency, len(ring) > 2)
    return hit


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
    shape = _shape(hw, kind, group)
    if shape is None:  # on a grid (reductions only)
        grid = grid_of(hw, group)
        assert grid is not None
        return grid_collective(grid, kind, group, nbytes, algorithm)
    if algorithm:
        raise ValueError(f"algorithm {algorithm!r}: only groups on a grid choose among algorithms")
    # NCCL's protocols: its small-message path within a node is LL
    if kind == "all-reduce" and nbytes < SMALL_MESSAGE_BYTES and p > 2 and not shape.named:
        usage, latency = _tree(hw, group)
        return Collective(kind, "tree", (Phase(dict(usage), nbytes, latency),))
    return shape.at(nbytes)


@dataclass(frozen=True)
class _Part:
    """One distinct phase of a switched-fabric collective without its bytes: the merged link usage (never
    handed out: each call copies it), steps × hop latency, and its bytes per member as the algorithm derives
    them from the message — ``coef`` × (message / ``divisor``), halved on a ring of more than two."""

    usage: dict[int, float]
    latency: float
    coef: float
    divisor: float | None
    halve: bool

    def nbytes(self, message: float) -> float:
        volume = self.coef * (message if self.divisor is None else message / self.divisor)
        return volume / 2 if self.halve else volume


@dataclass(frozen=True)
class _Shape:
    """What ``collective`` derives from the kind, the group and the topology alone (ring orders, routes,
    domains, merged usage, the fabric's protocols), kept on ``hw`` per (kind, group): a search times the same
    groups at many sizes and across many candidates. ``at`` applies a size with the same arithmetic, in the
    same order, as decomposing from scratch, so every phase is bit for bit the same (fresh usage dicts, the
    hierarchical all-reduce's two in-domain phases one object as before)."""

    kind: Kind
    algorithm: str
    parts: tuple[_Part, ...]
    order: tuple[int, ...]  # the part of each phase
    named: bool  # the group's fabric names its library's protocols (``has_protocols``): no tree
    protocols: ProtocolChoice | None  # how the protocols time the parts (None: steps × hop latency)

    def at(self, nbytes: float) -> Collective:
        usages = [dict(part.usage) for part in self.parts]
        sizes = [part.nbytes(nbytes) for part in self.parts]
        if self.protocols is not None:
            phases, fraction = self.protocols.pick([usages[i] for i in self.order], [sizes[i] for i in self.order])
            return Collective(self.kind, self.algorithm, phases, fraction)
        made = [Phase(u, b, part.latency) for u, b, part in zip(usages, sizes, self.parts, strict=True)]
        return Collective(self.kind, self.algorithm, tuple(made[i] for i in self.order))


def _shape(hw: HardwareGraph, kind: Kind, group: list[int]) -> _Shape | None:
    """The cached ``_Shape`` of ``kind`` over ``group`` (None: the group lies on a grid, ``collective_grid``)."""
    cache = hw.__dict__.setdefault("_collective_shape", {})
    key = (kind, tuple(group))
    if key in cache:
        return cache[key]
    shape = cache[key] = None if kind in REDUCTIONS and grid_of(hw, group) is not None else _new_shape(hw, kind, group)
    return shape


def forget_shapes(hw: HardwareGraph) -> None:
    """Drop what ``collective`` keeps on ``hw`` (shapes, rings, trees, ring walks): the next call decomposes
    from scratch, as tests do to compare cached decompositions against cold ones."""
    for key in ("_collective_shape", "_ring_shape", "_tree_shape", "_ring_usage"):
        hw.__dict__.pop(key, None)


def _new_shape(hw: HardwareGraph, kind: Kind, group: list[int]) -> _Shape:
    p = len(group)
    domains = _domains(hw, group)
    sizes = {len(v) for v in domains.values()}
    if len(domains) > 1 and len(sizes) == 1 and sizes.pop() > 1:
        name, (parts, order, steps) = "hierarchical", _hierarchical(hw, kind, domains)
    else:
        f = (p - 1) / p
        ring_steps, coef = (2 * (p - 1), 2 * f) if kind == "all-reduce" else (p - 1, f)
        usage, hop, halve = _ring_shape(hw, group)
        name, parts, order = "ring", (_Part(usage, ring_steps * hop, coef, None, halve),), (0,)
        steps = [(ring_steps, group)]
    named = has_protocols(hw, group)
    timed = [(parts[i].usage, s, members) for i, (s, members) in zip(order, steps, strict=True)]
    return _Shape(kind, name, parts, order, named, protocol_choice(hw, timed) if named else None)


def _tree(hw: HardwareGraph, group: list[int]) -> tuple[dict[int, float], float]:
    """The small-message binomial tree's link usage and latency, kept on ``hw`` per group."""
    cache = hw.__dict__.setdefault("_tree_shape", {})
    key = tuple(group)
    hit = cache.get(key)
    if hit is None:
        p = len(group)
        ring = _ring_order(hw, group)
        _, hop = ring_usage(hw, ring)
        steps = 2 * math.ceil(math.log2(p))
        tree_usage: Counter = Counter()
        for i in range(1, p):  # binomial tree edges, each crossed once up and once down
            parent = ring[(i - 1) // 2]
            tree_usage.update(hw.device_route(ring[i], parent))
            tree_usage.update(hw.device_route(parent, ring[i]))
        hit = cache[key] = (dict(tree_usage), steps * hop)
    return hit


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
    hw: HardwareGraph, kind: Kind, domains: dict[str, list[int]]
) -> tuple[tuple[_Part, ...], tuple[int, ...], list[tuple[float, list[int]]]]:
    """The hierarchical algorithm's distinct parts (in-domain, cross-domain), the part of each phase, and
    each phase's steps and the members whose fabric carries it."""
    groups = list(domains.values())
    q = len(groups[0])  # members per domain
    n = len(groups)  # domains
    local_f, cross_f = (q - 1) / q, (n - 1) / n
    rails = [[g[i] for g in groups] for i in range(q)]
    cross_steps, cross_coef = (2 * (n - 1), 2 * cross_f) if kind == "all-reduce" else (n - 1, cross_f)
    inner = _merged_rings(hw, groups, q - 1, local_f, None)
    cross = _merged_rings(hw, rails, cross_steps, cross_coef, q)
    local, outer = (q - 1, groups[0]), (cross_steps, rails[0])
    if kind == "all-reduce":
        return (inner, cross), (0, 1, 0), [local, outer, local]
    if kind == "reduce-scatter":
        return (inner, cross), (0, 1), [local, outer]
    return (cross, inner), (0, 1), [outer, local]


def _merged_rings(
    hw: HardwareGraph, rings: list[list[int]], steps: float, coef: float, divisor: float | None
) -> _Part:
    """Concurrent rings as one part (``merge_phases``): their usage added, the slowest's latency, the first
    ring's volume."""
    shapes = [_ring_shape(hw, r) for r in rings]
    merged = _merge([Phase(usage, 0.0, steps * hop) for usage, hop, _ in shapes])
    return _Part(merged.usage, merged.latency_s, coef, divisor, shapes[0][2])


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
