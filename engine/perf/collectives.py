"""Collectives decomposed by algorithm onto the real topology, as link-usage patterns.

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
- torus / multi-dimensional mesh: a group filling a box of grid coordinates runs the ring algorithm
  per dimension (bucket algorithm), data shrinking by each dimension's size.
- tree: small messages (< 64 KiB): 2·log2(p) latency-bound steps of the whole message.
- pairwise exchange (HyPar's halving levels): member i and member i XOR stride swap equal amounts, every
  pair at once, each direction over its own route.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Literal

from tilewright.engine.hardware.graph import HardwareGraph

Kind = Literal["all-reduce", "reduce-scatter", "all-gather", "broadcast", "p2p", "exchange"]
SMALL_MESSAGE_BYTES = 64 * 1024


@dataclass(frozen=True)
class Phase:
    usage: dict[int, float]  # link id → members crossing it (per unit of per-member bytes)
    bytes_per_member: float
    latency_s: float  # all steps' latency, the α term

    def time(self, hw: HardwareGraph) -> float:
        """Duration without contention: the most loaded link over its bandwidth, plus latency."""
        if not self.usage or self.bytes_per_member <= 0:
            return self.latency_s
        worst = max(u / hw.links[lk].bandwidth for lk, u in self.usage.items())
        return self.bytes_per_member * worst + self.latency_s


@dataclass(frozen=True)
class Collective:
    kind: Kind
    algorithm: str
    phases: tuple[Phase, ...]

    def time(self, hw: HardwareGraph) -> float:
        return sum(p.time(hw) for p in self.phases)


def _route_latency(hw: HardwareGraph, route: list[int]) -> float:
    return sum(hw.links[lk].latency_s for lk in route)


def _ring_usage(hw: HardwareGraph, ring: list[int]) -> tuple[Counter, float]:
    usage: Counter = Counter()
    worst_latency = 0.0
    for a, b in zip(ring, ring[1:] + ring[:1], strict=True):
        route = hw.device_route(a, b)
        usage.update(route)
        worst_latency = max(worst_latency, _route_latency(hw, route))
    return usage, worst_latency


def _ring_order(hw: HardwareGraph, group: list[int]) -> list[int]:
    """Snake order over grid coordinates keeps ring neighbours adjacent on meshes; else as given."""
    coords = [hw.devices[d].coord for d in group]
    if any(c is None or len(c) < 2 for c in coords):
        return list(group)

    def key(d: int) -> tuple[int, ...]:
        c = hw.devices[d].coord
        assert c is not None
        row, col = c[0], c[1]
        return (*c[2:], row, col if row % 2 == 0 else -col)

    return sorted(group, key=key)


def ring_phase(hw: HardwareGraph, group: list[int], steps_factor: float, volume: float) -> Phase:
    """``volume`` bytes per member over a bidirectional ring (half each way: links are full duplex);
    ``steps_factor`` steps of per-hop latency."""
    ring = _ring_order(hw, group)
    usage, hop_latency = _ring_usage(hw, ring)
    if len(ring) > 2:
        back, _ = _ring_usage(hw, ring[::-1])
        usage.update(back)
        volume /= 2
    return Phase(dict(usage), volume, steps_factor * hop_latency)


def _box_dims(hw: HardwareGraph, group: list[int]) -> list[list[list[int]]] | None:
    """For a group filling a box of ≥ 2 grid dimensions: per dimension, the rings along it."""
    coords = {d: hw.devices[d].coord for d in group}
    if any(c is None or len(c) < 2 for c in coords.values()):
        return None
    ndim = len(next(iter(coords.values())))
    values = [sorted({c[i] for c in coords.values()}) for i in range(ndim)]  # type: ignore[index]
    sizes = [len(v) for v in values]
    if math.prod(sizes) != len(group) or sum(1 for n in sizes if n > 1) < 2:
        return None
    per_dim = []
    for i, n in enumerate(sizes):
        if n == 1:
            continue
        lines: dict[tuple, list[int]] = defaultdict(list)
        for d, c in sorted(coords.items(), key=lambda kv: kv[1]):
            lines[tuple(c[:i]) + tuple(c[i + 1 :])].append(d)  # type: ignore[index]
        per_dim.append(list(lines.values()))
    return per_dim


def _torus(hw: HardwareGraph, kind: Kind, dims: list[list[list[int]]], nbytes: float) -> Collective:
    """Bucket algorithm: reduce-scatter along each dimension in turn (data shrinking by its size),
    then all-gather back in reverse order; every ring of a dimension runs at once."""
    scatter, gather = [], []
    size = nbytes
    for lines in dims:
        n = len(lines[0])
        vol = (n - 1) / n * size
        scatter.append(_merge([ring_phase(hw, line, n - 1, vol) for line in lines]))
        gather.insert(0, _merge([ring_phase(hw, line, n - 1, vol) for line in lines]))
        size /= n
    if kind == "all-reduce":
        return Collective(kind, "torus", tuple(scatter + gather))
    return Collective(kind, "torus", tuple(scatter if kind == "reduce-scatter" else gather))


def _domains(hw: HardwareGraph, group: list[int]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for d in group:
        out[hw.devices[d].node.rsplit("/", 1)[0]].append(d)
    return out


def collective(hw: HardwareGraph, kind: Kind, group: list[int], nbytes: float) -> Collective:
    """Decompose a collective of ``nbytes`` (the full tensor) over ``group`` into phases."""
    p = len(group)
    if p <= 1 or nbytes <= 0:
        return Collective(kind, "none", ())
    if kind == "all-reduce" and nbytes < SMALL_MESSAGE_BYTES and p > 2:
        ring = _ring_order(hw, group)
        _, hop = _ring_usage(hw, ring)
        steps = 2 * math.ceil(math.log2(p))
        tree_usage: Counter = Counter()
        for i in range(1, p):  # binomial tree edges, each crossed once up and once down
            parent = ring[(i - 1) // 2]
            tree_usage.update(hw.device_route(ring[i], parent))
            tree_usage.update(hw.device_route(parent, ring[i]))
        return Collective(kind, "tree", (Phase(dict(tree_usage), nbytes, steps * hop),))
    box = _box_dims(hw, group)
    if box is not None and kind in ("all-reduce", "reduce-scatter", "all-gather"):
        return _torus(hw, kind, box, nbytes)
    domains = _domains(hw, group)
    sizes = {len(v) for v in domains.values()}
    if len(domains) > 1 and len(sizes) == 1 and sizes.pop() > 1:
        return _hierarchical(hw, kind, domains, nbytes)
    f = (p - 1) / p
    if kind == "all-reduce":
        return Collective(kind, "ring", (ring_phase(hw, group, 2 * (p - 1), 2 * f * nbytes),))
    return Collective(kind, "ring", (ring_phase(hw, group, p - 1, f * nbytes),))


def _hierarchical(hw: HardwareGraph, kind: Kind, domains: dict[str, list[int]], nbytes: float) -> Collective:
    groups = list(domains.values())
    q = len(groups[0])  # members per domain
    n = len(groups)  # domains
    local_f, cross_f = (q - 1) / q, (n - 1) / n
    inner = _merge([ring_phase(hw, g, q - 1, local_f * nbytes) for g in groups])
    rails = [[g[i] for g in groups] for i in range(q)]
    shard = nbytes / q
    if kind == "all-reduce":
        cross = _merge([ring_phase(hw, r, 2 * (n - 1), 2 * cross_f * shard) for r in rails])
        return Collective(kind, "hierarchical", (inner, cross, inner))
    cross = _merge([ring_phase(hw, r, n - 1, cross_f * shard) for r in rails])
    return Collective(kind, "hierarchical", (inner, cross) if kind == "reduce-scatter" else (cross, inner))


def _merge(phases: list[Phase]) -> Phase:
    """Concurrent identical-volume phases (one per domain or rail) act as one entity."""
    usage: Counter = Counter()
    for ph in phases:
        usage.update(ph.usage)
    return Phase(dict(usage), phases[0].bytes_per_member, max(ph.latency_s for ph in phases))


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
