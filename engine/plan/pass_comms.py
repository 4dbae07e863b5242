"""The collectives a pass builder closes its segments with: tensor-parallel ones at an op (with userbuffers'
and the data gradients' overlap), those over replicas (sharded data parallelism, the context ring, the expert
all-to-all, with what the layer's compute hides of them), the sequence-parallel re-gather, and the host time of
each call. A mixin of ``pass_builder.PassBuilder``: it reads the builder's context, open segment,
layer time and ``host``."""

from __future__ import annotations

from collections.abc import Callable

from tilewright.engine.ir.ops import Op
from tilewright.engine.perf.comm_sm import beside, stretched
from tilewright.engine.perf.formats import message_bytes
from tilewright.engine.plan.cuda_graphs import Capture
from tilewright.engine.plan.dgrad_overlap import covers, timed
from tilewright.engine.plan.dgrad_overlap import exposed as dgrad_exposed
from tilewright.engine.plan.experts import expert_tp_comm, is_etp
from tilewright.engine.plan.exposed import bytes_for
from tilewright.engine.plan.launch import collective_host_seconds
from tilewright.engine.plan.pass_records import ChunkPass, PassContext, Segment
from tilewright.engine.plan.sharding import EP_PREFIX, ShardComm
from tilewright.engine.plan.sp_regather import Regather, exposed_bytes
from tilewright.engine.plan.tp_overlap import TpOverlap


def in_paired_layer(op: Op) -> bool:
    """An op of a layer Megatron-Core's schedule plan pairs with another micro-batch's (``PassComms._a2a``): a
    transformer block's, or a multi-token-prediction depth's (``TransformerLayerSchedulePlan`` built with
    ``is_mtp``). The embedding (``pre_process``), the output head and loss (``post_process``) and an MTP depth's
    shared head and loss (``workloads.transformer_mtp``) run outside the paired layers' steps: beside no
    all-to-all of the other micro-batch."""
    prefix = op.name.split(".", 1)[0]  # the layer's name (``workloads.transformer``)
    return prefix not in ("embedding", "head") and not prefix.endswith("_head")


class PassComms:
    """The builder's collectives (``PassBuilder`` holds the state below)."""

    ctx: PassContext
    out: ChunkPass
    _open: Segment | None
    graphs: dict[str, Capture]
    layer_busy: float
    prev_layer_device: float
    node_busy: float
    slack: list[float]
    _first_a2a: tuple | None  # a backward's first all-to-all, held back (``_a2a``); () once charged
    _unpaired: float
    _busy: float
    _node_from: float
    _launches: float
    tp_overlap: TpOverlap | None
    _exchanged: bool
    _pooled: Callable[[bool], float]  # ``wgrad_delay.DelayedWgrad``

    def _a2a(self, op: Op, nbytes: float) -> float:
        """The bytes of an expert all-to-all left exposed. Overlapped (``PassContext.ep_seconds``: Megatron-Core's
        ``--overlap-moe-expert-parallel-comm``, DeepSeek's DualPipe), each layer of one micro-batch's forward runs
        beside the same layer of another's backward, split into nodes — attention (with the pre-MLP norm, the shared
        experts, the router and the dispatch's permute), the dispatch all-to-all, the MLP (the experts), the combine
        all-to-all — computation on one stream, communication on the other. NVIDIA/Megatron-LM
        ``TransformerLayerSchedulePlan.run`` (megatron/core/models/common/model_chunk_schedule_plan.py at 01cf4fb552b3;
        the nodes in megatron/core/models/gpt/fine_grained_callables.py at 00c58ba02c54) pairs them

            communication: combine backward | dispatch forward | dispatch backward | combine forward
            computation:   attention forward | MLP backward    | MLP forward       | attention backward

        (DeepSeek-V3 §3.2.1, arXiv 2412.19437, splits a forward and a backward chunk into the same attention, dispatch,
        MLP and combine and overlaps one's computation with the other's all-to-alls, its Figure 4; the
        deepseek-ai/DualPipe README: paired cells "have mutually overlapped computation and communication"). Each
        all-to-all hides behind the one node of the other micro-batch beside it, and each node hides one all-to-all. The
        four all-to-alls carry the same bytes (every token-slot's hidden vector: ``experts.exchange``), so each pass
        charges, at each of its all-to-alls, the one of the other pass that its own compute since its previous
        all-to-all runs beside (``node_busy``: a forward's attention node before the dispatch, its MLP before the
        combine; a backward's MLP before the dispatch's gradient, and before the combine's gradient the attention of the
        layer before it in backward order with this layer's combine and shared experts' backward). Forward layer i
        runs beside backward layer N − 1 − i (``b_layer = b_schedule_plan.pop_layer()``), so the backward's first
        all-to-all, the combine gradient of the chunk's last layer, stands for the forward's last combine, beside the
        backward's last attention node: it is charged at the end of the paired layers against that node
        (``charge_first_a2a``), not against what ran before it (the output head's backward, which
        ``post_process.backward`` runs before the paired layers). Only the paired layers' compute covers
        (``in_paired_layer``: not the embedding, the head, the loss or an MTP depth's head). A pass the combined 1F1B
        runs alone (``PassContext.ep_alone``: the warmup's forwards, the cooldown's backwards, ``plan.schedules``)
        has nothing beside its all-to-alls, which show whole. The exposed part is
        that all-to-all's time beyond its node, stretched by the SMs the all-to-all's kernel takes from it
        (``_sm_cover``), charged as the bytes of it that take that long (``plan.exposed``; a fraction of its bytes would
        pay its fixed latency again). Summed over the two passes, that is each all-to-all against the node the source
        runs beside it, and no compute hides two.

        Delayed weight gradients (``plan.wgrad_delay``) run beside the backward's own next all-to-all as well: a
        backward records, per all-to-all, what of its node the forward's all-to-all did not need, at most the node's
        delayed GEMMs (``ChunkPass.a2a_slack``); the forward adds it, in the same order, to the cover of its all-to-all
        that stands for that one (``PassBuilder.slack``: the backward's k-th all-to-all pairs with the forward's k-th,
        its combine gradient with the forward's dispatch, its dispatch gradient with the combine)."""
        seconds = self.ctx.ep_seconds
        if seconds is None or nbytes <= 0:
            return nbytes
        self._exchanged = True
        if self.ctx.ep_alone:  # nothing runs beside it: the pass's next node waits for it (``plan.schedules``)
            return nbytes
        node, self._node_from, self._launches, self._unpaired = self.node_busy, self._busy, 0.0, 0.0
        backward = self.out.kind == "B"
        delayed = self._pooled(backward)
        if backward and self._first_a2a is None:
            # the combine gradient of the chunk's last layer stands for the forward's last combine, which runs
            # beside this pass's last attention node: charged at the pass's end (``charge_first_a2a``); nothing
            # of the paired layers precedes it (``post_process.backward`` runs before them), so no slack either
            self._first_a2a = (op, nbytes)
            self.out.a2a_slack.append(0.0)
            return 0.0
        extra = self.slack.pop(0) if self.slack and not backward else 0.0
        exposed, spare = self._charge(op, nbytes, node, extra)
        if backward:
            self.out.a2a_slack.append(min(delayed, spare))
        return exposed

    def charge_first_a2a(self) -> None:
        """At the end of a backward's paired layers: the backward's first all-to-all (``_a2a`` held it back)
        against the node after its last one — the first layer's attention backward, beside which Megatron-Core
        runs the paired forward's last combine (``TransformerLayerSchedulePlan.run``: forward layer i beside
        backward layer N − 1 − i). What that node leaves covers no all-to-all of this pass: none follows."""
        if self._first_a2a is None or self._first_a2a == ():
            return
        op, nbytes = self._first_a2a
        self._first_a2a = ()  # charged: a later call (``finish``) does nothing
        node, self._node_from, self._launches, self._unpaired = self.node_busy, self._busy, 0.0, 0.0
        self._pooled(True)
        exposed, _ = self._charge(op, nbytes, node, 0.0)
        if exposed > 0:
            self.dp_comms([(EP_PREFIX + "all-to-all", exposed)], op.layer, op.name)

    def _charge(self, op: Op, nbytes: float, node: float, extra: float) -> tuple[float, float]:
        """(bytes left exposed, seconds of the node the all-to-all did not need) of one overlapped all-to-all
        beside ``node`` seconds of compute and ``extra`` of the paired backward's delayed weight gradients."""
        seconds = self.ctx.ep_seconds
        assert seconds is not None
        total = seconds(nbytes)
        compute = self.ctx.dev.compute
        need = total / stretched(1.0, compute.gemm_units, compute.collective_sms)  # the compute that covers it
        cover = self._sm_cover(op.name, op.layer, total, node + extra)
        if total <= cover or total <= 0:
            self._hidden_call(op)
            return 0.0, max(0.0, node - need)
        return bytes_for(seconds, nbytes, total - cover), max(0.0, node - need)

    def _hidden_call(self, op: Op) -> None:
        """The host's call of an all-to-all the paired node hides whole: no segment closes at it (``dp_comms``,
        which charges an exposed one's call), but the host makes its NCCL call all the same (``call_host``), beside
        the open segment's kernels (``plan.a2a_host``)."""
        seg = self._open = self._open or Segment(label=op.name.split(".")[0], layer=op.layer, busy_s=0, compute_s=0,
                                                 flops=0, dram_bytes=0)
        seg.host_s += self.call_host(op.name)

    def _sm_cover(self, label: str, layer: int, comm_s: float, cover_s: float) -> float:
        """The cover an NCCL collective of ``comm_s`` seconds hides behind when it runs beside ``cover_s`` of
        this pass's compute that loses the SMs its kernel holds (``perf.comm_sm``): the compute stretched by
        them; the seconds the compute loses (over the overlapped window only) join the open segment. Not
        ``node_busy``: that is the compute at full rate, which a later all-to-all stretches itself (``_a2a``);
        counting the loss there too would hide the next all-to-all behind the SMs the last took."""
        compute = self.ctx.dev.compute
        slower, _ = beside(comm_s, cover_s, compute.gemm_units, compute.collective_sms)
        if slower > 0:
            self._open = self._open or Segment(label=label.split(".")[0], layer=layer, busy_s=0, compute_s=0,
                                               flops=0, dram_bytes=0)
            self._open.busy_s += slower
        return stretched(cover_s, compute.gemm_units, compute.collective_sms)

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
        """The previous layer's span ``hide_s`` (``PassBuilder.next_layer``: its device time and its waits for
        the host) as the cover of the sharding collectives ``items`` run behind it (ZeRO-2/3, FSDP:
        ``plan.sharding``). Only its kernels lose the SMs the NCCL kernels hold: their device time
        (``prev_layer_device``) stretched by them and charged the loss (``_sm_cover``), the cover the longer of
        that and the span."""
        total = sum(shard.seconds(k, n) for k, n in items if n > 0)
        if total <= 0:
            return hide_s
        return max(hide_s, self._sm_cover(label, layer, total, min(self.prev_layer_device, hide_s)))

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
