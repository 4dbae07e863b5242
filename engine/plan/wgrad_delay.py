"""Megatron-Core's delayed weight gradients (``--delay-wgrad-compute``) under the overlapped expert all-to-all:
which of a backward's weight-gradient GEMMs may run beside an all-to-all they no longer gate. A mixin of
``pass_builder.PassBuilder``, kept apart because it is its own small state over the pass's all-to-alls.

Where they run (NVIDIA/Megatron-LM ``TransformerLayerSchedulePlan.run``, megatron/core/models/common/
model_chunk_schedule_plan.py at 01cf4fb552b3, and ``TransformerLayerNode.backward_dw`` of
megatron/core/models/gpt/fine_grained_callables.py at 00c58ba02c54): the backward micro-batch's "mlp" node runs
its input gradients, then ``b_layer.mlp.backward_dw()`` (the routed experts' weight gradients) on the compute
stream, while its dispatch's backward all-to-all — issued after, on the communication stream, waiting on the
micro-batch's event, which the weight gradients do not record (``ScheduleNode``, ``stream_acquire_context`` of
megatron/core/pipeline_parallel/utils.py at 01415c4d79d4) — starts as soon as the input gradients end; the "attn"
node's weight gradients (attention's and the shared experts', ``_BackwardDWWrapper``) run last in the layer's
step, beside the next layer's combine backward all-to-all. Without the delay each node's weight gradients are
part of its backward, and the all-to-all after it waits for them.

What that changes under ``PassComms._a2a``'s pairing (its docstring): a backward node's compute — weight
gradients included, delayed or not — covers the forward's all-to-all the schedule runs beside it (the forward's
dispatch beside the mlp node, its combine beside the attn node), since the forward's next node waits for that
all-to-all anyway. The delay lets what the weight gradients are not needed for there cover the backward's own
next all-to-all too (the dispatch's gradient after the mlp node, the next layer's combine gradient after the attn
node): the part of the node left once the forward's all-to-all has its cover, at most the delayed GEMMs
(``PassComms._a2a``: the backward records it per all-to-all, the forward adds it to the cover of the all-to-all
that stands for that one). Used once: the delayed seconds are pooled since the pass's last all-to-all.
"""

from __future__ import annotations

from tilewright.engine.ir.ops import MoERole, Op, OpKind
from tilewright.engine.perf.op_cost import OpTime
from tilewright.engine.plan.pass_comms import in_paired_layer
from tilewright.engine.plan.pass_records import PassContext


class DelayedWgrad:
    """The delayed weight gradients of one pass; mixed into ``PassBuilder``, whose context it reads."""

    ctx: PassContext

    def _start_delay(self) -> None:
        """Nothing delayed yet (``PassBuilder.__init__``)."""
        self._delayed = 0.0  # seconds of delayed weight gradients since the pass's last all-to-all (``_defer``)
        self._exchanged = False  # the current layer ran an expert all-to-all

    def _hand_over(self) -> None:
        """At a new layer (``PassBuilder.next_layer``): a dense layer's delayed weight gradients, which this model
        does not sort into Megatron-Core's nodes, are pooled for no all-to-all; a MoE layer's attention and shared
        experts' wait for the next layer's combine gradient."""
        if not self._exchanged:
            self._delayed = 0.0
        self._exchanged = False

    def _defer(self, op: Op, t: OpTime) -> None:
        """Megatron-Core's ``--delay-wgrad-compute`` (``PassContext.delay_wgrad``): every Transformer Engine
        linear defers its weight-gradient GEMM (TE ``delay_wgrad_compute``, run by ``backward_dw``; module
        docstring). A weight gradient has the forward's FLOPs (the backward's other GEMM, the input gradient, as
        many): its share of the op's backward time is flops / backward_flops. The router's weight (no TE linear)
        and the norms are not deferred. The op's time stays where it is: only what may run beside an all-to-all
        grows."""
        if op.params <= 0 or op.kind not in (OpKind.matmul, OpKind.fc) or op.backward_flops <= 0:
            return
        if op.moe is not None and op.moe.role is MoERole.router:
            return
        if not in_paired_layer(op):  # the output layer's: outside the paired layers
            return
        self._delayed += t.busy_s * min(op.flops / op.backward_flops, 1.0)

    def _pooled(self, backward: bool) -> float:
        """Seconds of delayed weight gradients in the compute since the pass's last all-to-all, taken once: a
        backward's with ``PassContext.delay_wgrad``, else none."""
        if not backward or not self.ctx.delay_wgrad:
            return 0.0
        seconds, self._delayed = self._delayed, 0.0
        return seconds
