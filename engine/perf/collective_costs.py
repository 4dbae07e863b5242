"""What a collective operation pays besides its bytes, from the fabric's ``Interconnect.collective``.

Without it (every preset that predates it) a phase costs its steps × the per-hop latency — the α of the
α–β model — and nothing else, so results do not move. With it (tt-metal's CCL report, S8 in
``tiled_hardware.md``), each operation (a reduce-scatter, an all-gather; an all-reduce is both) pays:

- a program launch (``fixed_s``; on a runtime that launches every call anew, ``Compute.runtime_ccl`` generic,
  the launch measured for its kind where the fabric names one, ``launch_s_by_kind``: tt-metal's legacy CCLs
  dispatch each call's kernels to the Ethernet cores as well as the workers, and the members start skewed)
  and the opening and closing of its connection to the neighbour, blocking round trips
  (``handshake_hops`` hop latencies);
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

A runtime with persistent collectives (``Compute.runtime_ccl`` persistent on every member: tt-metal's
llama3_70b_galaxy, whose TT_CCL creates its global semaphores and double-buffered persistent buffers once) needs
no entry barrier: a sender may write into its peers' buffer of this call at once, since they read the other one,
so the data crosses the diameter once (S8's barrier round trip is gone) and the exit wait is that crossing.
Still paid: the program launch (it is a program of the step's trace like any other: ``fixed_s``, not the
generic runtime's per-call launch, since no kernel goes to the Ethernet cores) and the opening and
closing of the worker's fabric connection (S8 'Per-invocation cost'; the runtime does not avoid it). Such a
runtime also offers the one-shot ``direct`` algorithms (``collective_grid``): every member writes straight to
every peer over its route, no store-and-forward of partial sums.
"""

from __future__ import annotations

import weakref
from collections import Counter
from dataclasses import dataclass, replace
from typing import Literal

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.links import Protocol
from tilewright.engine.perf.collective_phase import Phase

Op = Literal["rs", "ag", "tree", "direct"]
_CACHE: weakref.WeakKeyDictionary[HardwareGraph, dict[tuple[str, bool], OpCosts | None]] = weakref.WeakKeyDictionary()
DIRECT = "direct"  # the one-shot algorithms of a persistent runtime (``collective_grid.direct_candidates``)


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
    persistent: bool = False  # the members' runtime keeps semaphores and buffers across calls (module notes)
    fill_workers: int = 1  # workers it takes to keep a link direction fed (``CollectiveCosts.workers_to_fill_link``)
    launch_rs: float | None = None  # a generic runtime's launch of a reduce-scatter (None: fixed_s)
    launch_ag: float | None = None  # and of an all-gather (``CollectiveCosts.launch_s_by_kind``)

    def offers(self, algorithm: str) -> bool:
        return self.algorithms is None or algorithm.split(",")[0] in self.algorithms

    def launch(self, op: Op) -> float:
        """The launch of one operation of this kind: the fabric's per-kind launch where it names one (a tree
        all-reduce launches both halves), else ``fixed_s`` per operation."""
        rs = self.fixed_s if self.launch_rs is None else self.launch_rs
        ag = self.fixed_s if self.launch_ag is None else self.launch_ag
        if op == "rs":
            return rs
        if op == "ag":
            return ag
        return rs + ag if op == "tree" else self.fixed_s

    def latency(self, hop: float, steps: float, diameter: float, op: Op) -> float:
        ops = 2 if op == "tree" else 1
        base = steps * hop if self.diameter_crossings is None else self.diameter_crossings * diameter * hop
        extra = self.reduce_hop_s * diameter if op == "rs" else 0.0  # "direct" sums locally: no reduce hop
        if self.launch_rs is None and self.launch_ag is None:  # fixed_s per operation (the same arithmetic as ever)
            return ops * (self.fixed_s + self.handshake_hops * hop) + base + extra
        return self.launch(op) + ops * self.handshake_hops * hop + base + extra


def persistent_runtime(hw: HardwareGraph, members: list[int]) -> bool:
    """Whether every member's runtime runs persistent collectives (``Compute.runtime_ccl``). The devices that
    do are found once per graph: most graphs have none, and a search asks for every collective it times."""
    found = hw.__dict__.get("_persistent_ccl")
    if found is None:
        found = hw.__dict__["_persistent_ccl"] = frozenset(
            d.index for d in hw.devices if d.compute.runtime_ccl == "persistent"
        )
    return bool(found) and all(m in found for m in members)


def costs_of(hw: HardwareGraph, members: list[int]) -> OpCosts | None:
    """The costs of the interconnect that carries traffic among ``members`` (their lowest common level);
    None when it has none, i.e. plain steps × hop latency. Members whose runtime keeps its collectives
    persistent (``persistent_runtime``) get the fabric's costs without the entry barrier, with ``direct``
    offered and every operation launched at ``fixed_s`` (the module notes); a fabric without collective costs,
    or one that names its library's protocols (NCCL), is left as it is."""
    if len(members) < 2:
        return None
    levels = {hw.common_level(members[0], m) for m in members[1:]}
    level = min(levels, key=len)  # the outermost: paths of outer components are prefixes of inner ones
    cache = _CACHE.setdefault(hw, {})
    key = (level, persistent_runtime(hw, members))
    if key not in cache:
        ic = hw.interconnects.get(level)
        c = ic.collective if ic is not None else None
        cache[key] = (
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
                fill_workers=c.workers_to_fill_link,
                launch_rs=c.launch_s_by_kind.get("reduce-scatter"),
                launch_ag=c.launch_s_by_kind.get("all-gather"),
            )
        )
        base = cache[key]
        if key[1] and base is not None and not base.protocols:
            cache[key] = replace(
                base,
                diameter_crossings=None if base.diameter_crossings is None else 1.0,
                algorithms=None if base.algorithms is None else base.algorithms | {DIRECT},
                persistent=True,
                launch_rs=None,
                launch_ag=None,
            )
    return cache[key]


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


@dataclass(frozen=True)
class ProtocolChoice:
    """The size-independent half of ``protocol_phases`` for one collective's parts: per protocol offered by
    every fabric the parts cross (sorted by name), each part's payload fraction and latency (the protocol's
    fixed cost in the first part's), and each part's most loaded link per byte. ``collectives`` keeps it per
    group on the graph, so a search that times the same groups at many sizes resolves the fabrics' protocols
    and walks the links once; ``pick`` does only the arithmetic ``Phase.time`` would, in the same order, so
    its phases and times are bit for bit those of resolving everything again."""

    worst: tuple[float | None, ...]  # per part: max usage / bandwidth over its links (None: no links)
    options: tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]  # per protocol: fractions, latencies

    def pick(self, usages: list[dict[int, float]], nbytes: list[float]) -> tuple[tuple[Phase, ...], float]:
        """The phases of the protocol that finishes first when the parts (of these usages, which the phases
        share) move ``nbytes`` data bytes per member, and that protocol's payload fraction (first part's)."""
        best: tuple[float, int, list[float]] | None = None
        for i, (fractions, latencies) in enumerate(self.options):
            wire = [b / f for b, f in zip(nbytes, fractions, strict=True)]
            t = sum(
                lat if w is None or b <= 0 else b * w + lat
                for b, w, lat in zip(wire, self.worst, latencies, strict=True)
            )
            if best is None or t < best[0]:
                best = (t, i, wire)
        assert best is not None  # ``protocol_choice`` offers at least one protocol
        _, i, wire = best
        fractions, latencies = self.options[i]
        phases = tuple(Phase(u, b, lat) for u, b, lat in zip(usages, wire, latencies, strict=True))
        return phases, fractions[0]


def protocol_choice(
    hw: HardwareGraph, parts: list[tuple[dict[int, float], float, list[int]]], only: frozenset[str] | None = None
) -> ProtocolChoice | None:
    """``ProtocolChoice`` for a collective's parts — (link usage, algorithm steps, members whose fabric carries
    it) — or None when a fabric names no protocols or they share none (the phases keep steps × hop latency).
    ``only``: the protocols the operation can use at all (NCCL's send/recv never runs LL128:
    ``plan.experts.P2P_PROTOCOLS``); None: every one the fabrics offer."""
    levels = [costs_of(hw, members) for _, _, members in parts]
    if not parts or any(c is None or not c.protocols for c in levels):
        return None
    by_level = [{p.name: p for p in c.protocols} for c in levels]  # type: ignore[union-attr]
    names = set.intersection(*(set(b) for b in by_level))
    if only is not None:
        names &= only
    if not names:
        return None
    worst = tuple(
        max(u / hw.links[lk].bandwidth for lk, u in usage.items()) if usage else None for usage, _, _ in parts
    )
    options = []
    for name in sorted(names):
        protos = [b[name] for b in by_level]
        latencies = [steps * pr.step_s for (_, steps, _), pr in zip(parts, protos, strict=True)]
        latencies[0] = latencies[0] + max(pr.fixed_s for pr in protos)
        options.append((tuple(pr.payload_fraction for pr in protos), tuple(latencies)))
    return ProtocolChoice(worst, tuple(options))


def protocol_phases(
    hw: HardwareGraph, parts: list[tuple[Phase, float, list[int]]]
) -> tuple[tuple[Phase, ...], float] | None:
    """A collective's phases — (phase, its algorithm steps, members whose fabric carries it) — timed with the
    protocol that finishes first among those every fabric it crosses offers: the protocol's fixed cost once,
    its step latency per step on each fabric, the bytes at its payload fraction (more bytes on the wire).
    Returns the phases and the payload fraction of the first fabric's protocol; None when a fabric names no
    protocols (the phases keep steps × hop latency)."""
    choice = protocol_choice(hw, [(ph.usage, steps, members) for ph, steps, members in parts])
    if choice is None:
        return None
    return choice.pick([ph.usage for ph, _, _ in parts], [ph.bytes_per_member for ph, _, _ in parts])
