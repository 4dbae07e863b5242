"""Sequence parallelism's re-gather of a column-parallel op's input for its weight gradient.

With sequence parallelism a column-parallel linear all-gathers its sequence-sharded input in the forward and,
to save memory, keeps only its shard for the backward (Korthikanti et al. 2022, 'Reducing Activation
Recomputation in Large Transformer Models', §4.2.2; ``perf.memory`` counts that shard). Its backward needs the
whole input again for the weight-gradient GEMM, so it all-gathers it once more:

- Megatron-Core ``LinearWithGradAccumulationAndAsyncCommunication.backward`` (core/tensor_parallel/layers.py)
  launches ``_gather_along_first_dim(..., async_op=True)`` and delays the data-gradient GEMM a few µs 'to have
  gather scheduled first', waits for the gather after it, then runs the weight gradient (beside the input
  gradient's reduce-scatter); Transformer Engine's ``Linear``/``LayerNormLinear`` backward does the same with
  NCCL (``backward_input_needs_gather``);
- under userbuffers (``mapping.overlap_tp_comm``) Transformer Engine runs it as a *bulk* overlap with the
  data-gradient GEMM (``ub_bulk_dgrad``: Megatron-Bridge's ``qkv_dgrad``/``fc1_dgrad`` ``BulkOverlapCfg``),
  on a few SMs of its own and without a collective call.

Either way the gather hides behind the data-gradient GEMM of the op and only what that GEMM cannot cover shows,
as tensor-parallel communication; NCCL's gather holds SMs the GEMM loses meanwhile (``perf.comm_sm``: the cover
stretched, the loss charged to the run's segment by ``pass_comms.PassComms.regather``), userbuffers' few are not
counted. One gather serves a run of consecutive column-parallel ops (SwiGLU's gate and
up read one gathered input, as Megatron's fused fc1), its cover their data gradients. Not for an op whose
input was kept whole (no all-gather before it in the forward: a routed expert's tokens come from its dispatcher),
nor without sequence parallelism, at tp 1 or under 2-D tensor parallelism.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tilewright.engine.ir.ops import Op
from tilewright.engine.perf.op_cost import OpTime


def regathers(op: Op, column: bool, sequence_parallel: bool, tp: int, two_d: bool) -> bool:
    """Whether the backward re-gathers ``op``'s input: a weighted column-parallel op (``column``) whose input the
    forward all-gathered from its sequence shards (not a routed expert's)."""
    return column and sequence_parallel and tp > 1 and not two_d and op.moe is None


def dgrad_seconds(op: Op, t: OpTime) -> float:
    """The data-gradient GEMM's share of an op's backward time: it has the forward's FLOPs, as the weight
    gradient has (the backward's FLOPs are the two), so flops / backward_flops of it."""
    if op.backward_flops <= 0:
        return 0.0
    return t.busy_s * min(op.flops / op.backward_flops, 1.0)


def exposed_bytes(seconds: Callable[[str, float], float], nbytes: float, cover_s: float) -> float:
    """The bytes of the re-gather left showing: it takes ``seconds("all-gather", nbytes)`` on the tensor group and
    hides behind ``cover_s`` of data-gradient GEMM; what exceeds the cover shows, charged as the same all-gather
    carrying that fraction of its bytes (as ``plan.tp_overlap`` charges the exposed part of its collectives)."""
    if nbytes <= 0:
        return 0.0
    total = seconds("all-gather", nbytes)
    if total <= cover_s or total <= 0:
        return 0.0
    return nbytes * (total - cover_s) / total


@dataclass
class Regather:
    """The re-gather of one run of column-parallel ops in a backward: opened at the run's first op (in backward
    order), its cover growing by each op's data gradient, charged when the run ends (``passes.backward_pass``,
    just before the run's input-gradient reduction)."""

    op: Op  # the run's first op in backward order: the gather's label and per-sample input elements
    cover_s: float = 0.0

    def add(self, op: Op, t: OpTime) -> None:
        self.cover_s += dgrad_seconds(op, t)
