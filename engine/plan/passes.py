"""One pass (forward, backward or recompute) of one model chunk for one micro-batch, as segments.

A segment is the compute between two tensor-parallel collectives. Megatron's placement of those
collectives (Shoeybi et al. 2019; Korthikanti et al. 2023 for sequence parallelism):
- forward: all-reduce after each row-parallel op and after the vocab-parallel embedding; with
  sequence parallelism a reduce-scatter there instead, and an all-gather before each column-parallel op;
- backward: all-reduce of the input gradient of each column-parallel op; with sequence parallelism a
  reduce-scatter there and an all-gather before each row-parallel op's backward.
"""

from __future__ import annotations

from collections.abc import Sequence

from tilewright.engine.ir.common import DType
from tilewright.engine.ir.ops import MoERole, Op, OpKind, TensorSplit
from tilewright.engine.perf.comm_sm import beside, stretched
from tilewright.engine.perf.device import DeviceModel, issues_kernels
from tilewright.engine.perf.formats import message_bytes
from tilewright.engine.perf.op_cost import OpTime, flash_ops, op_time, shard
from tilewright.engine.perf.recompute import selection
from tilewright.engine.plan.context import ring_calls
from tilewright.engine.plan.cuda_graphs import FULL_ITERATION, Capture, layer_graphs
from tilewright.engine.plan.dgrad_overlap import covers, timed, wgrad_seconds
from tilewright.engine.plan.dgrad_overlap import exposed as dgrad_exposed
from tilewright.engine.plan.experts import dispatch_work, exchange, expert_tp_comm, is_etp
from tilewright.engine.plan.exposed import bytes_for
from tilewright.engine.plan.framework_host import eager_pointwise
from tilewright.engine.plan.launch import (
    SCORE_PASSES_FORWARD,
    attention_scores,
    checkpoint_host_seconds,
    collective_host_seconds,
    eager_cross_entropy_bytes,
    extra_launches,
    host_seconds,
)
from tilewright.engine.plan.pass_records import ChunkPass, PassContext, PassKind, Segment  # noqa: F401 (re-exported)
from tilewright.engine.plan.sharding import EP_PREFIX, ShardComm
from tilewright.engine.plan.sp_regather import Regather, exposed_bytes, regathers
from tilewright.engine.plan.tensor_axes import ROW, layer_comms, tile_rows
from tilewright.engine.plan.tp_overlap import TpOverlap, gemm_chunks


def fused_edges(chains: list[list[str]]) -> frozenset[tuple[str, str]]:
    """``mapping.fusion`` chains as the producer → consumer edges they keep on chip."""
    return frozenset((a, b) for chain in chains for a, b in zip(chain, chain[1:], strict=False))


def local_name(op: Op) -> str:
    """An op's name within its layer ("block3.mlp_up" → "mlp_up"), what ``mapping.fusion`` names."""
    return op.name.split(".", 1)[-1]


def collective_between(a: Op, b: Op, tp: int) -> bool:
    """Megatron puts a tensor-parallel collective after a row-split op (forward) and before a
    column-split op's backward: the tensor leaves the chip there, so that edge cannot be fused."""
    if tp <= 1:
        return False
    return (_weighted(a) and a.split is TensorSplit.row) or (_weighted(b) and b.split is TensorSplit.column)


def _fusion_flags(ops: list[Op], fused: frozenset[tuple[str, str]]) -> list[tuple[bool, bool]]:
    """(input fused, output fused) per op of one layer, in order."""
    if not fused:
        return [(False, False)] * len(ops)
    names = [local_name(op) for op in ops]
    flags = []
    for i, n in enumerate(names):
        fin = i > 0 and (names[i - 1], n) in fused
        fout = i + 1 < len(names) and (n, names[i + 1]) in fused
        flags.append((fin, fout))
    return flags


def _on_chip(op: Op, fused: tuple[bool, bool], c: PassContext) -> tuple[bool, bool]:
    """A fused chain streams its intermediate through SRAM one block of token rows at a time (as fused
    kernels and FlashAttention do), so it stays on chip when one row of it, double-buffered, fits half the
    device's SRAM; on an SRAM-only tile that is checked, on a device whose SRAM is not modelled (a GPU's
    HBM-only preset) it is taken for granted, as it always was."""
    dev = c.dev
    if dev.local_dram is not None or dev.sram_bytes <= 0:
        return fused
    k = shard(op, c.tp, c.sequence_parallel)
    budget = dev.sram_bytes / 2

    def fits(elems: float) -> bool:
        return 2.0 * elems / k / max(c.rows_per_sample, 1) * c.elem_bytes <= budget

    return fused[0] and fits(op.in_elems), fused[1] and fits(op.out_elems)


def axis_rows(ctx: PassContext) -> float:
    """The factor on a 2-D tensor-parallel message's rows: its rows padded to whole tiles over the pass's rows
    where the runtime pads them (tt-transformers' decode step: its users padded to 32 rows), else 1."""
    if not (ctx.tp_decode and ctx.tp_axes_collectives == "tt-transformers") or ctx.micro_batch <= 0:
        return 1.0
    return tile_rows(ctx.micro_batch, ctx.tp_tile) / ctx.micro_batch


class _Builder:
    def __init__(self, ctx: PassContext, kind: PassKind):
        self.ctx = ctx
        self.out = ChunkPass(kind, captured=FULL_ITERATION in ctx.cuda_graph_scope)
        self._open: Segment | None = None
        self._graph: Capture | None = None  # the op being added, as CUDA graphs capture it
        self.graphs: dict[str, Capture] = {}  # the current layer's ops under CUDA graphs (``layer_graphs``)
        self.layer_busy = 0.0  # device time of the ops added since the last ``next_layer``
        # delayed weight gradients (``PassContext.delay_wgrad``, ``_defer``): the routed experts' of this layer,
        # waiting for its dispatch's gradient; attention's and the shared experts' of this layer, and those of
        # the layer before (in backward order), waiting for this layer's combine gradient
        self._expert_dw = self._layer_dw = self._carried_dw = 0.0
        self._exchanged = False  # this layer ran an expert all-to-all
        seconds = ctx.tp_seconds
        self.tp_overlap = (TpOverlap(seconds, ctx.tp, ctx.dev.compute.gemm_units, kind == "B",
                                     ctx.tp_ring_reduce_scatter)
                           if seconds is not None and ctx.tp > 1 else None)

    def add_op(self, op: Op, backward: bool, fused: tuple[bool, bool] = (False, False), scores: float = 0.0,
               graph: Capture | None = None) -> OpTime:
        """``scores``: the a·s² score elements per sample of an attention op (``launch.attention_scores``).
        With context parallelism an attention op is followed by the exposed part of its K/V ring. ``graph``:
        what a CUDA graph replays of it (``plan.cuda_graphs``), its host work gone."""
        c = self.ctx
        self._graph = graph
        a2a = exchange(op, backward, c.micro_batch, c.tp, c.elem_bytes) if c.expert_parallel > 1 else (0.0, 0.0)
        fp8 = (c.formats is not None and c.formats.for_op(op.name).weights is DType.fp8  # GroupedLinear quantizes
               and c.formats.fp8_scaling)  # by its recipe (``moe_host.grouped_linear``)
        moe = dispatch_work(op, backward, c.micro_batch, c.tp, c.expert_parallel, c.elem_bytes, c.dev.compute,
                            fp8, c.moe_framework, c.expert_tp, c.moe_router_fusion)
        if moe.sync_s:
            self._host_sync(op, moe.sync_s)
        if not backward:
            self._stream(op, moe.permute_bytes)
        if a2a[0] and (exposed := self._a2a(op, a2a[0], self._cover(backward, carried=True))) > 0:
            self.dp_comms([(EP_PREFIX + "all-to-all", exposed)], op.layer, op.name)
        # the sort sits between the op and the side's all-to-all: before the op on the dispatch side of a
        # forward and the combine side of a backward, after it otherwise
        sort_first = (moe.permute_bytes > 0) != backward
        if sort_first:
            self._stream(op, moe.sort_bytes)
        if fused != (False, False):
            fused = _on_chip(op, fused, c)
        costed, axes = _costed(op, c.dev, scores, fused), None if backward else c.tp_axes
        if c.op_times is not None:  # a search's or a plan's memo (``plan.op_memo``): the same shape once
            t = c.op_times.time(costed, op, c, backward, fused, scores, axes)
        else:
            t = op_time(costed, c.dev, c.micro_batch, c.tp, c.sequence_parallel, backward, c.elem_bytes, *fused,
                        c.formats, c.spatial, c.residency, tp_axes=axes)
        seg = self._open
        if seg is None:
            seg = self._open = Segment(
                label=op.name.split(".")[0], layer=op.layer, busy_s=0, compute_s=0, flops=0, dram_bytes=0
            )
        seg.add(t, self.out.dataflows)
        if self.tp_overlap is not None and _weighted(op) and op.kind in (OpKind.matmul, OpKind.fc):
            self._split_gemm(op, backward, seg, scores, fused)
            self.tp_overlap.gemm(t.busy_s)
        seg.busy_s += extra_launches(op, backward, c.dev.compute)  # op_cost charged fixed_op_s once per op
        if not c.fused_loss and c.dev.local_dram is not None and issues_kernels(c.dev.compute):
            if per_logit := eager_cross_entropy_bytes(op, backward, c.elem_bytes):  # launch.py: eager kernels
                nbytes = per_logit * op.in_elems * c.micro_batch / shard(op, c.tp, c.sequence_parallel)
                seg.busy_s += nbytes / c.dev.dram_bandwidth
                seg.local_bytes += nbytes
                self.layer_busy += nbytes / c.dev.dram_bandwidth
        host = host_seconds(op, backward, c.dev.compute, c.host_framework) if moe.host_s is None else moe.host_s
        if (eager := eager_pointwise(op, backward, fused, c, t)) is not None:  # 'pytorch': eager kernel chains
            seg.busy_s += eager.device_s
            seg.local_bytes += eager.local_bytes
            self.layer_busy += eager.device_s
            host += eager.launches * c.dev.compute.host_dispatch_s
        if graph is not None:
            host = graph.host(op, backward, host, moe.host_s is not None, c.expert_parallel, fp8, c.dev.compute,
                              c.moe_router_fusion)
        seg.host_s += host
        if backward and c.grad_hooks is not None:  # the parameters' hooks, no host time in a full-iteration graph
            self.layer_busy += c.grad_hooks.charge(seg, op, c, self.out.captured)
        # the offloaded layers' stored activations (plan.activation_offload); a recompute's stay for its backward
        if c.offload_saved and self.out.kind != "R" and op.layer in c.offload_layers:
            seg.offload_s += saved_bytes(op, c) / c.offload_saved
        self.layer_busy += t.busy_s
        if backward and c.delay_wgrad:
            self._defer(op, t)
        if c.context is not None and op.kind is OpKind.attention:
            units, sms = c.dev.compute.gemm_units, c.dev.compute.collective_sms
            ring, hidden = c.context.exchange(op, c.micro_batch, c.tp, c.elem_bytes, backward, t.busy_s, units, sms)
            seg.hidden += hidden
            slower = c.context.slowed(op, c.micro_batch, c.tp, c.elem_bytes, backward, t.busy_s, units, sms)
            seg.busy_s += slower  # the SMs the ring's send/receive kernels take from attention (``perf.comm_sm``)
            # every step's send/receive call costs the host, the hidden steps' too (``context.ring_calls``)
            seg.host_s += ring_calls(c.context.cp, backward) * self.call_host(op.name)
            self.dp_comms(ring, op.layer, op.name, calls=False)
        if not sort_first:
            self._stream(op, moe.sort_bytes)
        if a2a[1] and (exposed := self._a2a(op, a2a[1], self._cover(backward, carried=False))) > 0:
            self.dp_comms([(EP_PREFIX + "all-to-all", exposed)], op.layer, op.name)
        if backward:
            self._stream(op, moe.permute_bytes)
        return t

    def _split_gemm(self, op: Op, backward: bool, seg: Segment, scores: float, fused: tuple[bool, bool]) -> None:
        """A transformer layer's tensor-parallel GEMM that userbuffers runs in row chunks beside its collective
        (``tp_overlap.gemm_chunks``): the segment gains what the chunks take over the whole GEMM, the op costed
        at 1 / chunks of the micro-batch's rows, chunks times. Not the head's (outside Transformer Engine's
        overlapped layers) nor a routed expert's (its own expert-tensor collectives)."""
        c = self.ctx
        assert self.tp_overlap is not None
        if op.moe is not None or op.gemm is None or op.split not in (TensorSplit.column, TensorSplit.row) \
                or not op.name.startswith("block"):
            return
        chunks, share = gemm_chunks(op.split is TensorSplit.column, backward, c.tp,
                                    self.tp_overlap.ring_reduce_scatter)
        if chunks <= 1 or share <= 0:
            return
        # only the GEMM call is split: its input was quantized once and the bias gradient reduced once (both in
        # ``t``), so the chunks are set against the whole GEMM, each without those kernels
        costed = _costed(op, c.dev, scores, fused)
        whole, part = (op_time(costed, c.dev, rows, c.tp, c.sequence_parallel, backward, c.elem_bytes, *fused,
                               c.formats, c.spatial, c.residency, gemm_only=True)
                       for rows in (c.micro_batch, c.micro_batch / chunks))
        extra = share * max(0.0, chunks * part.busy_s - whole.busy_s)
        seg.busy_s += extra
        seg.compute_s += min(extra, share * max(0.0, chunks * part.compute_s - whole.compute_s))
        self.layer_busy += extra

    def _stream(self, op: Op, nbytes: float) -> None:
        """One memory-bound kernel of the MoE token dispatcher (``experts.dispatch_work``) in the open
        segment: its bytes through device memory with the DRAM ramp (``DeviceModel.stream_s``), the per-kernel
        floor, the host's dispatch of it."""
        c = self.ctx
        if nbytes <= 0 or c.dev.local_dram is None:
            return
        seg = self._open = self._open or Segment(label=op.name.split(".")[0], layer=op.layer, busy_s=0,
                                                 compute_s=0, flops=0, dram_bytes=0)
        seconds = c.dev.stream_s(nbytes) + c.dev.compute.fixed_op_s
        seg.busy_s += seconds
        seg.local_bytes += nbytes
        if self._graph is None or not self._graph.whole:  # a graph replays the kernel (``plan.cuda_graphs``)
            seg.host_s += c.dev.compute.host_dispatch_s
        self.layer_busy += seconds

    def copy(self, op: Op, nbytes: float) -> None:
        """A memory-bound copy kernel of the compute stream beside op ``op``'s layer (PyTorch FSDP2's copy-in and
        copy-out, ``plan.sharding``): streamed as one kernel (``_stream``), its launch on the host."""
        self._graph = None
        self._stream(op, nbytes)

    def host(self, seconds: float) -> None:
        """Host work beside the open segment's kernels (it binds when the device is faster)."""
        if self._open is not None:
            self._open.host_s += seconds

    def _host_sync(self, op: Op, seconds: float) -> None:
        """A host synchronisation of the MoE token dispatcher: a segment of its own, reported as host wait."""
        if self._open is not None:
            self._open.close()
            self.out.segments.append(self._open)
            self._open = None
        self.out.segments.append(Segment.host_wait("MoE host synchronisation", op.layer, seconds))

    def _a2a(self, op: Op, nbytes: float, deferred_s: float = 0.0) -> float:
        """The bytes of an expert all-to-all left exposed. Overlapped (``PassContext.ep_seconds``), it runs
        while the paired micro-batch computes the same layer — in DualPipe and Megatron-Core's overlapped 1F1B
        one micro-batch's forward and another's backward alternate compute and communication — so it hides
        behind as much compute as this pass has run in the layer so far (the paired pass runs the same ops)
        plus ``deferred_s``, this pass's own delayed weight gradients scheduled against it (``_cover``), and
        only the excess shows: the all-to-all's time minus the cover, as the bytes of it that take that long
        (``plan.exposed``; a fraction of its bytes would pay its fixed latency again). The cover is stretched
        by the SMs the all-to-all's kernel takes from it (``_sm_cover``)."""
        seconds = self.ctx.ep_seconds
        if seconds is None or nbytes <= 0:
            return nbytes
        self._exchanged = True
        total = seconds(nbytes)
        cover = self._sm_cover(op.name, op.layer, total, self.layer_busy + deferred_s)
        if total <= cover or total <= 0:
            return 0.0
        return bytes_for(seconds, nbytes, total - cover)

    def _sm_cover(self, label: str, layer: int, comm_s: float, cover_s: float) -> float:
        """The cover an NCCL collective of ``comm_s`` seconds hides behind when it runs beside ``cover_s`` of
        this pass's compute that loses the SMs its kernel holds (``perf.comm_sm``): the compute stretched by
        them; the seconds the compute loses (over the overlapped window only) join the open segment. Not
        ``layer_busy``: that is the layer's compute at full rate, which a later all-to-all stretches itself
        (``_a2a``); counting the loss there too would hide the next all-to-all behind the SMs the last took."""
        compute = self.ctx.dev.compute
        slower, _ = beside(comm_s, cover_s, compute.gemm_units, compute.collective_sms)
        if slower > 0:
            self._open = self._open or Segment(label=label.split(".")[0], layer=layer, busy_s=0, compute_s=0,
                                               flops=0, dram_bytes=0)
            self._open.busy_s += slower
        return stretched(cover_s, compute.gemm_units, compute.collective_sms)

    def _defer(self, op: Op, t: OpTime) -> None:
        """Megatron-Core's ``--delay-wgrad-compute`` (``PassContext.delay_wgrad``): every Transformer Engine
        linear defers its weight-gradient GEMM (TE ``delay_wgrad_compute``, run by ``backward_dw``), and the
        overlapped 1F1B schedule (``TransformerLayerSchedulePlan.run``, megatron/core/models/common/
        model_chunk_schedule_plan.py) runs them apart from the input gradients: the routed experts'
        (``MoELayer.backward_dw``, the "mlp" node) between the experts' input gradients and the dispatch's
        backward all-to-all, which no longer waits for them; attention's and the shared experts'
        (``_BackwardDWWrapper`` of fine_grained_callables.py, the "attn" node) after the layer's attention
        backward, where the next layer's combine backward all-to-all starts beside them. A weight gradient has
        the forward's FLOPs (the backward's other GEMM, the input gradient, as many): its share of the op's
        backward time is flops / backward_flops. The router's weight (no TE linear) and the norms are not
        deferred. The op's time stays where it is: only what its all-to-all hides grows."""
        if op.params <= 0 or op.kind not in (OpKind.matmul, OpKind.fc) or op.backward_flops <= 0:
            return
        role = op.moe.role if op.moe is not None else None
        if role is MoERole.router:
            return
        dw = t.busy_s * min(op.flops / op.backward_flops, 1.0)
        if role is MoERole.expert:
            self._expert_dw += dw
        else:
            self._layer_dw += dw

    def _cover(self, backward: bool, carried: bool) -> float:
        """Seconds of this pass's delayed weight gradients an all-to-all of the backward hides behind, used
        once: before the routed experts (the combine's gradient) the previous layer's attention and shared
        experts' (``carried``), after them (the dispatch's gradient) the routed experts' own (``_defer``)."""
        if not backward or not self.ctx.delay_wgrad:
            return 0.0
        if carried:
            seconds, self._carried_dw = self._carried_dw, 0.0
        else:
            seconds, self._expert_dw = self._expert_dw, 0.0
        return seconds

    def next_layer(self) -> float:
        """Start a new layer; returns the device time of the one before. A backward's MoE layer hands its
        delayed attention and shared-expert weight gradients to the next (``_defer``); a dense layer's, whose
        weight gradients this model does not sort into Megatron-Core's nodes, hide nothing."""
        busy, self.layer_busy = self.layer_busy, 0.0
        self._carried_dw = self._layer_dw if self._exchanged else 0.0
        self._layer_dw = self._expert_dw = 0.0
        self._exchanged = False
        return busy

    def call_host(self, name: str) -> float:
        """Host time of one collective call at op ``name`` before its kernel's launch (``plan.launch``): none
        when a CUDA graph replays it — the op wholly captured, or the pass inside a full-iteration graph."""
        graph = self.graphs.get(name)
        if self.out.captured or (graph is not None and graph.whole):
            return 0.0
        return collective_host_seconds(self.ctx.dev.compute)

    def dp_comms(self, items: list[tuple[str, float]], layer: int, label: str, calls: bool = True) -> None:
        """Collectives over replicas ((kind, bytes per tensor rank): sharded data parallelism, the context ring,
        the expert all-to-all) after the open segment, each call's host time with it (``call_host``) unless
        the caller charged the calls already (``calls`` False: the context ring's, one per step)."""
        for kind, nbytes in items:
            seg = self._open or Segment(label=label, layer=layer, busy_s=0, compute_s=0, flops=0, dram_bytes=0)
            seg.comm = (kind, nbytes)
            seg.host_s += self.call_host(label) if calls else 0.0
            seg.close()
            self.out.segments.append(seg)
            self._open = None

    def shard_cover(self, shard: ShardComm, items: list[tuple[str, float]], hide_s: float, label: str,
                    layer: int) -> float:
        """The previous layer's compute ``hide_s`` as the cover of the sharding collectives ``items`` run behind
        it (ZeRO-2/3, FSDP: ``plan.sharding``), stretched by the SMs their NCCL kernels hold (``_sm_cover``)."""
        total = sum(shard.seconds(k, n) for k, n in items if n > 0)
        return self._sm_cover(label, layer, total, hide_s) if total > 0 else hide_s

    def regather(self, run: Regather | None) -> None:
        """Sequence parallelism's re-gather of a column-parallel run's input for its weight gradients
        (``plan.sp_regather``): the part its data gradients cannot hide closes the open segment; its NCCL call
        costs the host (none under userbuffers, which drive it from the GEMM)."""
        c = self.ctx
        if run is None or c.regather_seconds is None:
            return
        op = run.op
        nbytes = op.in_elems * c.micro_batch * message_bytes(c.formats, op.name, c.elem_bytes)
        cover = run.cover_s
        if self.tp_overlap is None and nbytes > 0:  # NCCL's gather holds SMs (userbuffers' bulk: ``plan.tp_overlap``)
            cover = self._sm_cover(op.name, op.layer, c.regather_seconds("all-gather", nbytes), cover)
        shown = exposed_bytes(c.regather_seconds, nbytes, cover)
        call = self.call_host(op.name) if self.tp_overlap is None else 0.0
        if shown <= 0:
            self.host(call)
            return
        seg = self._open or Segment(label=op.name, layer=op.layer, busy_s=0, compute_s=0, flops=0, dram_bytes=0)
        seg.comm = ("all-gather", shown)
        seg.host_s += call
        seg.close()
        self.out.segments.append(seg)
        self._open = None

    def op_comm(self, kind: str, op: Op, elems: float, wgrad_s: float | None = None) -> None:
        """The tensor-parallel collective at an op's input or output (``elems`` per sample, as the op counts
        them): a routed expert's sized by what the token dispatcher gathers and, with expert tensor parallelism
        below tp, over its expert-tensor groups or none (``experts.expert_tp_comm``). ``wgrad_s``: a backward's
        input-gradient collective beside its run's weight-gradient GEMMs (``plan.dgrad_overlap``)."""
        c = self.ctx
        routed = expert_tp_comm(op, kind, elems, c.tp, c.expert_tp, c.expert_parallel)
        if routed is not None:
            self.comm(routed[0], routed[1], op.layer, op.name, overlap=not is_etp(routed[0]),
                      wgrad_s=wgrad_s if covers(op) else None)

    def comm(self, kind: str, elems: float, layer: int, label: str, overlap: bool = True,
             wgrad_s: float | None = None) -> None:
        """A tensor-parallel collective closing the open segment, its call's host time with it (``call_host``);
        ``overlap``: one the GEMMs beside it may hide (``plan.tp_overlap``: Transformer Engine's userbuffers then
        drive it from the GEMM's own call, no collective call of its own), not the cross-entropy's; ``wgrad_s``:
        the weight-gradient GEMMs an async collective runs beside (``plan.dgrad_overlap``), what they cannot hide
        showing."""
        c = self.ctx
        if c.tp <= 1 or elems <= 0:
            return
        seg = self._open = self._open or Segment(label=label, layer=layer, busy_s=0, compute_s=0, flops=0, dram_bytes=0)
        seg.comm = (kind, elems * c.micro_batch * message_bytes(c.formats, label, c.elem_bytes))  # formats.collectives
        if self.tp_overlap is not None and overlap:  # hidden behind the GEMM beside it (``plan.tp_overlap``)
            seg.comm, slower = self.tp_overlap.collective(seg, *seg.comm)
            seg.busy_s += slower  # the GEMM's SMs the pipelined reduce-scatter takes
            self.layer_busy += slower
        else:
            if wgrad_s is not None and c.dgrad_overlap and not c.delay_wgrad:  # plan.dgrad_overlap
                if c.dgrad_seconds is None:
                    seg.deferred_cover_s = wgrad_s
                else:
                    fn = timed(c.dgrad_seconds, kind)
                    cover = self._sm_cover(label, layer, fn(seg.comm[1]), wgrad_s) if seg.comm[1] > 0 else wgrad_s
                    seg.comm = (kind, dgrad_exposed(fn, seg.comm[1], cover))
            seg.host_s += self.call_host(label)
        seg.close()
        self.out.segments.append(seg)
        self._open = None

    def finish(self) -> ChunkPass:
        if self._open is not None:
            self._open.close()
            self.out.segments.append(self._open)
            self._open = None
        return self.out


def saved_bytes(op: Op, c: PassContext) -> float:
    """Bytes an op stores for its backward, per micro-batch on one device (as ``perf.memory`` counts them)."""
    elem = c.formats.activation_bytes if c.formats is not None else c.elem_bytes
    return (op.saved_elems * elem + op.saved_bytes_fixed) * c.micro_batch / shard(op, c.tp, c.sequence_parallel)


def _costed(op: Op, dev: DeviceModel, scores: float, fused: tuple[bool, bool]) -> Op:
    """The op as the cost model sees it. An unfused attention op on a GPU-like device (local DRAM, no
    grid of cores) also moves its score matrices (``plan.launch``): they are added to its input, which
    its forward reads once and its backward twice (``op_cost``), so the forward moves 2·a·s² more
    elements and the backward 4·a·s². With these bytes the per-head GEMMs (K = head size) are memory-bound
    on a GPU, as measured: unfused attention runs far below large-GEMM throughput."""
    if not scores or fused[1] or dev.local_dram is None or dev.compute.grid is not None:
        return op
    return op.model_copy(update={"in_elems": op.in_elems + scores * SCORE_PASSES_FORWARD})


def _reduce(sp: bool) -> str:
    return "reduce-scatter" if sp else "all-reduce"


def _weighted(op: Op) -> bool:
    """Only weighted linear ops carry tensor-parallel collectives (not the elementwise ops between them)."""
    return op.params > 0 and op.kind in (OpKind.matmul, OpKind.fc, OpKind.conv, OpKind.embedding)


def _column(op: Op) -> bool:
    return op.split is TensorSplit.column and _weighted(op)


def forward_pass(
    layers: list[list[Op]], ctx: PassContext, kind: PassKind = "F", only_selective: bool = False,
    modules: Sequence[str] | None = None,
) -> ChunkPass:
    """``only_selective``: the R pass of selective recomputation, the forward of what ``modules`` re-run
    (``perf.recompute``; None: the attention core). A normally checkpointed module (``Part.whole``) re-runs
    with its tensor-parallel collectives, an output-discarding one as its bare kernels; a fused attention
    kernel recomputes its core inside its backward (``op_cost``), so nothing of it re-runs here."""
    b = _Builder(ctx, kind)
    sp = ctx.sequence_parallel
    prev_column = False
    shard = ctx.shard if ctx.shard is not None and ctx.shard.gather_weights and not only_selective else None
    for i, ops in enumerate(layers):
        before = b.next_layer()
        if shard is not None and ops:
            gather = shard.layer_items("all-gather", ops, ctx.tp)
            overlap = shard.overlap_gather and i > 0
            cover = b.shard_cover(shard, gather if overlap else [], before, ops[0].name, ops[0].layer)
            b.dp_comms(shard.exposed(gather, cover, overlap), ops[0].layer, ops[0].name)
            b.copy(ops[0], shard.copy_bytes("all-gather", gather))  # FSDP2's copy-out (``plan.sharding``)
        flags = _fusion_flags(ops, ctx.fused)
        scores = attention_scores(ops)
        flash = flash_ops(ops, ctx.fused) if only_selective else frozenset()
        rerun = selection(ops, modules) if only_selective else {}
        graphs = {} if only_selective else layer_graphs(ops, ctx.cuda_graph_scope)  # R: eager (cuda_graphs)
        b.graphs = graphs
        vocab_out = False  # the op before left its output split over the vocabulary (the logits)
        for j, (op, fused) in enumerate(zip(ops, flags, strict=True)):
            if only_selective:
                how = rerun.get(op.name)
                if how is None or not how.rerun or op.name in flash:
                    continue
                if not how.whole:
                    b.add_op(op, backward=False, scores=scores.get(op.name, 0.0))
                    continue
                fused = (False, False)  # re-run kernel by kernel, as the selective core always was
            column = _column(op)
            if sp and column and not prev_column:  # gate and up read one gathered input: one all-gather
                b.op_comm("all-gather", op, op.in_elems)
            if vocab_out and op.split is TensorSplit.replicated:  # an on-device sampler reads every logit
                gather = (ROW + "all-gather") if ctx.tp_axes is not None else "all-gather"  # ``sampling_ops``
                b.comm(gather, op.in_elems, op.layer, op.name, overlap=False)
            vocab_out = _weighted(op) and op.split is TensorSplit.vocab and op.kind is OpKind.matmul
            b.add_op(op, backward=False, fused=fused, scores=scores.get(op.name, 0.0), graph=graphs.get(op.name))
            if kind == "R" and j == 0 and not only_selective:  # the layer's checkpoint (``launch.CHECKPOINT_CALLS``)
                b.host(checkpoint_host_seconds(ctx.dev.compute))
            if ctx.tp_axes is not None:  # 2-D (plan.tensor_axes)
                for comm_kind, elems in layer_comms(ops, j, ctx.tp_axes, ctx.tp_axes_collectives, ctx.tp_tile,
                                                    ctx.tp_decode):
                    b.comm(comm_kind, elems * axis_rows(ctx), op.layer, op.name)
            elif _weighted(op) and (
                op.split is TensorSplit.row or (op.split is TensorSplit.vocab and op.kind is OpKind.embedding)
            ):
                b.op_comm(_reduce(sp), op, op.out_elems)
            if op.kind is OpKind.loss and op.split is TensorSplit.vocab:
                # the vocab-parallel cross-entropy combines its shards' max, target logit and sum of
                # exponentials: three all-reduces of one fp32 value per token (megatron/mpu/cross_entropy.py)
                for _ in range(3):
                    b.comm("all-reduce", ctx.rows_per_sample * 4 / ctx.elem_bytes, op.layer, op.name, overlap=False)
            prev_column = column
    return b.finish()


def backward_pass(layers: list[list[Op]], ctx: PassContext) -> ChunkPass:
    """Input gradients of consecutive column-parallel ops (SwiGLU's gate and up) add up locally and
    are reduced once, as Megatron's fused linear does; with sequence parallelism their input is re-gathered
    once for their weight gradients (``plan.sp_regather``), its exposed part just before that reduction; the
    reduction itself may hide behind the run's weight gradients (``plan.dgrad_overlap``)."""
    b = _Builder(ctx, "B")
    sp = ctx.sequence_parallel
    pending: Op | None = None
    run: Regather | None = None  # the pending run's re-gather
    shard = ctx.shard
    reduce: list[tuple[str, float]] = []  # the reduce-scatter of the layer just finished

    wgrad = 0.0  # the pending run's weight-gradient GEMMs, beside its input gradient's collective (plan.dgrad_overlap)

    def flush() -> None:
        nonlocal pending, run, wgrad
        b.regather(run)
        b.op_comm(_reduce(sp), pending, pending.in_elems, wgrad)  # type: ignore[arg-type]
        pending = run = None
        wgrad = 0.0

    for i, ops in enumerate(reversed(layers)):
        before = b.next_layer()
        if shard is not None and ops:
            if pending is not None:
                flush()
            _shard_boundary(b, shard, ops, reduce, before, first=i == 0)
            reduce = shard.layer_items("reduce-scatter", ops, ctx.tp)
        flags = _fusion_flags(ops, ctx.fused)
        scores = attention_scores(ops)
        graphs = layer_graphs(ops, ctx.cuda_graph_scope)
        b.graphs = graphs
        for op, fused in zip(reversed(ops), reversed(flags), strict=True):
            if pending is not None and not _column(op):
                flush()
            if sp and op.split is TensorSplit.row and _weighted(op):
                b.op_comm("all-gather", op, op.out_elems)
            if pending is None and regathers(op, _column(op), sp, ctx.tp, ctx.tp_axes is not None):
                run = Regather(op)
            t = b.add_op(op, backward=True, fused=fused, scores=scores.get(op.name, 0.0), graph=graphs.get(op.name))
            if run is not None and _column(op):
                run.add(op, t)
            if _column(op):
                pending = op
                wgrad += wgrad_seconds(op, t)
    if pending is not None:
        flush()
    if shard is not None and reduce and layers:
        if layers[0]:
            b.copy(layers[0][0], shard.copy_bytes("reduce-scatter", reduce))  # FSDP2's copy-in
        b.dp_comms(reduce, layers[0][0].layer if layers[0] else 0, "gradients")  # nothing left to hide behind
    return b.finish()


def _shard_boundary(
    b: _Builder, shard: ShardComm, ops: list[Op], reduce: list[tuple[str, float]], before: float, first: bool
) -> None:
    """Between two layers of a backward: the previous layer's reduce-scatter, then this layer's weight
    all-gather (stage 3), both behind the previous layer's compute when overlapped (the gather first:
    it was prefetched)."""
    gather = []
    if shard.gather_weights:
        gather = shard.layer_items("all-gather", ops, b.ctx.tp)
    overlap = shard.overlap_gather and not first
    hiding = (gather if overlap else []) + (reduce if shard.overlap_reduce else [])
    before = b.shard_cover(shard, hiding, before, ops[-1].name, ops[-1].layer)  # NCCL's SMs (``perf.comm_sm``)
    shown = shard.exposed(gather, before, overlap)
    hidden = sum(shard.seconds(k, n) for k, n in gather) - sum(shard.seconds(k, n) for k, n in shown)
    budget = max(0.0, before - hidden) if shard.overlap_gather and not first else before
    b.copy(ops[-1], shard.copy_bytes("reduce-scatter", reduce))  # FSDP2's copy-in of the previous layer's gradients
    b.dp_comms(shard.exposed(reduce, budget, shard.overlap_reduce) + shown, ops[-1].layer, ops[-1].name)
    b.copy(ops[-1], shard.copy_bytes("all-gather", gather))  # and the copy-out of this layer's weights
