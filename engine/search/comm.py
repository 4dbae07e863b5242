"""Collective times for search: the engine's decomposition on the real topology, cached as linear models.

A phase of ``engine.perf.collectives`` takes ``bytes_per_member · worst_link + latency`` and its bytes per
member are a fixed fraction of the message, so each algorithm's time is ``a·n + b`` in the message size n
(fitted from two sizes, as a reduce-scatter's handshake pauses grow with n too); the engine picks the
cheapest algorithm at each size, so a collective's time is the lower envelope of those lines (the
small-message tree regime is piecewise, handled exactly, and so is a fabric that names its library's
protocols, whose pick by size is no line: ``CommModel._exact``). One decomposition per group shape and kind
therefore serves every micro-batch size, hidden size and gradient bucket the search tries — which is what
makes ranking thousands of candidates cheap, while staying what ``make_plan`` would compute.

Groups come from the same placement rules as ``engine.plan.placement`` (strategy order, then ranks with
tp fastest), computed for just the stages search needs instead of all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.mapping import PlacementStrategy
from tilewright.engine.perf.collective_costs import has_protocols
from tilewright.engine.perf.collective_grid import TIE
from tilewright.engine.perf.collectives import SMALL_MESSAGE_BYTES, Collective, candidates, collective, point_to_point
from tilewright.engine.plan.group_comm import merge_concurrent
from tilewright.engine.plan.placement import placement_order

REFERENCE_BYTES = float(2**30)  # well inside the bandwidth regime


@dataclass(frozen=True)
class Layout:
    """Where ranks go: what, besides tp/pp/dp, decides which devices form each group."""

    strategy: PlacementStrategy
    rank_order: str  # "tp-dp-pp" | "tp-pp-dp"


@dataclass(frozen=True)
class Linear:
    slope: float  # seconds per byte of message
    latency: float
    # the phases' latencies (α terms, fixed costs) as a line in the message size, where they grow with it
    # (``_fit``); None: ``latency`` itself
    fixed: tuple[float, float] | None = None

    def at(self, nbytes: float) -> float:
        return self.slope * nbytes + self.latency if nbytes > 0 and (self.slope or self.latency) else 0.0

    def scaled(self, nbytes: float, fraction: float, calls: int = 1) -> float:
        """This algorithm's collective of ``nbytes`` carrying ``fraction`` of its bytes as ``calls`` collectives,
        as ``plan.group_comm.scaled`` makes it: the bandwidth part scales, each call pays the latencies at
        ``nbytes``."""
        whole = self.at(nbytes)
        if whole <= 0:
            return 0.0
        lat = self.latency if self.fixed is None else self.fixed[0] * nbytes + self.fixed[1]
        return fraction * (whole - lat) + lat * max(1, calls)


@dataclass(frozen=True)
class Envelope:
    """The cheapest of several algorithms' lines at each message size."""

    lines: tuple[Linear, ...]

    def at(self, nbytes: float) -> float:
        return min(line.at(nbytes) for line in self.lines)

    def scaled(self, nbytes: float, fraction: float, calls: int = 1) -> float:
        """The algorithm cheapest at ``nbytes`` carrying ``fraction`` of them (``Linear.scaled``)."""
        return min(self.lines, key=lambda line: line.at(nbytes)).scaled(nbytes, fraction, calls)


class EngineChoice:
    """Concurrent collectives as ``Plan.dp_collective`` times them: each group picks the algorithm cheapest
    for it alone (``perf.collective_grid.grid_collective``, ties to the first), then the groups' picks
    share the links (``merge_concurrent``). Each group's algorithms are lines in the message size, so the
    picks at a size are read off them; each distinct tuple of picks is merged and fitted once."""

    def __init__(self, hw: HardwareGraph, alone: list[dict[str, tuple[Collective, Collective]]], ref: float) -> None:
        self.hw = hw
        self.alone = alone  # per group: algorithm → its decomposition at ref and at ref / 2 bytes
        self.ref = ref
        self.lines = [{a: _fit(c1, c2, hw, ref) for a, (c1, c2) in g.items()} for g in alone]
        self._merged: dict[tuple[str, ...], Linear] = {}

    def at(self, nbytes: float) -> float:
        return self._line(nbytes).at(nbytes)

    def scaled(self, nbytes: float, fraction: float, calls: int = 1) -> float:
        """The groups' picks at ``nbytes`` carrying ``fraction`` of them (``Linear.scaled``)."""
        return self._line(nbytes).scaled(nbytes, fraction, calls)

    def _line(self, nbytes: float) -> Linear:
        """The merged line of the groups' picks at ``nbytes``."""
        picks = tuple(self._pick(lines, nbytes) for lines in self.lines)
        line = self._merged.get(picks)
        if line is None:
            at_ref = merge_concurrent([g[a][0] for g, a in zip(self.alone, picks, strict=True)])
            at_half = merge_concurrent([g[a][1] for g, a in zip(self.alone, picks, strict=True)])
            line = self._merged[picks] = _fit(at_ref, at_half, self.hw, self.ref)
        return line

    @staticmethod
    def _pick(lines: dict[str, Linear], nbytes: float) -> str:
        names = iter(lines)
        best = next(names)
        best_t = lines[best].at(nbytes)
        for a in names:
            t = lines[a].at(nbytes)
            if t < best_t * (1 - TIE):
                best, best_t = a, t
        return best


def _fit(at_ref: Collective, at_half: Collective, hw: HardwareGraph, ref: float) -> Linear:
    """An algorithm's line: read off its phases when their latencies do not grow with the size (exactly
    as before), else through its times at ``ref`` and ``ref / 2`` bytes."""
    if [ph.latency_s for ph in at_ref.phases] == [ph.latency_s for ph in at_half.phases]:
        return _linear(at_ref, hw, ref)
    t1, t2 = at_ref.time(hw), at_half.time(hw)
    slope = (t1 - t2) / (ref / 2)
    l1, l2 = _latency(at_ref), _latency(at_half)
    lat_slope = (l1 - l2) / (ref / 2)
    return Linear(slope, t1 - slope * ref, (lat_slope, l1 - lat_slope * ref))


def _latency(c: Collective) -> float:
    """The phases' latencies: what ``plan.group_comm.scaled`` keeps when it scales the bytes."""
    return sum(ph.latency_s for ph in c.phases)


def _linear(c: Collective, hw: HardwareGraph, ref: float) -> Linear:
    slope = latency = 0.0
    for ph in c.phases:
        latency += ph.latency_s
        if ph.usage and ph.bytes_per_member > 0:
            worst = max(u / hw.links[lk].bandwidth for lk, u in ph.usage.items())
            slope += ph.bytes_per_member / ref * worst
    return Linear(slope, latency)


class CommModel:
    """Group construction and cached collective timing on one elaborated system."""

    def __init__(self, hw: HardwareGraph) -> None:
        self.hw = hw
        self._orders: dict[tuple[PlacementStrategy, int], tuple[int, ...]] = {}
        self._linear: dict[tuple, Linear] = {}
        self._envelopes: dict[tuple, Envelope | EngineChoice] = {}
        self._small: dict[tuple, tuple[float, float]] = {}  # (time, latencies)
        self._has_protocols: dict[tuple, bool] = {}
        self._groups: dict[tuple, tuple[tuple[int, ...], ...]] = {}
        self.decompositions = 0  # how many collectives were decomposed on the topology (for reports)
        default = tuple(d.index for d in hw.devices)
        self._row_major = default

    # --- groups ---------------------------------------------------------------------------------------

    def ranks(self, strategy: PlacementStrategy, group: int) -> tuple[int, ...]:
        """Device indices in placement order (``group`` = tp·dp matters to the block strategy only)."""
        key = (strategy, group if strategy is PlacementStrategy.block else 0)
        order = self._orders.get(key)
        if order is None:
            order = tuple(d.index for d in placement_order(self.hw.devices, strategy, group))
            self._orders[key] = order
        return order

    def distinct(self, strategy: PlacementStrategy, group: int) -> bool:
        """False when ``strategy`` orders the devices exactly as row-major does (nothing new to try)."""
        return strategy is PlacementStrategy.row_major or self.ranks(strategy, group) != self._row_major

    def tensor_group(self, layout: Layout, tp: int, pp: int, dp: int, stage: int, replica: int) -> tuple[int, ...]:
        ranks = self.ranks(layout.strategy, tp * dp)
        if layout.rank_order == "tp-dp-pp":
            base = tp * (replica + dp * stage)
        else:
            base = tp * (stage + pp * replica)
        return ranks[base : base + tp]

    def stage_groups(self, layout: Layout, tp: int, pp: int, dp: int, stage: int) -> tuple[tuple[int, ...], ...]:
        return tuple(self.tensor_group(layout, tp, pp, dp, stage, j) for j in range(dp))

    @staticmethod
    def dp_key(layout: Layout, tp: int, pp: int, dp: int, stage: int) -> tuple:
        """What decides a stage's dp groups: with tp-dp-pp order, pp does not (stage r starts at tp·dp·r)."""
        return ("dp", layout, tp, pp if layout.rank_order != "tp-dp-pp" else 0, dp, stage)

    def dp_groups(self, layout: Layout, tp: int, pp: int, dp: int, stage: int) -> tuple[tuple[int, ...], ...]:
        """A stage's data-parallel groups, one per tensor rank (they reduce at the same time)."""
        key = self.dp_key(layout, tp, pp, dp, stage)
        groups = self._groups.get(key)
        if groups is None:
            stage_groups = self.stage_groups(layout, tp, pp, dp, stage)
            groups = self._groups[key] = tuple(tuple(g[i] for g in stage_groups) for i in range(tp))
        return groups

    # --- timing ---------------------------------------------------------------------------------------

    def collective_time(self, kind: str, group: tuple[int, ...], nbytes: float) -> float:
        """One collective of ``nbytes`` (the full tensor) over ``group``."""
        return self.concurrent_time(kind, (group,), nbytes)

    def concurrent_time(
        self, kind: str, groups: tuple[tuple[int, ...], ...], nbytes: float, name: tuple | None = None
    ) -> float:
        """Identical collectives on disjoint groups at once, sharing links (as ``Plan.dp_collective``).
        ``name`` stands for ``groups`` as the cache key when the caller has a cheaper one."""
        return self.scaled_time(kind, groups, nbytes, 1.0, name)

    def scaled_time(
        self, kind: str, groups: tuple[tuple[int, ...], ...], nbytes: float, fraction: float, name: tuple | None = None,
        calls: int = 1,
    ) -> float:
        """``concurrent_time``'s collectives of ``nbytes`` carrying ``fraction`` of their bytes, with the
        algorithm and latencies picked at ``nbytes``: ``plan.group_comm.scaled``, which the plan's buckets of
        one reduction take (``Plan.dp_buckets``) — not the collective of ``fraction · nbytes``, which may pick
        another algorithm, protocol or tree. ``calls``: issued as that many collectives, each paying the
        latencies (``plan.replica_sync.ddp_bucket_calls``)."""
        if nbytes <= 0 or not groups or len(groups[0]) <= 1:
            return 0.0
        ident = groups if name is None else name
        if self._exact(kind, groups, ident, nbytes):
            key = (kind, ident, nbytes)
            hit = self._small.get(key)
            if hit is None:
                c = self._decompose(kind, groups, nbytes)
                hit = self._small[key] = (c.time(self.hw), _latency(c))
            t, lat = hit
            return t if fraction == 1.0 and calls <= 1 else fraction * (t - lat) + lat * max(1, calls)
        key = (kind, ident)
        env = self._envelopes.get(key)
        if env is None:
            env = self._envelopes[key] = self._envelope(kind, groups)
        return env.at(nbytes) if fraction == 1.0 and calls <= 1 else env.scaled(nbytes, fraction, calls)

    def _exact(self, kind: str, groups: tuple[tuple[int, ...], ...], ident: tuple, nbytes: float) -> bool:
        """Whether no line serves this collective, so it is decomposed at its own size (cached by size):
        an all-reduce in the small-message tree regime, or any collective on a fabric that names its
        library's protocols (NCCL's LL, LL128, Simple: ``collective_costs.protocol_phases``). The engine
        takes the protocol that finishes first at each size, with latencies that are not one line in the
        size; one line read at 1 GiB (Simple) overstated a small GPT's 256 KiB tensor-parallel all-reduce
        on a DGX A100 by 50-190 % (tp 2-8), and lines read at sampled sizes still missed by ~0.5 % between
        them. A search sees few distinct sizes per group (its layers' activations, its chunks' gradients)."""
        if kind == "all-reduce" and nbytes < SMALL_MESSAGE_BYTES and len(groups[0]) > 2:
            return True
        key = ("protocols", ident)
        hit = self._has_protocols.get(key)
        if hit is None:
            hit = self._has_protocols[key] = all(has_protocols(self.hw, list(g)) for g in groups)
        return hit

    def _decompose(self, kind: str, groups: tuple[tuple[int, ...], ...], nbytes: float) -> Collective:
        self.decompositions += 1
        parts = [collective(self.hw, kind, list(g), nbytes) for g in groups]  # type: ignore[arg-type]
        return merge_concurrent(parts)

    def _envelope(self, kind: str, groups: tuple[tuple[int, ...], ...]) -> Envelope | EngineChoice:
        """Every algorithm the engine may pick for these groups, each as a line in the message size: one
        group takes the cheapest; several concurrent ones follow the engine's per-group pick
        (``EngineChoice``)."""
        self.decompositions += 1
        ref, half = REFERENCE_BYTES, REFERENCE_BYTES / 2
        alone: list[dict[str, tuple[Collective, Collective]]] = []
        for g in groups:
            at_ref = candidates(self.hw, kind, list(g), ref)  # type: ignore[arg-type]
            at_half = {c.algorithm: c for c in candidates(self.hw, kind, list(g), half)}  # type: ignore[arg-type]
            alone.append({c.algorithm: (c, at_half[c.algorithm]) for c in at_ref if c.algorithm in at_half})
        if len(groups) == 1:
            return Envelope(tuple(_fit(c1, c2, self.hw, ref) for c1, c2 in alone[0].values()))
        if all(len(g) == 1 for g in alone):  # no choice anywhere (a switched cluster): one merged line
            picks = [next(iter(g.values())) for g in alone]
            at_ref, at_half = merge_concurrent([p[0] for p in picks]), merge_concurrent([p[1] for p in picks])
            return Envelope((_fit(at_ref, at_half, self.hw, ref),))
        return EngineChoice(self.hw, alone, ref)

    def p2p_time(self, src: tuple[int, ...], dst: tuple[int, ...], nbytes: float) -> float:
        """Member i of ``src`` sends ``nbytes`` to member i of ``dst``, all at once."""
        if nbytes <= 0:
            return 0.0
        key = ("p2p", src, dst)
        lin = self._linear.get(key)
        if lin is None:
            self.decompositions += 1
            c = point_to_point(self.hw, list(zip(src, dst, strict=True)), REFERENCE_BYTES)
            lin = self._linear[key] = _linear(c, self.hw, REFERENCE_BYTES)
        return lin.at(nbytes)
