"""Operator IR: one node of a workload's operator graph.

Quantities are per sample (one sequence or one image) so a single graph serves every micro-batch size;
weights (``params``) do not scale with the batch. Element counts, not bytes: the run's data type turns
them into bytes, so the same graph serves fp32 and bf16 runs.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field
from tilewright.engine.ir.common import QuietDefaultsModel

NonNeg = Annotated[float, Field(ge=0)]


class OpKind(StrEnum):
    matmul = "matmul"
    attention = "attention"  # score (QK^T) and context (PV) batched matmuls
    softmax = "softmax"
    norm = "norm"
    elementwise = "elementwise"
    dropout = "dropout"
    embedding = "embedding"
    conv = "conv"
    pool = "pool"
    fc = "fc"
    loss = "loss"


class TensorSplit(StrEnum):
    """How tensor (model) parallelism splits an op (Megatron conventions)."""

    column = "column"  # weight split by output columns; no communication after
    row = "row"  # weight split by input rows; partial sums reduced after (all-reduce / reduce-scatter)
    heads = "heads"  # attention heads split; no communication
    vocab = "vocab"  # embedding/logits split over the vocabulary
    replicated = "replicated"  # every tensor-parallel rank does it whole (norms, dropout without SP)
    none = "none"  # not split by tensor parallelism (CNN layers, handled by HyPar-style choices)


class LayerKind(StrEnum):
    embedding = "embedding"
    transformer = "transformer"
    head = "head"
    conv = "conv"
    fc = "fc"
    block = "block"  # a residual block of a CNN


class Op(QuietDefaultsModel):
    _quiet = ("cache_elems",)

    name: str = Field(min_length=1)
    kind: OpKind
    layer: Annotated[int, Field(ge=0)] = Field(description="index into the workload's layer list")
    flops: NonNeg = Field(description="forward FLOPs per sample")
    bwd_flops: NonNeg | None = Field(None, description="backward FLOPs per sample; default 2× for weighted ops")
    params: NonNeg = Field(0.0, description="parameters (elements)")
    in_elems: NonNeg = Field(0.0, description="input activation elements per sample")
    out_elems: NonNeg = Field(0.0, description="output activation elements per sample")
    cache_elems: NonNeg = Field(
        0.0, description="elements of in_elems read from the KV cache (decode), stored in its own format"
    )
    saved_elems: NonNeg = Field(0.0, description="elements stored for the backward pass, per sample")
    saved_bytes_fixed: NonNeg = Field(0.0, description="stored bytes independent of dtype (masks), per sample")
    selective: bool = Field(False, description="dropped and recomputed under selective recomputation")
    split: TensorSplit = TensorSplit.none
    gemm: tuple[int, int, int] | None = Field(
        None, description="matmul shape (m per sample, n, k); m scales with the micro-batch"
    )
    inputs: list[str] = Field(default_factory=list, description="names of producer ops")

    @property
    def backward_flops(self) -> float:
        if self.bwd_flops is not None:
            return self.bwd_flops
        matrix = self.kind in (OpKind.matmul, OpKind.attention, OpKind.conv, OpKind.fc)
        return 2.0 * self.flops if self.params > 0 or matrix else self.flops
