"""Workload specifications: what a project file says about the model.

A spec is small and readable (a GPT is its dimensions, not 1,500 ops); ``engine.workloads.build``
turns it into the operator graph. ``custom`` holds an explicit op list for models no builder covers.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator
from tilewright.engine.ir.common import QuietDefaultsModel, StrictModel
from tilewright.engine.ir.ops import Op

PosInt = Annotated[int, Field(ge=1)]


Activation = Literal["gelu", "relu", "swiglu", "geglu"]
"""MLP non-linearity: the gated ones (swiglu, geglu) have up and gate projections, so 3 MLP matrices, not 2."""
NormKind = Literal["layernorm", "rmsnorm"]
"""LayerNorm has a gain and a bias (2·h parameters), RMSNorm a gain (h)."""
LoadBalancing = Literal["aux_loss", "none"]
"""A router's training-time balancing: Megatron-Core's switch (aux) loss, or none (``MoESpec.load_balancing``)."""


class MLASpec(StrictModel):
    """Multi-head latent attention (DeepSeek-V2/V3, arXiv 2405.04434 §2.1): keys and values are made from a
    ``kv_lora_rank`` latent (plus a ``qk_rope_head_dim`` rotary key shared by all heads), queries from a
    ``q_lora_rank`` latent (or a plain projection when it is None). Names follow Hugging Face's config."""

    q_lora_rank: PosInt | None = Field(None, description="query latent width; None = plain query projection")
    kv_lora_rank: PosInt = Field(description="key/value latent width (what the KV cache holds)")
    qk_nope_head_dim: PosInt = Field(description="per-head query/key width without rotary positions")
    qk_rope_head_dim: PosInt = Field(description="per-head query/key width with rotary positions")
    v_head_dim: PosInt = Field(description="per-head value width")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class MoESpec(QuietDefaultsModel):
    """Mixture-of-experts MLP (Switch/GShard, Mixtral, DeepSeekMoE): a router sends each token to ``top_k`` of
    ``experts`` routed expert MLPs (``expert_ffn`` wide); ``shared_experts`` run on every token. Which blocks
    are MoE follows DeepSeek's config: block i is MoE when i ≥ ``first_dense_layers`` and
    i % ``layer_freq`` == 0; the other blocks keep the dense MLP of width ``ffn``."""

    experts: PosInt = Field(description="routed experts per MoE block")
    top_k: PosInt = Field(description="experts each token is routed to")
    expert_ffn: PosInt = Field(description="feed-forward width of one routed expert")
    shared_experts: Annotated[int, Field(ge=0)] = Field(0, description="experts every token passes through")
    shared_expert_ffn: PosInt | None = Field(
        None, description="width of the shared MLP; default shared_experts · expert_ffn (DeepSeek fuses them)"
    )
    capacity_factor: Annotated[float, Field(gt=0)] | None = Field(
        None, description="expert capacity over the balanced load; None = dropless (exactly top_k per token)"
    )
    first_dense_layers: Annotated[int, Field(ge=0)] = Field(0, description="leading blocks with a dense MLP")
    layer_freq: PosInt = Field(1, description="every layer_freq-th block (by index) is MoE")
    router_bias: bool = Field(False, description="router has a per-expert bias (DeepSeek-V3's score correction)")
    max_nodes_per_token: PosInt | None = Field(
        None, description="node-limited routing: a token's experts lie on at most this many nodes (DeepSeek-V3: "
        "4, config.json topk_group of n_group groups, one group per node); None = unlimited"
    )
    shared_expert_gate: bool = Field(
        False, description="the shared experts' output is scaled by sigmoid(x·w), w one hidden → 1 linear per "
        "block (Qwen2-MoE's shared_expert_gate; Megatron-Core --moe-shared-expert-gate)"
    )

    load_balancing: LoadBalancing = Field(
        "aux_loss", description="the router's load-balancing loss in training (Megatron-Core's "
        "moe_router_load_balancing_type): 'aux_loss' (its default) computes the switch loss beside the top-k every "
        "forward; 'none' computes no loss, as Megatron-Bridge's gpt-oss provider sets (plan.moe_host)"
    )

    # added after files were written: left out of a dump at their default
    _quiet = ("max_nodes_per_token", "shared_expert_gate", "load_balancing")

    @property
    def shared_ffn(self) -> int:
        return self.shared_expert_ffn if self.shared_expert_ffn is not None else self.shared_experts * self.expert_ffn

    @property
    def slots_per_token(self) -> float:
        """Expert token-slots one token occupies: top_k, times the capacity factor when capacity is padded."""
        return self.top_k * (self.capacity_factor if self.capacity_factor is not None else 1.0)

    def is_moe_block(self, index: int) -> bool:
        return index >= self.first_dense_layers and index % self.layer_freq == 0

    @model_validator(mode="after")
    def _top_k_fits(self) -> MoESpec:
        if self.top_k > self.experts:
            raise ValueError(f"top_k: {self.top_k} exceeds experts ({self.experts})")
        if self.shared_expert_gate and not self.shared_ffn:
            raise ValueError("shared_expert_gate: gates the shared experts, and this MoE has none")
        return self


# Fields every transformer spec gained after project files were written: left out of a dump while they hold
# their default, so old files (and presets) save back byte for byte and build the same graph.
_NEW_FIELDS = (
    "head_dim",
    "kv_heads",
    "qkv_bias",
    "out_bias",
    "mlp_bias",
    "activation",
    "norm",
    "parallel_block",
    "parallel_norms",
    "sandwich_norm",
    "sliding_window",
    "sliding_window_layers",
    "mla",
    "moe",
    "mtp_layers",
    "qk_norm",
    "attention_sinks",
    "glu_clamp",
)


class TransformerDims(QuietDefaultsModel):
    """What transformer specs share. The block variants (``head_dim`` … ``moe``) default to the family's
    classic block; ``engine.workloads.transformer_block`` documents how each one changes the ops."""

    _quiet = _NEW_FIELDS

    name: str = ""
    comment: str = Field("", description="sources and notes")
    layers: PosInt
    hidden: PosInt
    heads: PosInt
    ffn: PosInt | None = Field(None, description="feed-forward width; default 4·hidden")
    seq_len: PosInt = 2048
    vocab: PosInt = 51200
    head_dim: PosInt | None = Field(None, description="query/key/value width per head; default hidden / heads")
    kv_heads: PosInt | None = Field(None, description="key/value heads (GQA; 1 = MQA); default = heads")
    qkv_bias: bool = Field(True, description="the query/key/value projection has a bias")
    out_bias: bool = Field(True, description="the attention output projection has a bias")
    mlp_bias: bool = Field(True, description="the MLP projections have biases")
    activation: Activation = "gelu"
    norm: NormKind = "layernorm"
    parallel_block: bool = Field(
        False, description="attention and MLP both read the block input, one residual add (GPT-J, Falcon, Phi-2)"
    )
    parallel_norms: Literal[1, 2] = Field(
        1, description="norms of a parallel block: 1 shared (GPT-J, Falcon-7B) or 2 (Falcon-40B, GPT-NeoX)"
    )
    sandwich_norm: bool = Field(False, description="also a norm after attention and after the MLP (Gemma-2)")
    sliding_window: PosInt | None = Field(None, description="local attention window in tokens; None = global")
    sliding_window_layers: Literal["all", "even"] | Annotated[int, Field(ge=3)] = Field(
        "all", description="blocks with the window: all; even-indexed ones (Gemma-2, gpt-oss alternate local and "
        "global); or a period n: every n-th block (i + 1 divisible by n) global, the others local (Gemma 3: 6)"
    )
    mla: MLASpec | None = Field(None, description="multi-head latent attention instead of Q/K/V projections")
    moe: MoESpec | None = Field(None, description="mixture-of-experts MLP")
    mtp_layers: Annotated[int, Field(ge=0)] = Field(
        0, description="multi-token-prediction depths trained after the head (DeepSeek-V3 num_nextn_predict_layers, "
        "Megatron-Core --mtp-num-layers); training only, inference leaves them out"
    )
    qk_norm: bool = Field(
        False, description="a norm of the block's kind over each head's query and key (head_dim gains each, "
        "shared by the heads) before attention (Qwen3, Gemma 3; Megatron-Core --qk-layernorm)"
    )
    attention_sinks: bool = Field(
        False, description="one learned logit per head joins each query's softmax denominator (gpt-oss "
        "GptOssAttention.sinks): heads parameters per block, negligible work"
    )
    glu_clamp: Annotated[float, Field(gt=0)] | None = Field(
        None, description="the routed experts' gated unit clamps its inputs at this limit (gate ≤ limit, linear "
        "half within ±limit) and adds 1 to the linear half (gpt-oss swiglu_limit 7.0; Megatron-Core "
        "activation_func_clamp_value with glu_linear_offset 1); None: no clamp"
    )

    @property
    def ffn_dim(self) -> int:
        return self.ffn if self.ffn is not None else 4 * self.hidden

    @property
    def kv_heads_n(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def head_dim_n(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden // self.heads

    @property
    def gated_mlp(self) -> bool:
        return self.activation in ("swiglu", "geglu")

    def window_of(self, block: int) -> int | None:
        """The attention window of block ``block`` (None: global attention)."""
        layers = self.sliding_window_layers
        if self.sliding_window is None or (layers == "even" and block % 2):
            return None
        if isinstance(layers, int) and (block + 1) % layers == 0:
            return None
        return self.sliding_window

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> TransformerDims:
        if self.head_dim is None and self.mla is None and self.hidden % self.heads:
            raise ValueError(f"heads: {self.heads} does not divide hidden ({self.hidden}); set head_dim")
        if self.heads % self.kv_heads_n:
            raise ValueError(f"kv_heads: {self.kv_heads_n} does not divide heads ({self.heads})")
        if self.mla is not None and (self.kv_heads is not None or self.head_dim is not None):
            raise ValueError("mla: latent attention sets its own head widths; leave kv_heads and head_dim unset")
        if self.parallel_block and self.sandwich_norm:
            raise ValueError("sandwich_norm: not combined with parallel_block")
        if self.mla is not None and self.qk_norm:
            raise ValueError("qk_norm: latent attention normalises its latents (q_norm, kv_norm), not each head")
        return self


class LearnedPositions(TransformerDims):
    """A transformer with a learned position table (GPT-2, Megatron's GPT, BERT). The table is the model's, as
    long as its checkpoint's (Hugging Face ``n_positions`` / ``max_position_embeddings``), whatever sequence a
    run trains or serves at: a run at 512 tokens still holds and updates GPT-2's 1024 rows. No token past the
    table's last row can be indexed, so ``seq_len`` may not exceed it."""

    position_table: PosInt | None = Field(
        None, description="rows of the learned position table (the model's n_positions); default seq_len"
    )

    @property
    def positions(self) -> int:
        """Rows of the learned position table: ``position_table``, else ``seq_len``."""
        return self.position_table if self.position_table is not None else self.seq_len

    @model_validator(mode="after")
    def _seq_within_table(self) -> LearnedPositions:
        if self.position_table is not None and self.seq_len > self.position_table:
            raise ValueError(f"position_table: seq_len {self.seq_len} exceeds the model's {self.position_table} "
                             "learned positions")
        return self


class GPTSpec(LearnedPositions):
    """Megatron-style GPT: learned positions, LayerNorm, GeLU MLP, tied embedding/logits."""

    _quiet = (*_NEW_FIELDS, "tie_embeddings", "position_table")

    kind: Literal["gpt"] = "gpt"
    tie_embeddings: bool = Field(True, description="logits reuse the word embedding (Megatron's GPT)")


class LlamaSpec(TransformerDims):
    """LLaMA-style decoder: RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention, no biases."""

    _quiet = (*(f for f in _NEW_FIELDS if f != "kv_heads"), "rope_fusion")

    kind: Literal["llama"] = "llama"
    rope_fusion: bool = Field(
        True, description="rotary embedding by Transformer Engine's fused kernel (Megatron-Core apply_rope_fusion; "
        "not costed); False: Megatron-Core's eager chain on the query and key heads (plan.eager_rope), as for "
        "gpt-oss's YaRN in Megatron-Bridge"
    )
    kv_heads: PosInt | None = Field(None, description="key/value heads (GQA); default = heads")
    vocab: PosInt = 32000
    seq_len: PosInt = 4096
    tie_embeddings: bool = False
    qkv_bias: bool = Field(False, description="the query/key/value projection has a bias")
    out_bias: bool = Field(False, description="the attention output projection has a bias")
    mlp_bias: bool = Field(False, description="the MLP projections have biases")
    activation: Activation = "swiglu"
    norm: NormKind = "rmsnorm"


class BertSpec(LearnedPositions):
    """BERT encoder with masked-LM head."""

    _quiet = (*_NEW_FIELDS, "position_table")

    kind: Literal["bert"] = "bert"
    seq_len: PosInt = 512
    vocab: PosInt = 30522

    @model_validator(mode="after")
    def _post_norm_block(self) -> BertSpec:
        if self.parallel_block or self.sandwich_norm:
            raise ValueError("parallel_block: BERT's post-norm block is sequential, without sandwich norms")
        if self.mtp_layers:
            raise ValueError("mtp_layers: multi-token prediction extends a decoder's next-token loss; BERT has none")
        return self


CNNArch = Literal["alexnet", "lenet", "resnet50", "vgg-a", "vgg-b", "vgg-c", "vgg-d", "vgg-e"]


class CNNSpec(StrictModel):
    """Convolutional networks at their published shapes (ImageNet 224² unless changed; LeNet 32²)."""

    kind: Literal["cnn"] = "cnn"
    name: str = ""
    comment: str = ""
    arch: CNNArch
    image_size: PosInt | None = Field(None, description="input height = width; default the paper's")
    channels: PosInt = 3
    classes: PosInt = 1000


class MLPSpec(StrictModel):
    kind: Literal["mlp"] = "mlp"
    name: str = ""
    comment: str = ""
    layer_sizes: list[PosInt] = Field(min_length=2, description="widths from input to output")


class CustomSpec(StrictModel):
    """An explicit operator list; layer names index ``Op.layer``."""

    kind: Literal["custom"] = "custom"
    name: str = ""
    comment: str = ""
    layer_names: list[str] = Field(min_length=1)
    ops: list[Op] = Field(min_length=1)

    @model_validator(mode="after")
    def _refs(self) -> CustomSpec:
        names = {o.name for o in self.ops}
        if len(names) != len(self.ops):
            raise ValueError("ops: duplicate op names")
        for i, op in enumerate(self.ops):
            if op.layer >= len(self.layer_names):
                raise ValueError(f"ops.{i}.layer: {op.layer} has no entry in layer_names")
            for src in op.inputs:
                if src not in names:
                    raise ValueError(f"ops.{i}.inputs: unknown op '{src}'")
        return self


WorkloadSpec = Annotated[GPTSpec | LlamaSpec | BertSpec | CNNSpec | MLPSpec | CustomSpec, Field(discriminator="kind")]
TRANSFORMER_SPECS = (GPTSpec, LlamaSpec, BertSpec)
