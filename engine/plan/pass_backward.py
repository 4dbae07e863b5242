"""The backward pass of one model chunk: Megatron's tensor-parallel collectives in the backward (an all-reduce
of each column-parallel run's input gradient; with sequence parallelism a reduce-scatter there, an all-gather before
each row-parallel op and the run's input re-gathered for its weight gradients) and, between layers, the sharded
gradients' reduce-scatters and weights' gathers (``_shard_boundary``)."""

from __future__ import annotations

from tilewright.engine.ir.ops import Op, TensorSplit
from tilewright.engine.plan.cuda_graphs import layer_graphs
from tilewright.engine.plan.dgrad_overlap import wgrad_seconds
from tilewright.engine.plan.launch import attention_scores
from tilewright.engine.plan.pass_builder import PassBuilder
from tilewright.engine.plan.pass_fusion import fusion_flags
from tilewright.engine.plan.pass_records import ChunkPass, PassContext
from tilewright.engine.plan.sharding import ShardComm
from tilewright.engine.plan.sp_regather import Regather, regathers
from tilewright.engine.plan.tp_placement import is_column, is_weighted, reduce_kind


def backward_pass(layers: list[list[Op]], ctx: PassContext) -> ChunkPass:
    """Input gradients of consecutive column-parallel ops (SwiGLU's gate and up) add up locally and
    are reduced once, as Megatron's fused linear does; with sequence parallelism their input is re-gathered
    once for their weight gradients (``plan.sp_regather``), its exposed part just before that reduction; the
    reduction itself may hide behind the run's weight gradients (``plan.dgrad_overlap``)."""
    b = PassBuilder(ctx, "B")
    sp = ctx.sequence_parallel
    pending: Op | None = None
    run: Regather | None = None  # the pending run's re-gather
    shard = ctx.shard
    reduce: list[tuple[str, float]] = []  # the reduce-scatter of the layer just finished
    reduce_host = 0.0  # and the host-link copy of its gradient shard (offloaded gradients, ``plan.sharding``)

    wgrad = 0.0  # the pending run's weight-gradient GEMMs, beside its input gradient's collective (plan.dgrad_overlap)

    def flush() -> None:
        nonlocal pending, run, wgrad
        b.regather(run)
        b.op_comm(reduce_kind(sp), pending, pending.in_elems, wgrad)  # type: ignore[arg-type]
        pending = run = None
        wgrad = 0.0

    for i, ops in enumerate(reversed(layers)):
        before = b.next_layer()
        if shard is not None and ops:
            if pending is not None:
                flush()
            _shard_boundary(b, shard, ops, reduce, before, first=i == 0, reduce_host=reduce_host)
            reduce = shard.layer_items("reduce-scatter", ops, ctx.tp)
            reduce_host = shard.host_seconds("reduce-scatter", ops, ctx.tp)
        flags = fusion_flags(ops, ctx.fused)
        scores = attention_scores(ops)
        graphs = layer_graphs(ops, ctx.cuda_graph_scope)
        b.graphs = graphs
        for op, fused in zip(reversed(ops), reversed(flags), strict=True):
            if pending is not None and not is_column(op):
                flush()
            if sp and op.split is TensorSplit.row and is_weighted(op):
                b.op_comm("all-gather", op, op.out_elems)
            if pending is None and regathers(op, is_column(op), sp, ctx.tp, ctx.tp_axes is not None):
                run = Regather(op)
            t = b.add_op(op, backward=True, fused=fused, scores=scores.get(op.name, 0.0), graph=graphs.get(op.name))
            if run is not None and is_column(op):
                run.add(op, t)
            if is_column(op):
                pending = op
                wgrad += wgrad_seconds(op, t)
    if pending is not None:
        flush()
    b.charge_first_a2a()  # the first all-to-all, beside the last attention node (``PassComms._a2a``)
    if shard is not None and reduce and layers:
        if layers[0]:
            b.copy(layers[0][0], shard.copy_bytes("reduce-scatter", reduce))  # FSDP2's copy-in
        b.dp_comms(reduce, layers[0][0].layer if layers[0] else 0, "gradients")  # nothing left to hide behind
        if layers[0]:
            b.host_link_wait(layers[0][0], reduce_host)
    return b.finish()


def _shard_boundary(
    b: PassBuilder, shard: ShardComm, ops: list[Op], reduce: list[tuple[str, float]], before: float, first: bool,
    reduce_host: float = 0.0,
) -> None:
    """Between two layers of a backward: the previous layer's reduce-scatter, then this layer's weight
    all-gather (stage 3), both behind the previous layer's compute when overlapped (the gather first:
    it was prefetched). Offloaded shards (``plan.sharding``): the weight shard's host copy runs ahead of its
    gather and takes the cover first; ``reduce_host``, the previous layer's gradient shard's copy to the host,
    follows its reduce-scatter in the cover left to it; what they cannot hide stalls the compute stream."""
    gather = []
    if shard.gather_weights:
        gather = shard.layer_items("all-gather", ops, b.ctx.tp)
    overlap = shard.overlap_gather and not first
    hiding = (gather if overlap else []) + (reduce if shard.overlap_reduce else [])
    before = b.shard_cover(shard, hiding, before, ops[-1].name, ops[-1].layer)  # NCCL's SMs (``perf.comm_sm``)
    copy_in = shard.host_seconds("all-gather", ops, b.ctx.tp) if gather else 0.0
    wait = copy_in - before if overlap else copy_in
    cover = max(0.0, before - copy_in) if overlap else before
    shown = shard.exposed(gather, cover, overlap)
    hidden = sum(shard.seconds(k, n) for k, n in gather) - sum(shard.seconds(k, n) for k, n in shown)
    budget = max(0.0, cover - hidden) if overlap else before
    if shard.overlap_reduce:  # the gradient shard's copy in what the reduce-scatter leaves of the budget
        reduce_host -= max(0.0, budget - sum(shard.seconds(k, n) for k, n in reduce if n > 0))
    b.host_link_wait(ops[-1], max(0.0, wait) + max(0.0, reduce_host))
    b.copy(ops[-1], shard.copy_bytes("reduce-scatter", reduce))  # FSDP2's copy-in of the previous layer's gradients
    b.dp_comms(shard.exposed(reduce, budget, shard.overlap_reduce) + shown, ops[-1].layer, ops[-1].name)
    b.copy(ops[-1], shard.copy_bytes("all-gather", gather))  # and the copy-out of this layer's weights
