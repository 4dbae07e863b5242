"""What a collective operation pays besides its bytes, from the fabric's ``Interconnect.collective``.

Without it (every preset that predates it) a phase costs its steps × the per-hop latency — the α of the
α–β model — and nothing else, so results do not move. With it (tt-metal's CCL report, S8 in
``tiled_hardware.md``), each operation (a reduce-scatter, an all-gather; an all-reduce is both) pays:

- a program launch (``fixed_s``) and the opening and closing of its connection to the neighbour, blocking
  round trips (``handshake_hops`` hop latencies);
- ``diameter_crossings`` crossings of the algorithm's diameter (entry barrier round trip + the data
  pipeline) instead of one hop per step;
- for a reduce-scatter, store-and-forward of partial sums at every hop (``reduce_hop_s`` per hop) and a
  neighbour round trip every ``reduce_sync_packets`` packets per physical link, while that link idles.

Switched fabrics (NVSwitch, InfiniBand) name their collective library's protocols instead
(``CollectiveCosts.protocols``, NCCL's tuning model): a collective pays the protocol's launch and set-up
once, its per-step latency at every step of the algorithm on each fabric it crosses, and moves its bytes
at the protocol's payload fraction; the cheapest protocol wins, one for the whole collective
(``protocol_phases``). Small messages are latency-bound (LL), large ones bandwidth-bound (Simple): this is
the message-size bandwidth curve of nccl-tests, from the protocols rather than a fitted curve.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.links import Protocol
from tilewright.engine.perf.collective_phase import Phase

Op = Literal["rs", "ag", "tree"]
_CACHE: weakref.WeakKeyDictionary[HardwareGraph, dict[str, OpCosts | None]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class OpCosts:
    """The fixed costs of one fabric, resolved once per interconnect level."""

    fixed_s: float
    handshake_hops: float
    diameter_crossings: float | None
    reduce_hop_s: float
    sync_packets: int | None
    payload_bytes: int | None
    algorithms: frozenset[str] | None = None  # what the fabric's runtime offers (None: everything)
    protocols: tuple[Protocol, ...] = ()  # switched fabrics: the collective library's protocols

    def offers(self, algorithm: str) -> bool:
        return self.algorithms is None or algorithm.split(",")[0] in self.algorithms

    def latency(self, hop: float, steps: float, diameter: float, op: Op) -> float:
        ops = 2 if op == "tree" else 1
        base = steps * hop if self.diameter_crossings is None else self.diameter_crossings * diameter * hop
        extra = self.reduce_hop_s * diameter if op == "rs" else 0.0
        return ops * (self.fixed_s + self.handshake_hops * hop) + base + extra


def costs_of(hw: HardwareGraph, members: list[int]) -> OpCosts | None:
    """The costs of the interconnect that carries traffic among ``members`` (their lowest common level);
    None when it has none, i.e. plain steps × hop latency."""
    if len(members) < 2:
        return None
    levels = {hw.common_level(members[0], m) for m in members[1:]}
    level = min(levels, key=len)  # the outermost: paths of outer components are prefixes of inner ones
    cache = _CACHE.setdefault(hw, {})
    if level not in cache:
        ic = hw.interconnects.get(level)
        c = ic.collective if ic is not None else None
        cache[level] = (
            None
            if c is None
            else OpCosts(
                c.fixed_s,
                c.handshake_hops,
                c.diameter_crossings,
                c.reduce_hop_s,
                c.reduce_sync_packets,
                ic.framing.payload_bytes if ic.framing is not None else None,
                frozenset(a.value for a in c.algorithms) if c.algorithms is not None else None,
                tuple(c.protocols or ()),
            )
        )
    return cache[level]


def make_phase(
    hw: HardwareGraph,
    usage: Counter | dict[int, float],
    nbytes: float,
    hop: float,
    steps: float,
    diameter: float,
    op: Op,
    costs: OpCosts | None,
) -> Phase:
    """One operation's phase: ``steps`` × ``hop`` of latency by default, the fabric's costs when it has
    them (see the module notes), the reduce-scatter's handshake pauses included."""
    if costs is None:
        return Phase(dict(usage), nbytes, steps * hop)
    phase = Phase(dict(usage), nbytes, costs.latency(hop, steps, diameter, op))
    if op != "rs" or not costs.sync_packets or not costs.payload_bytes:
        return phase
    lk = phase.bottleneck(hw)
    if lk is None:
        return phase
    link = hw.links[lk]
    per_lane = nbytes * usage[lk] / max(link.lanes, 1e-12)
    syncs = per_lane / (costs.sync_packets * costs.payload_bytes)
    return Phase(phase.usage, nbytes, phase.latency_s + syncs * 2 * hop)


def has_protocols(hw: HardwareGraph, members: list[int]) -> bool:
    """Whether the fabric that joins ``members`` names its collective library's protocols."""
    c = costs_of(hw, members)
    return c is not None and bool(c.protocols)


def protocol_phases(
    hw: HardwareGraph, parts: list[tuple[Phase, float, list[int]]]
) -> tuple[tuple[Phase, ...], float] | None:
    """A collective's phases — (phase, its algorithm steps, members whose fabric carries it) — timed with the
    protocol that finishes first among those every fabric it crosses offers: the protocol's fixed cost once,
    its step latency per step on each fabric, the bytes at its payload fraction (more bytes on the wire).
    Returns the phases and the payload fraction of the first fabric's protocol; None when a fabric names no
    protocols (the phases keep steps × hop latency)."""
    levels = [costs_of(hw, members) for _, _, members in parts]
    if not parts or any(c is None or not c.protocols for c in levels):
        return None
    by_level = [{p.name: p for p in c.protocols} for c in levels]  # type: ignore[union-attr]
    names = set.intersection(*(set(b) for b in by_level))
    best: tuple[float, tuple[Phase, ...], float] | None = None
    for name in sorted(names):
        protos = [b[name] for b in by_level]
        phases = [
            Phase(ph.usage, ph.bytes_per_member / pr.payload_fraction, steps * pr.step_s)
            for (ph, steps, _), pr in zip(parts, protos, strict=True)
        ]
        phases[0] = dataclasses.replace(phases[0], latency_s=phases[0].latency_s + max(pr.fixed_s for pr in protos))
        t = sum(ph.time(hw) for ph in phases)
        if best is None or t < best[0]:
            best = (t, tuple(phases), protos[0].payload_fraction)
    return (best[1], best[2]) if best is not None else None
