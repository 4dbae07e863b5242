"""Megatron-Core's delayed weight gradients (``--delay-wgrad-compute``) as the cover of a backward's expert
all-to-all: which of a layer's weight-gradient GEMMs wait for which all-to-all, carried from layer to layer. A mixin
of ``pass_builder.PassBuilder``, kept apart because it is its own small state machine over the layers."""

from __future__ import annotations

from tilewright.engine.ir.ops import MoERole, Op, OpKind
from tilewright.engine.perf.op_cost import OpTime
from tilewright.engine.plan.pass_records import PassContext


class DelayedWgrad:
    """The delayed weight gradients of one pass; mixed into ``PassBuilder``, whose context it reads."""

    ctx: PassContext

    def _start_delay(self) -> None:
        """Nothing delayed yet (``PassBuilder.__init__``)."""
        # delayed weight gradients (``PassContext.delay_wgrad``, ``_defer``): the routed experts' of this layer,
        # waiting for its dispatch's gradient; attention's and the shared experts' of this layer, and those of
        # the layer before (in backward order), waiting for this layer's combine gradient
        self._expert_dw = self._layer_dw = self._carried_dw = 0.0
        self._exchanged = False  # this layer ran an expert all-to-all

    def _hand_over(self) -> None:
        """At a new layer (``PassBuilder.next_layer``): a backward's MoE layer hands its delayed attention and
        shared-expert weight gradients to the next; a dense layer's hide nothing."""
        self._carried_dw = self._layer_dw if self._exchanged else 0.0
        self._layer_dw = self._expert_dw = 0.0
        self._exchanged = False

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
