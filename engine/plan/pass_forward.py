"""The forward pass of one model chunk (or its recompute): Megatron's tensor-parallel collectives in the forward
(an all-reduce after each row-parallel op and the vocab-parallel embedding; with sequence parallelism a
reduce-scatter there and an all-gather before each column-parallel run), the 2-D layouts' (``plan.tensor_axes``),
the vocab-parallel cross-entropy's, and the sharded weights' gathers ahead of each layer."""

from __future__ import annotations

from collections.abc import Sequence

from tilewright.engine.ir.ops import Op, OpKind, TensorSplit
from tilewright.engine.perf.op_cost import flash_ops
from tilewright.engine.perf.recompute import reruns_flash, selection
from tilewright.engine.plan.cuda_graphs import layer_graphs
from tilewright.engine.plan.deepspeed_host import blocking_copies
from tilewright.engine.plan.launch import attention_scores, checkpoint_host_seconds
from tilewright.engine.plan.pass_builder import PassBuilder
from tilewright.engine.plan.pass_fusion import fusion_flags
from tilewright.engine.plan.pass_records import ChunkPass, PassContext, PassKind
from tilewright.engine.plan.tensor_axes import ROW, layer_comms
from tilewright.engine.plan.tp_placement import axis_rows, is_column, is_weighted, reduce_kind


def forward_pass(
    layers: list[list[Op]], ctx: PassContext, kind: PassKind = "F", only_selective: bool = False,
    modules: Sequence[str] | None = None, slack: Sequence[float] = (),
) -> ChunkPass:
    """``only_selective``: the R pass of selective recomputation, the forward of what ``modules`` re-run
    (``perf.recompute``; None: the attention core). A normally checkpointed module (``Part.whole``) re-runs
    with its tensor-parallel collectives, an output-discarding one as its bare kernels; a fused attention
    kernel recomputes its core inside its backward (``op_cost``), so nothing of it re-runs here. A recompute (R)
    gathers no sharded weights: the gather the backward makes for each layer (``pass_backward``) serves the
    layer's recompute too, which runs just before that layer's backward (``plan.sharding``). ``slack``: the
    paired backward's ``ChunkPass.a2a_slack``, the delayed weight gradients its overlapped all-to-alls add to
    this pass's (``PassComms._a2a``)."""
    b = PassBuilder(ctx, kind)
    b.slack = list(slack)
    sp = ctx.sequence_parallel
    prev_column = False
    shard = ctx.shard if ctx.shard is not None and ctx.shard.gather_weights and kind != "R" else None
    for i, ops in enumerate(layers):
        before = b.next_layer()
        if shard is not None and ops:
            gather = shard.layer_items("all-gather", ops, ctx.tp)
            overlap = shard.overlap_gather and i > 0
            cover = b.shard_cover(shard, gather if overlap else [], before, ops[0].name, ops[0].layer)
            copy_in = shard.host_seconds("all-gather", ops, ctx.tp)  # an offloaded shard, ahead of its gather
            b.host_link_wait(ops[0], copy_in - cover if overlap else copy_in)
            cover = max(0.0, cover - copy_in)
            b.dp_comms(shard.exposed(gather, cover, overlap), ops[0].layer, ops[0].name)
            b.copy(ops[0], shard.copy_bytes("all-gather", gather))  # FSDP2's copy-out (``plan.sharding``)
        flags = fusion_flags(ops, ctx.fused)
        scores = attention_scores(ops)
        flash = flash_ops(ops, ctx.fused) if only_selective else frozenset()
        rerun = selection(ops, modules) if only_selective else {}
        graphs = {} if only_selective else layer_graphs(ops, ctx.cuda_graph_scope)  # R: eager (cuda_graphs)
        b.graphs = graphs
        vocab_out = False  # the op before left its output split over the vocabulary (the logits)
        for j, (op, fused) in enumerate(zip(ops, flags, strict=True)):
            if only_selective:
                how = rerun.get(op.name)
                if how is None or not how.rerun:
                    continue
                if op.name in flash:  # the fused kernel stores nothing; Megatron-Core re-runs its forward anyway
                    if reruns_flash(ctx.host_framework):
                        b.add_op(op, backward=False, fused=fused, scores=scores.get(op.name, 0.0))
                    continue
                if not how.whole:
                    b.add_op(op, backward=False, scores=scores.get(op.name, 0.0))
                    continue
                fused = (False, False)  # re-run kernel by kernel, as the selective core always was
            if not only_selective:  # a layer forward's blocking copies (plan.deepspeed_host), re-run by a recompute
                b.blocking_copies(op, blocking_copies(ctx.host_framework, ops, j))
            column = is_column(op)
            if sp and column and not prev_column:  # gate and up read one gathered input: one all-gather
                b.op_comm("all-gather", op, op.in_elems)
            if vocab_out and op.split is TensorSplit.replicated:  # an on-device sampler reads every logit
                gather = (ROW + "all-gather") if ctx.tp_axes is not None else "all-gather"  # ``sampling_ops``
                b.comm(gather, op.in_elems, op.layer, op.name, overlap=False)
            vocab_out = is_weighted(op) and op.split is TensorSplit.vocab and op.kind is OpKind.matmul
            b.add_op(op, backward=False, fused=fused, scores=scores.get(op.name, 0.0), graph=graphs.get(op.name))
            if kind == "R" and j == 0 and not only_selective:  # the layer's checkpoint (``launch.CHECKPOINT_CALLS``)
                b.host(checkpoint_host_seconds(ctx.dev.compute))
            if ctx.tp_axes is not None:  # 2-D (plan.tensor_axes)
                for comm_kind, elems in layer_comms(ops, j, ctx.tp_axes, ctx.tp_axes_collectives, ctx.tp_tile,
                                                    ctx.tp_decode, ctx.tp_rows):
                    b.comm(comm_kind, elems * axis_rows(ctx), op.layer, op.name)
            elif is_weighted(op) and (
                op.split is TensorSplit.row or (op.split is TensorSplit.vocab and op.kind is OpKind.embedding)
            ):
                b.op_comm(reduce_kind(sp), op, op.out_elems)
            if op.kind is OpKind.loss and op.split is TensorSplit.vocab:
                # the vocab-parallel cross-entropy combines its shards' max, target logit and sum of
                # exponentials: three all-reduces of one fp32 value per token (megatron/mpu/cross_entropy.py)
                for _ in range(3):
                    b.comm("all-reduce", ctx.rows_per_sample * 4 / ctx.elem_bytes, op.layer, op.name, overlap=False)
            prev_column = column
    return b.finish()
