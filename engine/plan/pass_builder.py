"""The builder of one pass: it adds a chunk's ops in order, each costed by the op model with the host work,
the kernels and the overlaps the mapping adds to it (MoE dispatch, userbuffers' split GEMMs, eager kernels, CUDA
graphs, the context ring), and closes a segment at every collective (``pass_comms``). The forward and backward
passes (``pass_forward``, ``pass_backward``) decide where those collectives go."""

from __future__ import annotations

from tilewright.engine.ir.common import DType
from tilewright.engine.ir.ops import Op, OpKind, TensorSplit
from tilewright.engine.perf.device import issues_kernels
from tilewright.engine.perf.op_cost import OpTime, op_time, shard
from tilewright.engine.perf.score_kernels import runs_causal_kernel
from tilewright.engine.plan.a2a_host import schedule_host_seconds
from tilewright.engine.plan.costed_op import as_costed, saved_bytes
from tilewright.engine.plan.cuda_graphs import FULL_ITERATION, Capture
from tilewright.engine.plan.eager_rope import rope_kernels
from tilewright.engine.plan.experts import dispatch_work, exchange
from tilewright.engine.plan.framework_host import eager_pointwise
from tilewright.engine.plan.launch import drain_seconds, eager_cross_entropy_bytes, extra_launches, host_seconds
from tilewright.engine.plan.pass_comms import PassComms, in_paired_layer
from tilewright.engine.plan.pass_fusion import on_chip
from tilewright.engine.plan.pass_records import ChunkPass, PassContext, PassKind, Segment
from tilewright.engine.plan.sharding import EP_PREFIX
from tilewright.engine.plan.tp_overlap import TpOverlap, gemm_chunks
from tilewright.engine.plan.tp_placement import is_weighted
from tilewright.engine.plan.wgrad_delay import DelayedWgrad

# the host frameworks that run Megatron-Core's rope_utils (``plan.eager_rope``)
ROPE_FRAMEWORKS = frozenset({"megatron-lm", "mcore", "mcore-te"})


class PassBuilder(PassComms, DelayedWgrad):
    """Builds one ``ChunkPass`` (``PassContext``: what the stage and the mapping fix for it), op by op."""

    def __init__(self, ctx: PassContext, kind: PassKind):
        self.ctx = ctx
        self.out = ChunkPass(kind, captured=FULL_ITERATION in ctx.cuda_graph_scope)
        self._open: Segment | None = None
        self._graph: Capture | None = None  # the op being added, as CUDA graphs capture it
        self.graphs: dict[str, Capture] = {}  # the current layer's ops under CUDA graphs (``layer_graphs``)
        # device time of the pass's ops at full rate so far, and where the current layer (``layer_busy``) and the
        # compute since the last overlapped expert all-to-all (``node_busy``, ``PassComms._a2a``) began in it
        self._busy = self._layer_from = self._node_from = 0.0
        self._launches = 0.0  # the ops' kernels beyond the first since the last all-to-all: not in ``layer_busy``
        # where the current layer began in the pass's segments, for its waits for the host (``layer_host_wait``)
        self._layer_segments, self._layer_open, self._layer_open_wait = 0, None, 0.0
        self.prev_layer_device = 0.0  # the device time of the layer before the current one (``next_layer``)
        self._unpaired = 0.0  # device time since then outside the schedule's paired layers (``in_paired_layer``)
        self._first_a2a: tuple | None = None  # a backward's first overlapped all-to-all (``PassComms._a2a``)
        self.slack: list[float] = []  # a forward's: what the backward's delayed weight gradients leave (``_a2a``)
        self._start_delay()
        seconds = ctx.tp_seconds
        self.tp_overlap = (TpOverlap(seconds, ctx.tp, ctx.dev.compute.gemm_units, kind == "B",
                                     ctx.tp_ring_reduce_scatter)
                           if seconds is not None and ctx.tp > 1 else None)

    @property
    def layer_busy(self) -> float:
        """Device time of the ops added since the last ``next_layer`` (with ``layer_host_wait``, the span that covers a
        sharded layer's gathers)."""
        return self._busy - self._layer_from

    @layer_busy.setter
    def layer_busy(self, seconds: float) -> None:
        self._busy = self._layer_from + seconds

    @property
    def node_busy(self) -> float:
        """Device time of the ops added since the pass's last overlapped expert all-to-all (or its start): the
        sub-module the schedule runs beside one all-to-all of the paired micro-batch (``PassComms._a2a``). Only
        the paired transformer layers': the embedding, the output head, the loss and the MTP heads run outside
        the pairing (``in_paired_layer``) and cover nothing."""
        return self._busy - self._node_from + self._launches - self._unpaired

    def add_op(self, op: Op, backward: bool, fused: tuple[bool, bool] = (False, False), scores: float = 0.0,
               graph: Capture | None = None) -> OpTime:
        """``scores``: the a·s² score elements per sample of an attention op (``launch.attention_scores``).
        With context parallelism an attention op is followed by the exposed part of its K/V ring. ``graph``:
        what a CUDA graph replays of it (``plan.cuda_graphs``), its host work gone."""
        c = self.ctx
        self._graph = graph
        busy_from, launches_from = self._busy, self._launches
        if op.causal_keys and not runs_causal_kernel(c.host_framework, op.causal_keys, c.elem_bytes):
            op = op.model_copy(update={"causal_keys": 0})  # the framework's softmax reads whole rows
        a2a = exchange(op, backward, c.micro_batch, c.tp, c.elem_bytes) if c.expert_parallel > 1 else (0.0, 0.0)
        fp8 = (c.formats is not None and c.formats.for_op(op.name).weights is DType.fp8  # GroupedLinear quantizes
               and c.formats.fp8_scaling)  # by its recipe (``moe_host.grouped_linear``)
        moe = dispatch_work(op, backward, c.micro_batch, c.tp, c.expert_parallel, c.elem_bytes, c.dev.compute,
                            fp8, c.moe_framework, c.expert_tp, c.moe_router_fusion)
        if not backward:  # a clamped GLU's eager clamps and offset copy run before the drain (``experts``)
            self._eager_kernels(op, moe.clamp_kernels)
        if moe.sync_s:
            self._host_sync(op, moe.sync_s)
        if not backward:
            self._stream(op, moe.permute_bytes)
        if a2a[0] and (exposed := self._a2a(op, a2a[0])) > 0:
            self.dp_comms([(EP_PREFIX + "all-to-all", exposed)], op.layer, op.name)
        # the sort sits between the op and the side's all-to-all: before the op on the dispatch side of a
        # forward and the combine side of a backward, after it otherwise
        sort_first = (moe.permute_bytes > 0) != backward
        if sort_first:  # fp8's padding copy sits between the sort and the op (``experts.fp8_padded``)
            self._stream(op, moe.sort_bytes)
            self._stream(op, moe.pad_bytes, host=False)
        if backward:  # the experts' output bias runs after fc2: its backward before fc2's
            self._eager_kernels(op, moe.bias_kernels)
            self._eager_kernels(op, self._rope(op, backward))  # the unfused RoPE's backward before qkv's
        if fused != (False, False):
            fused = on_chip(op, fused, c)
        costed, axes = as_costed(op, c.dev, scores, fused), None if backward else c.tp_axes
        if c.op_times is not None:  # a search's or a plan's memo (``plan.op_memo``): the same shape once
            t = c.op_times.time(costed, op, c, backward, fused, scores, axes)
        else:
            t = op_time(costed, c.dev, c.micro_batch, c.tp, c.sequence_parallel, backward, c.elem_bytes, *fused,
                        c.formats, c.spatial, c.residency, tp_axes=axes, expert_kernels=c.expert_kernels)
        seg = self._open
        if seg is None:
            seg = self._open = Segment(
                label=op.name.split(".")[0], layer=op.layer, busy_s=0, compute_s=0, flops=0, dram_bytes=0
            )
        seg.add(t, self.out.dataflows)
        seg.last_label = op.name.split(".")[0]
        if self.tp_overlap is not None and is_weighted(op) and op.kind in (OpKind.matmul, OpKind.fc):
            self._split_gemm(op, backward, seg, scores, fused)
            self.tp_overlap.gemm(t.busy_s)
        launches = extra_launches(op, backward, c.dev.compute)  # op_cost charged fixed_op_s once per op
        seg.busy_s += launches
        self._launches += launches  # the compute stream's time beside an all-to-all (``node_busy``)
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
        if c.ep_seconds is not None and c.moe_framework and self.out.kind != "R" and not self.out.captured:
            host += schedule_host_seconds(op, backward, c.dev.compute)  # the schedule plan's nodes (plan.a2a_host)
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
            self._ring(op, backward, t, seg)
        if not backward:
            self._eager_kernels(op, moe.bias_kernels)
            self._eager_kernels(op, self._rope(op, backward))  # the unfused RoPE after qkv (plan.eager_rope)
        else:  # the clamps' backward follows the fused kernel's
            self._eager_kernels(op, moe.clamp_kernels)
        if not sort_first:
            self._stream(op, moe.pad_bytes, host=False)
            self._stream(op, moe.sort_bytes)
        if a2a[1] and (exposed := self._a2a(op, a2a[1])) > 0:
            self.dp_comms([(EP_PREFIX + "all-to-all", exposed)], op.layer, op.name)
        if backward:
            self._stream(op, moe.permute_bytes)
        if not in_paired_layer(op):  # no all-to-all of its own: its time covers none (``node_busy``)
            self._unpaired += self._busy - busy_from + self._launches - launches_from
        return t

    def _ring(self, op: Op, backward: bool, t: OpTime, seg: Segment) -> None:
        """An attention op's context ring (``plan.context``; PyTorch's, ``plan.torch_ring``): the exposed exchange
        after it, the hidden part on the links, the SMs its kernels take from the attention, its calls on the host;
        PyTorch's ring also its unmasked steps' rate and its fp32 merges through device memory."""
        c = self.ctx
        context = c.context
        assert context is not None
        units, sms = c.dev.compute.gemm_units, c.dev.compute.collective_sms
        ratio = context.unmasked_ratio(op, backward, c.dev.compute, c.dev.sdpa_attention)
        ring, hidden = context.exchange(op, c.micro_batch, c.tp, c.elem_bytes, backward, t.busy_s, units, sms, ratio)
        seg.hidden += hidden
        slower = context.slowed(op, c.micro_batch, c.tp, c.elem_bytes, backward, t.busy_s, units, sms, ratio)
        seg.busy_s += slower  # the SMs the ring's send/receive kernels take from attention (``perf.comm_sm``)
        if ratio != 1.0:  # PyTorch's ring: the later steps' unmasked kernels (``torch_ring.unmasked_ratio``)
            saving = context.unmasked_saving(t.busy_s, ratio)
            seg.busy_s -= saving
            seg.compute_s -= min(seg.compute_s, context.unmasked_saving(t.compute_s, ratio))
            self.layer_busy -= saving
        # every step's send/receive call costs the host, the hidden steps' too (``context.ring_calls``)
        seg.host_s += context.calls(backward) * self.call_host(op.name)
        self._stream(op, context.stream_bytes(op, c.micro_batch, c.tp, backward))  # PyTorch's fp32 merges
        self.dp_comms(ring, op.layer, op.name, calls=False)

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
        costed = as_costed(op, c.dev, scores, fused)
        whole, part = (op_time(costed, c.dev, rows, c.tp, c.sequence_parallel, backward, c.elem_bytes, *fused,
                               c.formats, c.spatial, c.residency, gemm_only=True)
                       for rows in (c.micro_batch, c.micro_batch / chunks))
        extra = share * max(0.0, chunks * part.busy_s - whole.busy_s)
        seg.busy_s += extra
        seg.compute_s += min(extra, share * max(0.0, chunks * part.compute_s - whole.compute_s))
        self.layer_busy += extra

    def _stream(self, op: Op, nbytes: float, host: bool = True) -> None:
        """One memory-bound kernel of the MoE token dispatcher (``experts.dispatch_work``) in the open
        segment: its bytes through device memory with the DRAM ramp (``DeviceModel.stream_s``), the per-kernel
        floor, the host's dispatch of it (``host`` False: counted with the op's host work already, as
        ``moe_host`` counts the fp8 padding's calls)."""
        c = self.ctx
        if nbytes <= 0 or c.dev.local_dram is None:
            return
        seg = self._open = self._open or Segment(label=op.name.split(".")[0], layer=op.layer, busy_s=0,
                                                 compute_s=0, flops=0, dram_bytes=0)
        seconds = c.dev.stream_s(nbytes) + c.dev.compute.fixed_op_s
        seg.busy_s += seconds
        seg.local_bytes += nbytes
        if host and (self._graph is None or not self._graph.whole):  # a graph replays it (``plan.cuda_graphs``)
            seg.host_s += c.dev.compute.host_dispatch_s
        self.layer_busy += seconds

    def _rope(self, op: Op, backward: bool) -> tuple[float, ...]:
        """Bytes of each eager kernel of Megatron-Core's unfused RoPE after ``op`` (``plan.eager_rope``): the
        query's and the key's heads on this rank (split by tp like qkv's output); none outside Megatron-Core's
        training (a serving runtime, ``moe_framework`` False, rotates in its own attention kernels) or where no host
        framework launches kernels."""
        c = self.ctx
        if (op.rope is None or not c.moe_framework or c.host_framework not in ROPE_FRAMEWORKS
                or not issues_kernels(c.dev.compute)):
            return ()
        per = c.micro_batch / shard(op, c.tp, c.sequence_parallel) * c.elem_bytes
        return rope_kernels(tuple(e * per for e in op.rope), backward)

    def _eager_kernels(self, op: Op, kernels: tuple[float, ...]) -> None:
        """Eager kernels beside a routed-expert op (``experts.expert_bias_kernels``, ``experts.glu_clamp_kernels``):
        each streamed on its own (``_stream``: its bytes, the per-kernel floor, the host's dispatch), even one whose
        bytes are negligible (a reduction's output, the probabilities' concatenation) pays its floor and
        dispatch."""
        for nbytes in kernels:
            if nbytes > 0:
                self._stream(op, nbytes)
            elif self.ctx.dev.local_dram is not None:
                self._kernel_floor(op, host=self._graph is None or not self._graph.whole)

    def _kernel_floor(self, op: Op, host: bool = True) -> None:
        """One kernel whose bytes are negligible in the open segment: the per-kernel floor on the device and
        (``host``: not replayed by a CUDA graph) its dispatch on the host."""
        c = self.ctx.dev.compute
        seg = self._open = self._open or Segment(label=op.name.split(".")[0], layer=op.layer, busy_s=0,
                                                 compute_s=0, flops=0, dram_bytes=0)
        seg.busy_s += c.fixed_op_s
        if host:
            seg.host_s += c.host_dispatch_s
        self.layer_busy += c.fixed_op_s

    def copy(self, op: Op, nbytes: float) -> None:
        """A memory-bound copy kernel of the compute stream beside op ``op``'s layer (PyTorch FSDP2's copy-in and
        copy-out, ``plan.sharding``): streamed as one kernel (``_stream``), its launch on the host."""
        self._graph = None
        self._stream(op, nbytes)

    def host_link_wait(self, op: Op, seconds: float) -> None:
        """The compute stream waiting ``seconds`` for a host-link copy it needs before ``op``'s layer (an offloaded
        shard's, ``plan.sharding``): device time without compute in the open segment (a memory stall), which hides
        no later collective."""
        if seconds <= 0:
            return
        seg = self._open = self._open or Segment(label=op.name.split(".")[0], layer=op.layer, busy_s=0,
                                                 compute_s=0, flops=0, dram_bytes=0)
        seg.busy_s += seconds

    def host(self, seconds: float) -> None:
        """Host work beside the open segment's kernels (it binds when the device is faster)."""
        if self._open is not None:
            self._open.host_s += seconds

    def _host_sync(self, op: Op, seconds: float, label: str = "MoE host synchronisation") -> None:
        """A host synchronisation (the MoE token dispatcher's, a blocking copy's): a segment of its own, reported
        as host wait."""
        if self._open is not None:
            self._open.close()
            self.out.segments.append(self._open)
            self._open = None
        self.out.segments.append(Segment.host_wait(label, op.layer, seconds))

    def blocking_copies(self, op: Op, copies: int) -> None:
        """``copies`` blocking host-to-device copies of a scalar before ``op`` (``plan.deepspeed_host``): each its
        call on the host and its copy's floor on the device in the open segment, then a drain of its own. None
        inside a full-iteration CUDA graph, which cannot capture a synchronisation."""
        c = self.ctx.dev.compute
        if copies <= 0 or self.out.captured or not issues_kernels(c):
            return
        for _ in range(copies):
            self._kernel_floor(op)
            self._host_sync(op, drain_seconds(c), "blocking host-to-device copy")

    @property
    def layer_host_wait(self) -> float:
        """Seconds the device has waited for the host since the last ``next_layer``: each segment lasts
        max(device, host) (``Segment.close``), so its wait is what its host time runs past its device time —
        a closed segment's ``dispatch_wait_s``, a host wait's whole length (a drain, a synchronisation), the open
        segment's excess so far. The segment open when the layer began counts only the wait it gained since."""
        since = self.out.segments[self._layer_segments:]
        start, now = self._layer_open, self._open
        wait = sum(s.dispatch_wait_s for s in since if s is not start)
        if now is not None and now is not start:
            wait += _excess(now)
        if start is not None and (start is now or any(s is start for s in since)):
            wait += max(0.0, (_excess(now) if start is now else start.dispatch_wait_s) - self._layer_open_wait)
        return wait

    def next_layer(self) -> float:
        """Start a new layer; returns how long the one before lasted: its device time plus the time the device
        waited for the host in it (``layer_host_wait``; ``prev_layer_device`` keeps the device part). That span is
        the cover of the sharded weights' gathers and reduce-scatters prefetched behind it (``plan.sharding``,
        ``PassComms.shard_cover``): an NCCL kernel on its own stream runs on while the compute stream waits for
        the host's launches, so a host-bound layer hides as much as its span, and a copy kernel added to its idle
        device time hides nothing more. The compute since the last overlapped expert all-to-all runs on
        (``node_busy``); a dense layer's delayed weight gradients hide nothing (``_hand_over``)."""
        self.prev_layer_device = self.layer_busy
        span = self.prev_layer_device + self.layer_host_wait
        self._layer_from = self._busy
        self._layer_segments, self._layer_open = len(self.out.segments), self._open
        self._layer_open_wait = _excess(self._open) if self._open is not None else 0.0
        self._hand_over()
        return span

    def finish(self) -> ChunkPass:
        self.charge_first_a2a()
        if self._open is not None:
            self._open.close()
            self.out.segments.append(self._open)
            self._open = None
        return self.out


def _excess(seg: Segment) -> float:
    """What an open segment's host time runs past its device time so far (its wait for the host once closed)."""
    return max(0.0, seg.host_s - seg.busy_s)
