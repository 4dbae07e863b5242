"""Operator IR: one node of a workload's operator graph.

Quantities are per sample (one sequence or one image) so a single graph serves every micro-batch size;
weights (``params``) do not scale with the batch. Element counts, not bytes: the run's data type turns
them into bytes, so the same graph serves fp32 and bf16 runs.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field
from tilewright.engine.ir.common import QuietDefaultsModel, StrictModel

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


class MoERole(StrEnum):
    """What an op does in a mixture-of-experts block."""

    router = "router"  # the gate GEMM (tokens × experts logits); replicated like a norm, no expert parallelism
    routing = "routing"  # softmax/sigmoid and top-k over the router logits
    expert = "expert"  # a routed-expert GEMM or activation: ``params`` hold ALL experts' weights
    shared = "shared"  # a shared-expert op: a dense MLP every token passes through (no all-to-all)
    combine = "combine"  # the top-k weighted sum of expert outputs (plus the shared output)


class ExpertInfo(StrictModel):
    """Metadata of a mixture-of-experts op, for expert parallelism in ``engine.plan``.

    Per-sample like every op field. The op's own fields already hold the work of the whole layer: an expert
    GEMM's ``flops`` count the routed token-slots (tokens · top_k, times ``capacity_factor`` when capacity
    is padded), its ``params`` every routed expert's weights, its ``gemm`` the expert GEMMs stacked into one
    (m = token-slots per sample); one expert's own GEMM has ``expert_rows`` rows, m / experts.

    Expert parallelism over ``ep`` devices (``mapping.ep``, ``engine.plan.experts``) follows from these fields:

    - weights per device: ``op.params / ep`` for ``role == expert`` ops (each device holds experts / ep; in
      an inference pass graph ``params`` are the weights of the experts the pass's tokens reach);
    - work per device: unchanged on a balanced router (the device runs as many token-slots as its own tokens
      have); a load-imbalance factor multiplies the busiest device's share (each expert gets
      ``tokens_fraction`` of the layer's tokens on average);
    - all-to-all: before the op, each token sends ``dispatch_elems_per_token`` elements (its hidden vector
      to each of its top_k experts) and after it receives ``combine_elems_per_token`` back; a fraction
      (ep − 1) / ep of them leaves the device. Multiply by ``tokens`` (tokens per sample of this pass) and
      the device's samples per micro-batch (micro-batch / cp with context parallelism) for the elements of
      one pass, and by the activation format's bytes per element for bytes. The backward pass moves the same
      amounts again (gradients of dispatch and combine).
    - dispatch is on the first expert op that reads the routed tokens (``experts_up``), combine on the
      last (``experts_down``); the other ops have zeros.

    Tensor parallelism applies to expert ops through their ``split`` (column/row). The plan sizes the
    tensor-parallel collectives around the routed experts (the gather before ``experts_up``, the reduction
    after ``experts_down``) by ``engine.plan.experts.gathered_elems``: with ep > 1 by the received
    token-slots, the op's ``in_elems`` / ``out_elems`` (token-slots · hidden: Megatron-Core's all-to-all
    dispatcher gathers what the device received over the expert-tensor group), over etp ranks with
    ``mapping.expert_tp`` below tp (none at etp 1); without expert parallelism by ``tokens`` · hidden, the
    slots over top_k (× capacity factor): the all-gather dispatcher gathers the layer's tokens before routing
    and permutes and combines locally. A grid device's GEMM model (``perf.spatial_op``) reads ``gemm``'s
    n × k weights, one expert's, not all of ``params``.
    """

    role: MoERole
    experts: int = Field(ge=1, description="routed experts of the block")
    top_k: int = Field(ge=1, description="experts each token is routed to")
    capacity_factor: float | None = Field(None, gt=0, description="None: dropless routing")
    tokens: int = Field(ge=1, description="tokens per sample the block routes (seq_len, or a pass's new tokens)")
    tokens_fraction: float = Field(
        ge=0, description="share of the tokens one routed expert processes: top_k · capacity_factor / experts"
    )
    dispatch_elems_per_token: NonNeg = Field(0.0, description="all-to-all elements per token before this op")
    combine_elems_per_token: NonNeg = Field(0.0, description="all-to-all elements per token after this op")
    output_bias: bool = Field(
        False, description="the last routed-expert op of biased experts: each expert adds its output bias, "
                           "scaled by the token's routing probability (``plan.experts.expert_bias_kernels``)"
    )
    glu_clamp: bool = Field(
        False, description="the routed experts' activation of a clamped gated unit (``TransformerDims.glu_clamp``: "
                           "Megatron-Core clamps outside its fused kernel, ``plan.experts.glu_clamp_kernels``)"
    )
    aux_loss: bool = Field(
        True, description="the routing op of a router trained with a load-balancing loss (``MoESpec.load_balancing`` "
                          "'aux_loss'); False: top-k only, no loss kernels (``plan.moe_host``)"
    )

    @property
    def expert_rows(self) -> float:
        """Tokens one routed expert's GEMM processes per sample (its m), on a balanced router."""
        return self.tokens * self.tokens_fraction


class AttentionShape(StrictModel):
    """The head structure of an attention op, per sample: what a grid device needs to split it like a fused
    attention kernel (heads × query chunks over the cores, each chunk streaming its keys; ``perf.spatial_attention``).
    The op's own fields keep the totals (``flops`` count the (query, key) pairs actually computed)."""

    heads: int = Field(ge=1, description="query heads")
    kv_heads: int = Field(ge=1, description="key/value heads (GQA/MQA: fewer than heads)")
    head_dim: int = Field(ge=1, description="elements per head")
    queries: int = Field(ge=1, description="query tokens per sample (a pass's new tokens)")
    keys: int = Field(ge=1, description="keys the last query attends to (the context)")


class AttentionBmm(StrictModel):
    """The head structure of an attention op as an unfused core attention runs it: batched GEMMs, one product
    per (sample, head) in each kernel (Megatron-LM's ``CoreAttention``: ``baddbmm`` QKᵀ and ``bmm`` PV forward,
    autograd's four gradient GEMMs backward). K and V are expanded to every query head before the GEMMs (GQA),
    so the batch counts query heads. What ``perf.op_cost`` needs to give each kernel its own shape and tile
    and wave quantization on a GPU. Unlike ``Op.attention`` it says nothing about how the op runs: a training
    graph carries it whether or not the mapping fuses attention (a fused kernel is priced as one kernel)."""

    heads: int = Field(ge=1, description="query heads (the batch per sample, before tensor parallelism)")
    queries: int = Field(ge=1, description="query rows per sample and head")
    keys: int = Field(ge=1, description="keys per query in the score matrix (the op's FLOPs count queries × keys)")
    qk_dim: int = Field(ge=1, description="elements per query/key head (QKᵀ's reduction)")
    v_dim: int = Field(ge=1, description="elements per value head (PV's output columns)")


class Op(QuietDefaultsModel):
    _quiet = ("cache_elems", "moe", "attention", "fused_flops", "bmm", "causal_keys", "rope")

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
    moe: ExpertInfo | None = Field(None, description="mixture-of-experts metadata (expert parallelism)")
    attention: AttentionShape | None = Field(None, description="head structure of an attention op (None: unknown)")
    bmm: AttentionBmm | None = Field(
        None, description="an attention op's batched GEMM shapes when run unfused (None: unknown, one shapeless "
        "kernel per GEMM)"
    )
    fused_flops: NonNeg | None = Field(
        None,
        description="forward FLOPs per sample of an attention op run as one fused (flash) kernel, which skips the "
        "key blocks a causal mask hides entirely; None: flops (``workloads.transformer_block``)",
    )
    causal_keys: Annotated[int, Field(ge=0)] = Field(
        0,
        description="a softmax over a causal self-attention's s × s scores: s, the keys per row (Megatron's fused "
        "causal softmax reads only the lower triangle and writes the whole row where it runs: "
        "``perf.score_kernels``); 0 otherwise",
    )
    rope: tuple[NonNeg, NonNeg] | None = Field(
        None, description="elements per sample of the query and the key heads that Megatron-Core rotates after "
        "this op with its unfused RoPE (``LlamaSpec.rope_fusion`` False: ``plan.eager_rope``); None: fused or none",
    )

    @property
    def backward_flops(self) -> float:
        if self.bwd_flops is not None:
            return self.bwd_flops
        matrix = self.kind in (OpKind.matmul, OpKind.attention, OpKind.conv, OpKind.fc)
        return 2.0 * self.flops if self.params > 0 or matrix else self.flops
