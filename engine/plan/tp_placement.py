"""Where Megatron's tensor-parallel collectives sit in a layer (Shoeybi et al. 2019): which ops carry them
(weighted linear ops), which split they follow (row, column), which reduction (all-reduce, or reduce-scatter with
sequence parallelism), which producer → consumer edges they cut, and the factor on a 2-D message's rows. Shared
by the forward and backward passes, the pass builder's GEMM split and the fusion checks."""

from __future__ import annotations

from tilewright.engine.ir.ops import Op, OpKind, TensorSplit
from tilewright.engine.plan.pass_records import PassContext
from tilewright.engine.plan.tensor_axes import tile_rows


def is_weighted(op: Op) -> bool:
    """Only weighted linear ops carry tensor-parallel collectives (not the elementwise ops between them)."""
    return op.params > 0 and op.kind in (OpKind.matmul, OpKind.fc, OpKind.conv, OpKind.embedding)


def is_column(op: Op) -> bool:
    """A column-parallel weighted op: its input is gathered (sequence parallelism) and its input gradient reduced."""
    return op.split is TensorSplit.column and is_weighted(op)


def reduce_kind(sp: bool) -> str:
    """The reduction of a partial sum: a reduce-scatter with sequence parallelism (the activations stay split)."""
    return "reduce-scatter" if sp else "all-reduce"


def collective_between(a: Op, b: Op, tp: int) -> bool:
    """Megatron puts a tensor-parallel collective after a row-split op (forward) and before a
    column-split op's backward: the tensor leaves the chip there, so that edge cannot be fused."""
    if tp <= 1:
        return False
    return (is_weighted(a) and a.split is TensorSplit.row) or (is_weighted(b) and b.split is TensorSplit.column)


def axis_rows(ctx: PassContext) -> float:
    """The factor on a 2-D tensor-parallel message's rows: its rows padded to whole tiles over the pass's rows
    where the runtime pads them (tt-transformers' decode step: its users padded to 32 rows), else 1."""
    rows = ctx.tp_rows or ctx.micro_batch
    if not (ctx.tp_decode and ctx.tp_axes_collectives == "tt-transformers") or rows <= 0:
        return 1.0
    return tile_rows(rows, ctx.tp_tile) / rows
