"""The shape both engines time: a collective is a sequence of phases of link usage.

In a phase every member sends the same number of bytes along its own route(s), at one common rate, so a
phase is one flow entity whose ``usage[link]`` counts how many members' bytes cross that link (per unit of
per-member bytes). The event engine shares links max-min fairly between such entities; the analytic engine
reads the same phase without contention (``Phase.time``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal

from tilewright.engine.hardware.graph import HardwareGraph

Kind = Literal["all-reduce", "reduce-scatter", "all-gather", "broadcast", "p2p", "exchange"]


@dataclass(frozen=True)
class Phase:
    usage: dict[int, float]  # link id → members crossing it (per unit of per-member bytes)
    bytes_per_member: float
    latency_s: float  # all steps' latency (the α term) and the fixed costs of the operation(s)

    def time(self, hw: HardwareGraph) -> float:
        """Duration without contention: the most loaded link over its bandwidth, plus latency."""
        if not self.usage or self.bytes_per_member <= 0:
            return self.latency_s
        worst = max(u / hw.links[lk].bandwidth for lk, u in self.usage.items())
        return self.bytes_per_member * worst + self.latency_s

    def bottleneck(self, hw: HardwareGraph) -> int | None:
        """The link that sets the phase's rate (the highest usage per bandwidth)."""
        if not self.usage:
            return None
        return max(self.usage, key=lambda lk: self.usage[lk] / hw.links[lk].bandwidth)


@dataclass(frozen=True)
class Collective:
    kind: Kind
    algorithm: str
    phases: tuple[Phase, ...]
    payload_fraction: float = 1.0  # the collective library's protocol: data bytes / bytes on the wire

    def time(self, hw: HardwareGraph) -> float:
        return sum(p.time(hw) for p in self.phases)


def merge_phases(phases: list[Phase]) -> Phase:
    """Concurrent identical-volume phases (one per domain, rail or grid line) act as one entity."""
    usage: Counter = Counter()
    for ph in phases:
        usage.update(ph.usage)
    return Phase(dict(usage), phases[0].bytes_per_member, max(ph.latency_s for ph in phases))


def merge_collectives(kind: Kind, parts: list[Collective]) -> Collective:
    """The same algorithm on disjoint groups at once: phase by phase, one entity per phase."""
    phases = tuple(merge_phases([c.phases[i] for c in parts]) for i in range(len(parts[0].phases)))
    return Collective(kind, parts[0].algorithm, phases, parts[0].payload_fraction)


def route_latency(hw: HardwareGraph, route: list[int]) -> float:
    return sum(hw.links[lk].latency_s for lk in route)


def ring_usage(hw: HardwareGraph, ring: list[int]) -> tuple[Counter, float]:
    """Links used by one trip round ``ring`` in this order (closing step included), and the slowest hop's
    latency: the one place a ring's route is walked. Kept on ``hw`` per ring (a search plans many candidates
    on one elaborated graph, and each walks the same rings); callers get their own copy of the counts."""
    cache = hw.__dict__.setdefault("_ring_usage", {})
    key = tuple(ring)
    hit = cache.get(key)
    if hit is None:
        usage: Counter = Counter()
        worst_latency = 0.0
        for a, b in zip(ring, ring[1:] + ring[:1], strict=True):
            route = hw.device_route(a, b)
            usage.update(route)
            worst_latency = max(worst_latency, route_latency(hw, route))
        hit = cache[key] = (usage, worst_latency)
    return Counter(hit[0]), hit[1]
