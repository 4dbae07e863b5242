"""Per-layer costs for search, cached per (tp, micro-batch, sequence parallelism, recompute, tp group).

A plan costs every op of every stage with ``op_time`` and decomposes every collective; a search over
thousands of mappings would repeat that work endlessly, since a transformer's blocks are identical and
the costs depend on only four mapping knobs (and, with ``mapping.memory_levels``, the residency they
resolve to). This table runs the engine's own pass builders (``engine.plan.passes``) with the plan's own
``PassContext`` (formats, fusion, spatial split over a grid device's cores: ``search.op_settings``) once
per distinct layer and knob setting, so forward/backward/recompute times, tensor-parallel collective
times, stored activations and workspace are the plan's numbers, and stage costs are sums (or maxima)
over contiguous layer ranges.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from tilewright.engine.hardware.interleave import stream_usage
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.ops import Op
from tilewright.engine.perf.device import DeviceModel
from tilewright.engine.perf.memory import activation_bytes, params_on_device, recomputed_layers, workspace_bytes
from tilewright.engine.perf.residency import Residency
from tilewright.engine.plan.group_comm import tp_seconds
from tilewright.engine.plan.op_memo import OpTimes
from tilewright.engine.plan.passes import ChunkPass, PassContext, Segment, backward_pass, forward_pass
from tilewright.engine.search.comm import CommModel
from tilewright.engine.search.op_settings import OpSettings
from tilewright.engine.workloads.graph import WorkloadGraph


@dataclass(frozen=True, slots=True)
class Pieces:
    """One layer's pass without collectives, as it joins its neighbours in a chunk's pass: ``head``, the
    (device, host) seconds of its ops before its first standalone segment (a host wait); ``closed``, the
    seconds of everything from there to its last standalone segment; ``tail``, the (device, host) seconds
    after it — None when the layer has no standalone segment (all of it is ``head``)."""

    head: tuple[float, float] = (0.0, 0.0)
    closed: float = 0.0
    tail: tuple[float, float] | None = None


@dataclass(frozen=True)
class LayerTable:
    """Arrays indexed by workload layer: seconds per micro-batch and bytes per micro-batch."""

    fwd: np.ndarray
    bwd: np.ndarray  # backward plus recompute
    act: np.ndarray  # stored activations
    transient: np.ndarray  # a fully recomputed layer's activations, live during its backward
    workspace: np.ndarray
    dram: np.ndarray | None = None  # bytes each member streams from remote DRAM (forward, backward, recompute)
    splits: dict[int, Counter] = field(default_factory=dict)  # layer class → its forward ops' grid splits
    # (class of layer i, class of layer i+1) → seconds their forward, and backward + recompute, change by
    # running in one pass (``join_seconds``): ≤ 0, added for each such pair inside a chunk
    joins: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    # (class of layer i, class of layer i+1) → what joining them adds beyond ``joins`` where the pair ends a
    # pass (``join_seconds(..., last=True)``): (forward, where layer i+1 ends it; backward, where layer i ends
    # it; recompute, where layer i+1 ends it) — a layer without a collective (the word embedding's backward)
    # then shares its one segment with the layer before it in the pass, and no third layer takes it
    ends: dict[tuple[int, int], tuple[float, float, float]] = field(default_factory=dict)
    # when no layer's pass has a collective (tp 1): per layer, the device and host seconds of its forward,
    # backward and recompute pass, shaped (layers, 3, 2) — a chunk's pass is then one segment (``single``)
    single: np.ndarray | None = None
    # when no layer's pass has a collective but some have host waits between their ops (tp 1, dropless MoE's
    # token-count sync): per layer class, its forward, backward and recompute pass as ``Pieces`` — a chunk's
    # pass is then folded layer by layer (``fold``), its open segments merging across layer boundaries
    pieces: dict[int, tuple[Pieces, Pieces, Pieces]] | None = None


def _signature(ops: list[Op]) -> tuple:
    """Layers with equal signatures cost the same (names and positions aside)."""
    return tuple(op.model_dump(exclude={"name", "layer", "inputs"}).__repr__() for op in ops)


class LayerCosts:
    def __init__(self, workload: WorkloadGraph, dev: DeviceModel, settings: OpSettings, comm: CommModel) -> None:
        self.workload = workload
        self.dev = dev
        self.settings = settings
        self.elem = settings.elem_bytes
        self.comm = comm
        self.ops = [workload.layer_ops(li.index) for li in workload.layers]
        sigs: dict[tuple, int] = {}
        edge = settings.formats.bf16_layers  # a bf16 edge layer costs apart from its fp8 twins (``perf.formats``)
        self.klass = np.array([sigs.setdefault((_signature(ops), li.name in edge), len(sigs))
                               for li, ops in zip(workload.layers, self.ops, strict=True)])
        self.representative = {k: int(np.argmax(self.klass == k)) for k in range(len(sigs))}
        self._tables: dict[tuple, LayerTable] = {}
        self._passes: dict[tuple, dict] = {}
        self._base: dict[tuple, dict] = {}
        self._forwards: dict[tuple, dict] = {}
        self._backwards: dict[tuple, list[tuple[list, dict]]] = {}  # the backwards built, with what they asked
        self._op_times = OpTimes()  # op costs shared by every pass this table builds (``plan.op_memo``)
        self._params: dict[int, np.ndarray] = {}
        self._dram_spb: dict[tuple[int, ...], float] = {}
        self.evaluated_layers = 0

    @property
    def uniform_blocks(self) -> bool:
        """True when every pipeline block is the same layer (transformers), so stage 0 dominates."""
        return len({int(self.klass[i]) for i in self.workload.block_layers}) <= 1

    def params(self, tp: int) -> np.ndarray:
        """Parameters per device of each layer."""
        p = self._params.get(tp)
        if p is None:
            p = self._params[tp] = np.array([params_on_device(ops, tp) for ops in self.ops], dtype=float)
        return p

    def table(
        self,
        tp: int,
        mb: float,
        sp: bool,
        recompute: Recompute,
        group: tuple[int, ...],
        residency: Residency | None = None,
        modules: tuple[str, ...] | None = None,
    ) -> LayerTable:
        """``mb``: what one device runs per micro-batch (``Estimator.micro_batch``); ``modules``: what selective
        recomputation re-runs (``mapping.recompute_modules``, None: Megatron-Core's default)."""
        key = (tp, mb, sp, recompute, group, residency, modules)
        t = self._tables.get(key)
        if t is None:
            t = self._tables[key] = self._build(tp, mb, sp, recompute, group, residency, modules)
        return t

    def _build(
        self, tp: int, mb: float, sp: bool, rc: Recompute, group: tuple[int, ...], residency: Residency | None,
        modules: tuple[str, ...] | None = None,
    ) -> LayerTable:
        """The layers' passes (``_layer_passes``, shared by every group) timed on ``group``."""
        dgrad = group if self.settings.dgrad(rc, self.dev.compute, tp) else None  # plan.dgrad_overlap's tensor group
        built = self._layer_passes(tp, mb, sp, rc, residency, modules, self._regather_group(tp, sp, group), dgrad)
        per_class = {}
        for k, (passes, act, transient, ws, dram) in built.items():
            fwd = self._duration(passes[0], group)
            bwd = sum(self._duration(ps, group) for ps in passes[1:])
            per_class[k] = (fwd, bwd, act, transient, ws, dram)
        cols = np.array([per_class[int(k)] for k in self.klass], dtype=float).reshape(len(self.klass), 6)
        dram = cols[:, 5].copy()
        splits = {k: passes[0].dataflows for k, (passes, *_rest) in built.items()}
        spb = self.dram_seconds_per_byte(group) if any(ps.has_dram for v in built.values() for ps in v[0]) else 0.0
        joins, ends = {}, {}
        for a, (pa, *_ra) in built.items():
            for b, (pb, *_rb) in built.items():
                # forward, backward (the backward runs the later layer first), recompute (forward order)
                pairs = [(pa[0], pb[0]), (pb[1], pa[1])]
                if len(pa) > 2 and len(pb) > 2:
                    pairs.append((pa[2], pb[2]))
                inner = [join_seconds(x, y, spb) for x, y in pairs] + [0.0]
                last = [join_seconds(x, y, spb, last=True) for x, y in pairs] + [0.0]
                joins[(a, b)] = (inner[0], inner[1] + inner[2])
                ends[(a, b)] = (last[0] - inner[0], last[1] - inner[1], last[2] - inner[2])
        parts = {k: single_segment(passes) for k, (passes, *_rest) in built.items()}
        single = None
        pieces = None
        if spb == 0 and all(v is not None for v in parts.values()):
            single = np.array([parts[int(k)] for k in self.klass], dtype=float)
        elif spb == 0:
            split = {k: [layer_pieces(ps) for ps in passes[:3]] for k, (passes, *_rest) in built.items()}
            if all(p is not None for v in split.values() for p in v):
                pieces = {k: (*v, *([Pieces()] * (3 - len(v)))) for k, v in split.items()}  # type: ignore[misc]
        return LayerTable(
            *(cols[:, j].copy() for j in range(5)),
            dram=dram if dram.any() else None,
            splits=splits,
            joins=joins,
            ends=ends,
            single=single,
            pieces=pieces,
        )

    @staticmethod
    def _regather_group(tp: int, sp: bool, group: tuple[int, ...]) -> tuple[int, ...] | None:
        """The tensor group a backward's sequence-parallel re-gather is timed on (``plan.sp_regather``: its
        exposed part depends on it), None where there is none; the only group-dependent part of the passes."""
        return group if sp and tp > 1 else None

    def _layer_passes(
        self, tp: int, mb: float, sp: bool, rc: Recompute, residency: Residency | None,
        modules: tuple[str, ...] | None = None, regather: tuple[int, ...] | None = None,
        dgrad: tuple[int, ...] | None = None,
    ) -> dict[int, tuple[list[ChunkPass], float, float, float, float]]:
        """Per layer class: its passes (forward first), stored activations, a recomputed layer's transient
        activations, workspace and DRAM bytes. None of it depends on which devices run the layer. Stored
        activations as ``build_plan`` counts them: with the selective ``modules`` and the run's formats (fp8
        GEMMs save their inputs in fp8, ``perf.memory.fp8_saved``)."""
        modules = modules if rc is Recompute.selective else None
        key = (tp, mb, sp, rc, residency, modules, regather, dgrad)
        hit = self._passes.get(key)
        if hit is not None:
            return hit
        base = self._base_passes(tp, mb, sp, residency, regather, dgrad)
        out = {}
        for k, i in self.representative.items():
            layer = [self.ops[i]]
            forward, backward, selective, rerun = base[k]
            passes = [forward, backward]
            full = bool(recomputed_layers(layer, rc))  # a transformer layer under full recomputation
            if full:
                passes.append(rerun)  # its forward again with its activation checkpoint (``forward_pass(..., "R")``)
            elif rc is Recompute.selective:
                passes.append(selective if modules is None else self._selective(k, i, tp, mb, sp, residency, modules))
            dram = sum(seg.dram_bytes for ps in passes for seg in ps.segments)
            fused, loss = self.settings.fused, self.settings.fused_loss
            act = activation_bytes(layer, mb, tp, sp, rc, self.elem, fused, recompute_modules=modules,  # type: ignore[arg-type]
                                   fused_loss=loss, formats=self.settings.formats)
            transient = activation_bytes(layer, mb, tp, sp, Recompute.none, self.elem, fused) if full else 0  # type: ignore[arg-type]
            ws = workspace_bytes(self.ops[i], mb, tp, sp, self.elem, loss, fused)  # type: ignore[arg-type]
            out[k] = (passes, act, transient, ws, dram)
            self.evaluated_layers += 1
        self._passes[key] = out
        return out

    def _context(self, tp: int, mb: float, sp: bool, residency: Residency | None) -> PassContext:
        """The plan's ``PassContext`` for these knobs (``OpSettings.context``), with this table's op-cost memo."""
        ctx = self.settings.context(self.dev, mb, tp, sp, residency)  # type: ignore[arg-type]
        ctx.op_times = self._op_times
        return ctx

    def _selective(
        self, k: int, i: int, tp: int, mb: float, sp: bool, residency: Residency | None, modules: tuple[str, ...]
    ) -> ChunkPass:
        """Layer class ``k``'s (representative ``i``) selective-recompute pass re-running ``modules``."""
        ctx = self._context(tp, mb, sp, residency)
        return forward_pass([self.ops[i]], ctx, "R", only_selective=True, modules=modules)

    def _base_passes(
        self, tp: int, mb: float, sp: bool, residency: Residency | None, regather: tuple[int, ...] | None = None,
        dgrad: tuple[int, ...] | None = None,
    ) -> dict[int, tuple[ChunkPass, ChunkPass, ChunkPass, ChunkPass]]:
        """Per layer class: its forward, backward, selective-recompute and full re-run passes, shared by the
        three recompute settings (the op costs on a grid of cores are the expensive part of a search).
        ``regather``: the tensor group the backward's re-gather is timed on (``_regather_group``), as the plan
        times it (``group_comm.tp_seconds``); ``dgrad``: the group the backward's overlapped input-gradient
        collectives are timed on (``plan.dgrad_overlap``), None when they block."""
        key = (tp, mb, sp, residency, regather, dgrad)
        hit = self._base.get(key)
        if hit is None:
            forwards = self._forward_passes(tp, mb, sp, residency)
            backwards = self._backward_passes(tp, mb, sp, residency, regather, dgrad)
            hit = self._base[key] = {k: (forwards[k][0], backwards[k], *forwards[k][1:]) for k in self.representative}
        return hit

    def _backward_passes(
        self, tp: int, mb: float, sp: bool, residency: Residency | None, regather: tuple[int, ...] | None,
        dgrad: tuple[int, ...] | None,
    ) -> dict[int, ChunkPass]:
        """Per layer class: its backward pass, the re-gather timed on ``regather`` and the overlapped input-gradient
        collectives on ``dgrad`` (``_base_passes``). The builder reads those groups only through the seconds it
        asks of them (``PassContext.regather_seconds``, ``dgrad_seconds``), and nothing else it reads depends on
        the group, so a pass built for another group that answers every one of the same questions, asked in the
        same order, with the same seconds is this group's pass too: the builder would take the same path and
        compute the same numbers. Groups of one shape on a regular mesh answer alike, so a search builds one
        backward per distinct set of answers, not one per group."""
        hw = self.comm.hw
        reg = tp_seconds(hw, list(regather)) if regather is not None else None
        dg = (reg or tp_seconds(hw, list(dgrad))) if dgrad is not None else None
        fns = (reg, dg)
        built = self._backwards.setdefault((tp, mb, sp, residency, reg is None, dg is None, dg is reg), [])
        for asked, passes in built:
            if all(_same(fns[which](kind, nbytes), s) for which, kind, nbytes, s in asked):  # type: ignore[misc]
                return passes
        log: list[tuple[int, str, float, float]] = []
        ctx = self._context(tp, mb, sp, residency)
        if reg is not None:
            ctx.regather_seconds = _Asked(reg, 0, log)
        if dg is not None:
            ctx.dgrad_overlap = True
            ctx.dgrad_seconds = ctx.regather_seconds if dg is reg else _Asked(dg, 1, log)
        passes = {k: backward_pass([self.ops[i]], ctx) for k, i in self.representative.items()}
        built.append((log, passes))
        return passes

    def _forward_passes(
        self, tp: int, mb: float, sp: bool, residency: Residency | None
    ) -> dict[int, tuple[ChunkPass, ChunkPass, ChunkPass]]:
        """Per layer class: its forward, selective-recompute and full re-run passes. Only a backward re-gathers
        (``PassContext.regather_seconds``) or hides its input gradients' collectives (``dgrad_seconds``), so
        these are the same for every tensor group and are built once per knob setting, not once per group (a
        search on a grid of chips meets the same tp with many groups)."""
        key = (tp, mb, sp, residency)
        hit = self._forwards.get(key)
        if hit is None:
            ctx = self._context(tp, mb, sp, residency)
            hit = self._forwards[key] = {
                k: (
                    forward_pass([self.ops[i]], ctx),
                    forward_pass([self.ops[i]], ctx, "R", only_selective=True),
                    forward_pass([self.ops[i]], ctx, "R"),
                )
                for k, i in self.representative.items()
            }
        return hit

    def _duration(self, ps: ChunkPass, group: tuple[int, ...]) -> float:
        """As ``engine.plan.timing.pass_parts``: busy (or DRAM-stream) time plus tensor-parallel collectives."""
        comm = sum(self.comm.collective_time(seg.comm[0], group, seg.comm[1]) for seg in ps.segments if seg.comm)
        if ps.has_dram:
            spb = self.dram_seconds_per_byte(group)
            busy = sum(
                max(seg.busy_s, seg.dram_bytes * spb) if seg.dram_bytes > 0 else seg.busy_s for seg in ps.segments
            )
        else:
            busy = ps.busy_s
        return busy + comm

    def dram_seconds_per_byte(self, group: tuple[int, ...]) -> float:
        """SRAM-only devices: the tightest link of the group's DRAM streams, as ``Plan.dram_seconds_per_byte``."""
        spb = self._dram_spb.get(group)
        if spb is None:
            mem = self.dev.remote_dram
            hw = self.comm.hw
            usage = stream_usage(hw, group, mem) if mem is not None else {}
            spb = self._dram_spb[group] = max((u / hw.links[lk].bandwidth for lk, u in usage.items()), default=0.0)
        return spb


class _Asked:
    """A tensor group's collective timing (``group_comm.tp_seconds``) that notes every question a pass asks of it,
    with its answer, in order (``LayerCosts._backward_passes``); ``which``: the timing it stands for (0 the
    re-gather's, 1 the overlapped input gradients')."""

    def __init__(self, seconds: Callable[[str, float], float], which: int, log: list) -> None:
        self.seconds, self.which, self.log = seconds, which, log

    def __call__(self, kind: str, nbytes: float) -> float:
        s = self.seconds(kind, nbytes)
        self.log.append((self.which, kind, nbytes, s))
        return s


def _same(a: float, b: float) -> bool:
    """The same seconds, to the bit as printed (0.0 and -0.0 apart)."""
    return a == b and repr(a) == repr(b)


def _raw(seg: Segment) -> tuple[float, float, float, float] | None:
    """(device, host, DRAM bytes, activation offload seconds) of a segment before ``Segment.close``; None for
    one that cannot join its neighbour (a host-wait segment stands alone)."""
    device = seg.busy_s - seg.dispatch_wait_s
    if seg.dispatch_wait_s > 0 and device <= 0 and seg.flops <= 0:
        return None
    return device, seg.host_s, seg.dram_bytes, seg.offload_s


def _seconds(device: float, host: float, dram: float, offload: float, spb: float) -> float:
    """A closed segment's time as ``Segment.close`` and ``Plan.segment_seconds`` make it."""
    return max(device, host, offload, dram * spb)


def single_segment(passes: list[ChunkPass]) -> list[list[float]] | None:
    """(device, host) seconds of a layer's forward, backward and recompute pass when each is at most one
    segment without a collective, activation offload or host wait (tp 1); None otherwise. A chunk of such
    layers runs each pass as one segment, max(Σ device, Σ host) (``plan.launch``), which neither per-layer
    sums nor pairs of layers (``join_seconds``) express when some layers are host-bound and others not."""
    out = [[0.0, 0.0] for _ in range(3)]
    for j, ps in enumerate(passes[:3]):
        if len(ps.segments) > 1:
            return None
        for seg in ps.segments:
            raw = _raw(seg)
            if seg.comm is not None or raw is None or raw[3] > 0:
                return None
            out[j] = [raw[0], raw[1]]
    return out


def layer_pieces(ps: ChunkPass) -> Pieces | None:
    """``ps`` as ``Pieces``; None when a segment has a collective or activation offload (``join_seconds`` and
    the per-layer sums then time the pass)."""
    head: list[float] = [0.0, 0.0]
    tail: list[float] | None = None
    closed = 0.0
    for seg in ps.segments:
        raw = _raw(seg)
        if seg.comm is not None or (raw is not None and raw[3] > 0):
            return None
        if raw is None:  # a standalone segment: what was open before it closes
            if tail is not None:
                closed += max(tail)
            closed += seg.busy_s
            tail = [0.0, 0.0]
            continue
        run = head if tail is None else tail
        run[0] += raw[0]
        run[1] += raw[1]
    return Pieces((head[0], head[1]), closed, None if tail is None else (tail[0], tail[1]))


def fold(layers: list[Pieces]) -> float:
    """Seconds of one pass over ``layers`` in the order it runs them: each open segment lasts max(device, host)
    over all the ops it gathers, across layer boundaries (``plan.launch``), as the plan builds the pass."""
    device = host = total = 0.0
    for p in layers:
        device += p.head[0]
        host += p.head[1]
        if p.tail is None:
            continue
        total += max(device, host) + p.closed
        device, host = p.tail
    return total + max(device, host)


def join_seconds(first: ChunkPass, second: ChunkPass, spb: float, last: bool = False) -> float:
    """What running ``second`` right after ``first`` in one pass changes, in seconds (≤ 0); ``last``: where
    ``second`` ends the pass.

    A segment is the work between two collectives and lasts max(device, host) (``plan.launch``). A pass
    over several layers (the plan's) does not close its segment at a layer boundary: the ops after one
    layer's last collective (its dropout and residual) and the next layer's ops up to its first (LayerNorm,
    QKV, attention core) form one segment, whose host and device times add before the max. Timing each
    layer alone splits that segment in two and overstates it wherever one side is host-bound and the other
    device-bound. Joined where the second layer's first segment closes inside that layer (at a collective,
    or a host wait after it), so no segment is counted in two joins and the pairs add up exactly. A second
    layer whose pass is one open segment (no collective: the word embedding's backward) joins only where it
    ends the pass (``last``, ``LayerTable.ends``; that backward ends stage 0's): in the middle of a pass its
    segment runs on into a third layer, which pairs cannot express, and that boundary is left unjoined,
    Σ max(device, host) above the plan's max(Σ device, Σ host) — conservative. Where no layer has a
    collective (tp 1), ``single_segment`` times each chunk's pass as the one segment it is."""
    if not first.segments or not second.segments:
        return 0.0
    tail, head = first.segments[-1], second.segments[0]
    closed = head.comm is not None or len(second.segments) > 1  # the head's segment ends inside ``second``
    if tail.comm is not None or not (closed or last):  # nothing to join, or its segment runs on
        return 0.0
    a, b = _raw(tail), _raw(head)
    if a is None or b is None:
        return 0.0
    merged = _seconds(*(x + y for x, y in zip(a, b, strict=True)), spb)
    return merged - _seconds(*a, spb) - _seconds(*b, spb)
