"""An op's bytes as a pass charges them: the unfused attention's score matrices added to its input (what the
cost model prices) and the activations it stores for its backward (what activation offload copies). Apart from
the builder so that tests and benchmarks price an op exactly as a pass does."""

from __future__ import annotations

from tilewright.engine.ir.ops import Op
from tilewright.engine.perf.device import DeviceModel
from tilewright.engine.perf.op_cost import shard
from tilewright.engine.plan.launch import SCORE_PASSES_FORWARD
from tilewright.engine.plan.pass_records import PassContext


def saved_bytes(op: Op, c: PassContext) -> float:
    """Bytes an op stores for its backward, per micro-batch on one device (as ``perf.memory`` counts them)."""
    elem = c.formats.activation_bytes if c.formats is not None else c.elem_bytes
    return (op.saved_elems * elem + op.saved_bytes_fixed) * c.micro_batch / shard(op, c.tp, c.sequence_parallel)


def as_costed(op: Op, dev: DeviceModel, scores: float, fused: tuple[bool, bool]) -> Op:
    """The op as the cost model sees it. An unfused attention op on a GPU-like device (local DRAM, no
    grid of cores) also moves its score matrices (``plan.launch``): they are added to its input, which
    its forward reads once and its backward twice (``op_cost``), so the forward moves 2·a·s² more
    elements and the backward 4·a·s². With these bytes the per-head GEMMs (K = head size) are memory-bound
    on a GPU, as measured: unfused attention runs far below large-GEMM throughput."""
    if not scores or fused[1] or dev.local_dram is None or dev.compute.grid is not None:
        return op
    return op.model_copy(update={"in_elems": op.in_elems + scores * SCORE_PASSES_FORWARD})
