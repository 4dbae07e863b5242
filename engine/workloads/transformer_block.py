"""The ops of one transformer block, with the activation memory of Korthikanti et al. (2022).

"Reducing Activation Recomputation in Large Transformer Models" (arXiv 2205.05198) counts, per block and
per sample at 16 bits, 34·s·h + 5·a·s² bytes. Each stored tensor is put on exactly one op:

- norms store their input and their output (the output is the input of the next linear): 2·(2sh) each;
- qkv stores its output (Q, K, V: 6sh); the output projection its input (2sh); the MLP activation its
  input (8sh) and the down projection its input (8sh);
- dropouts store a 1-byte mask (``saved_bytes_fixed``): sh each;
- softmax stores its output (2as²); attention dropout its mask (as²) and output (2as²).

So the replicated ops (norms, dropouts, residual adds) hold exactly 10sh bytes, the tensor-split ones 24sh
and the ``selective`` ones 5as², giving sh·(10 + 24/t + 5as/(ht)) with tensor parallelism t.

The ``attention`` op (QKᵀ and the context matmul, 4·s²·h FLOPs) is marked ``selective`` too although it
stores nothing: Megatron's selective recomputation re-runs the whole core attention, so recomputing the
selective ops must also pay for those two matmuls. It carries its head structure (``Op.bmm``: query heads,
queries, keys, query/key and value head widths) so that a GPU prices each of the unfused attention's batched
GEMMs at its own shape, quantized over micro-batch × local heads (``perf.op_cost.attention_kernels``).

Causal attention. ``flops`` count every (query, key) pair, s² per head: what Megatron-LM's unfused core
attention (``baddbmm`` QKᵀ, masked softmax, ``bmm``) computes — it masks the upper triangle after computing it
— and the "model FLOPs" of the Megatron (Narayanan et al. SC'21, 96·B·s·l·h²·(1 + s/6h + …)) and PaLM (6N +
12·l·h·s) conventions, which MFU keeps (``plan.model_flops`` sums ``flops``, whatever the kernel). A decoder's
(GPT, LLaMA; not BERT) attention also carries ``fused_flops``: the pairs a fused causal kernel (FlashAttention-2,
cuDNN fused attention, as Megatron-Core runs) really computes. It tiles the queries in blocks of
``FLASH_BLOCK`` rows and skips the key blocks past a tile's last row (and, with a sliding window, before its
first row's window), so it computes s·(s + B)/2 pairs, not s(s + 1)/2: the diagonal tiles are computed whole
and masked. ``perf.op_cost`` charges them when the op runs fused (``mapping.fusion`` attention → softmax).
NVIDIA's own "model TFLOP/s" counts the causal pairs (6N + 6·l·s·h per token for Llama-3 8B): to compare,
compare tokens/s (``benchmarks/calibrate_nemo_h100.py``).

Block variants (``TransformerDims`` fields) keep those rules and change shapes:

- ``head_dim`` ≠ h/a and GQA/MQA (``kv_heads``): qkv is h × (a + 2·kv)·d, out_proj a·d × h; attention costs
  2·s²·a·(d_qk + d_v) FLOPs (4·s²·h for the classic block). A sliding window w makes it s·min(s, w) pairs.
- ``parallel_block`` (GPT-J, Falcon, Phi-2): attention and MLP read the same normed input (one norm, or
  two with ``parallel_norms``) and one residual add sums both outputs with the block input.
- ``sandwich_norm`` (Gemma-2): a norm after out_proj and after mlp_down, before each residual add.
- ``mla`` (DeepSeek-V2/V3): q_down → q_norm → q_up (or q_proj), kv_down → kv_norm → kv_up replace qkv. The
  down projections (and their norms) are replicated over tensor parallelism, as in Megatron-Core.
- ``moe``: a router GEMM (replicated), routing (softmax + top-k), routed expert GEMMs whose FLOPs and
  activations count token-slots (s · top_k · capacity factor) and whose weights count every expert, shared
  experts as a dense MLP, and the combine. Each of those ops carries ``Op.moe`` (``ExpertInfo``) for
  expert parallelism. ``shared_expert_gate`` (Qwen2-MoE) adds a replicated hidden → 1 GEMM whose sigmoid
  scales the shared output; that scaling is elementwise and rides in the combine (its s gate values
  are read there).
- ``qk_norm`` (Qwen3, Gemma 3): a ``qk_norm`` op after qkv normalises every query and key head over its
  head_dim (2·d gains, shared by the heads). It is split by heads like attention, so its work and activations
  divide by t; it stores its output (the normed Q and K attention reads; its input is qkv's stored output).
  Transformers and Megatron-Core replicate the 2·d gains on every tensor-parallel rank, where the heads
  split counts 2·d / t: under 0.1 % of one rank's attention weights, left as is.
- ``glu_clamp`` (gpt-oss ``swiglu_limit``) and biased routed experts (``mlp_bias`` with ``moe``): the ops are
  the plain gated experts'; the routed-expert ops carry them (``ExpertInfo.glu_clamp`` on the activation,
  ``output_bias`` on the down projection) for the eager kernels Megatron-Core runs beside them
  (``plan.experts``).
- ``load_balancing`` 'none' (``MoESpec``; Megatron-Bridge's gpt-oss): the same ops; the routing op's
  ``ExpertInfo.aux_loss`` is False, so the host work of Megatron-Core's load-balancing loss is not charged
  (``plan.moe_host``).
- ``rope_fusion`` False (``LlamaSpec``; Megatron-Bridge's gpt-oss, whose YaRN scaling Megatron-Core does not
  fuse): the qkv op carries the query's and the key's elements (``Op.rope``) for the eager RoPE kernels
  Megatron-Core runs after it (``plan.eager_rope``); the graph is otherwise the same.
- ``attention_sinks`` (gpt-oss): one learned logit per head joins each query row's softmax denominator:
  ``heads`` parameters on the softmax op (split by heads, as Megatron-Core shards its learnable softmax
  offset), and a + 1-th term in each of a·s rows of s scores, against the a·s² scores: not costed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from tilewright.engine.ir.ops import AttentionBmm, ExpertInfo, MoERole, OpKind, TensorSplit
from tilewright.engine.ir.workload import MLASpec, MoESpec, TransformerDims
from tilewright.engine.workloads.builder import OpList

COL, ROW, HEADS, REP = TensorSplit.column, TensorSplit.row, TensorSplit.heads, TensorSplit.replicated

# Query rows per tile of a fused attention kernel, the granularity at which a causal (or windowed) kernel skips
# masked keys: FlashAttention-2 tiles Q and K/V in blocks of {64, 128} × {64, 128} (Dao, "FlashAttention-2",
# arXiv 2307.08691, §3.3) and runs 128-row query tiles at head sizes 64-128 on A100/H100 (flash-attention
# csrc/flash_attn/src/flash_fwd_launch_template.h, kBlockM = 128); FlashAttention-3 and cuDNN's fused attention
# on Hopper use 128-row query tiles as well.
FLASH_BLOCK = 128


@dataclass(frozen=True)
class BlockShape:
    """One block's shape: the family's conventions (dropout, norm placement) and the spec's variants."""

    seq: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    gated_mlp: bool  # SwiGLU/GeGLU: up and gate projections, activation multiplies them
    qkv_bias: bool
    out_bias: bool
    mlp_bias: bool
    dropout: bool
    norm_params: int  # 2h for LayerNorm (gain, bias), h for RMSNorm (gain)
    pre_norm: bool  # GPT/LLaMA normalise before each sub-block; BERT after the residual add
    parallel: bool = False
    parallel_norms: int = 1
    sandwich: bool = False
    window: int | None = None  # sliding-window attention span in tokens
    mla: MLASpec | None = None
    moe: MoESpec | None = None  # set only on MoE blocks
    causal: bool = False  # a decoder's masked attention (a fused kernel skips the masked key blocks)
    qk_norm: bool = False  # a norm over each query and key head before attention (Qwen3, Gemma 3)
    sinks: bool = False  # a learned per-head logit in each softmax row (gpt-oss attention sinks)
    glu_clamp: bool = False  # the routed experts' gated unit clamps its inputs (gpt-oss swiglu_limit)
    eager_rope: bool = False  # Megatron-Core's unfused RoPE on the query and key heads (LlamaSpec.rope_fusion False)

    @classmethod
    def of(
        cls, spec: TransformerDims, seq: int, block: int, *, dropout: bool, pre_norm: bool, causal: bool = False
    ) -> BlockShape:
        """Block ``block`` of ``spec`` over ``seq`` tokens; ``causal`` for a decoder."""
        norm_factor = 2 if spec.norm == "layernorm" else 1
        moe = spec.moe if spec.moe is not None and spec.moe.is_moe_block(block) else None
        return cls(
            seq=seq, hidden=spec.hidden, heads=spec.heads, kv_heads=spec.kv_heads_n, head_dim=spec.head_dim_n,
            ffn=spec.ffn_dim, gated_mlp=spec.gated_mlp, qkv_bias=spec.qkv_bias, out_bias=spec.out_bias,
            mlp_bias=spec.mlp_bias, dropout=dropout, norm_params=norm_factor * spec.hidden, pre_norm=pre_norm,
            parallel=spec.parallel_block, parallel_norms=spec.parallel_norms, sandwich=spec.sandwich_norm,
            window=spec.window_of(block), mla=spec.mla, moe=moe, causal=causal, qk_norm=spec.qk_norm,
            sinks=spec.attention_sinks, glu_clamp=spec.glu_clamp is not None,
            eager_rope=not getattr(spec, "rope_fusion", True),
        )

    @property
    def q_width(self) -> int:
        """Width of the attention's output (heads · value width): out_proj's fan-in."""
        return self.heads * (self.mla.v_head_dim if self.mla is not None else self.head_dim)

    @property
    def qkv_width(self) -> int:
        return (self.heads + 2 * self.kv_heads) * self.head_dim

    @property
    def keys(self) -> int:
        """Keys each query attends to in training's full-matrix count (s, or the window)."""
        return min(self.seq, self.window) if self.window is not None else self.seq

    def norm_of(self, width: int) -> int:
        """Parameters of this block's kind of norm over ``width`` features."""
        return self.norm_params // self.hidden * width

    @staticmethod
    def linear(fan_in: int, fan_out: int, bias: bool) -> int:
        return fan_in * fan_out + (fan_out if bias else 0)

    def mlp_linear(self, fan_in: int, fan_out: int) -> int:
        return self.linear(fan_in, fan_out, self.mlp_bias)


def attention_flops_per_pair(dims: TransformerDims) -> float:
    """FLOPs of QKᵀ and AV per (query, key) pair over all heads: 2·a·(d_qk + d_v); 4·h for the classic block."""
    if dims.mla is not None:
        return 2.0 * dims.heads * (dims.mla.qk_head_dim + dims.mla.v_head_dim)
    return 4.0 * dims.heads * dims.head_dim_n


@lru_cache(maxsize=256)
def flash_pairs(seq: int, window: int | None = None, block: int = FLASH_BLOCK) -> float:
    """(query, key) pairs per head a fused causal kernel computes over ``seq`` tokens: each tile of ``block``
    query rows runs over whole key blocks, from the block holding the first key any of its rows sees (0, or
    with a ``window`` the first row's w-th key back) to the block holding its last row (the diagonal tile is
    computed whole, then masked). ``block`` 1 gives the exact causal count, s(s + 1)/2 without a window."""
    total = 0
    for lo in range(0, seq, block):
        hi = min(lo + block, seq)
        first = 0 if window is None else max(0, lo - window + 1) // block * block
        total += (hi - lo) * (hi - first)
    return float(total)


def add_norm(ops: OpList, name: str, sh: int, params: int, split: TensorSplit = REP, **fields: object) -> str:
    """A LayerNorm/RMSNorm storing its input and its output (the output feeds a linear layer)."""
    return ops.add(
        name, OpKind.norm, split, params=params, in_elems=sh, out_elems=sh, saved_elems=2 * sh, **fields
    )


def add_matmul(
    ops: OpList, name: str, split: TensorSplit, m: int, n: int, k: int, params: int, saved: int = 0,
    **fields: object,
) -> str:
    """A linear layer y = x·W (+b) over m = seq tokens: W is k × n."""
    return ops.add(
        name, OpKind.matmul, split, flops=2.0 * m * n * k, params=params, gemm=(m, n, k),
        in_elems=m * k, out_elems=m * n, saved_elems=saved, **fields,
    )


def add_dropout(ops: OpList, name: str, elems: int, split: TensorSplit = REP, **fields: object) -> str:
    """Dropout keeps a 1-byte mask whatever the data type."""
    return ops.add(
        name, OpKind.dropout, split, in_elems=elems, out_elems=elems, saved_bytes_fixed=elems, **fields
    )


def add_block(ops: OpList, b: BlockShape, block_input: str) -> str:
    """Append one block's ops to the current layer; returns the name of its last op."""
    s, h = b.seq, b.hidden
    sh = s * h
    norm_first = b.pre_norm
    if norm_first:
        add_norm(ops, "norm1", sh, b.norm_params)
    attn_in = ops.last if norm_first else block_input
    mlp_in = attn_in
    if b.parallel and b.parallel_norms == 2:
        mlp_in = add_norm(ops, "norm_mlp", sh, b.norm_params, inputs=[block_input])
    attn_out = _add_attention(ops, b, attn_in)
    if b.sandwich:
        attn_out = add_norm(ops, "post_attention_norm", sh, b.norm_params)
    if b.parallel:
        mlp_out = _add_mlp(ops, b, mlp_in)
        return ops.add(
            "residual", OpKind.elementwise, REP, in_elems=3 * sh, out_elems=sh, inputs=[attn_out, mlp_out, block_input]
        )
    residual1 = ops.add(
        "residual1", OpKind.elementwise, REP, in_elems=2 * sh, out_elems=sh, inputs=[attn_out, block_input]
    )
    mlp_input = add_norm(ops, "norm2" if norm_first else "norm1", sh, b.norm_params)
    mlp_out = _add_mlp(ops, b, mlp_input)
    if b.sandwich:
        mlp_out = add_norm(ops, "post_mlp_norm", sh, b.norm_params)
    # Pre-norm: the skip path carries the first residual sum; post-norm: the first norm's output.
    skip = residual1 if norm_first else mlp_input
    last = ops.add("residual2", OpKind.elementwise, REP, in_elems=2 * sh, out_elems=sh, inputs=[mlp_out, skip])
    if not norm_first:
        last = add_norm(ops, "norm2", sh, b.norm_params)
    return last


def _add_attention(ops: OpList, b: BlockShape, attn_in: str) -> str:
    """Projections, core attention and the output projection (with its dropout); returns the last op."""
    s, h, a = b.seq, b.hidden, b.heads
    as2 = a * s * b.keys
    inputs: list[str] = []  # the classic block's attention follows qkv
    if b.mla is not None:
        qkv_elems, query = _add_mla_projections(ops, b, attn_in)
        inputs, pair_flops = [query, ops.last], 2.0 * a * (b.mla.qk_head_dim + b.mla.v_head_dim)
    else:
        rope = (float(s * a * b.head_dim), float(s * b.kv_heads * b.head_dim)) if b.eager_rope else None
        qkv = add_matmul(ops, "qkv", COL, s, b.qkv_width, h, b.linear(h, b.qkv_width, b.qkv_bias),
                         saved=s * b.qkv_width, inputs=[attn_in], rope=rope)
        qkv_elems, pair_flops = s * b.qkv_width, 4.0 * a * b.head_dim
        if b.qk_norm:
            qk = s * (a + b.kv_heads) * b.head_dim
            inputs = [ops.add("qk_norm", OpKind.norm, HEADS, params=2 * b.norm_of(b.head_dim), in_elems=qk,
                              out_elems=qk, saved_elems=qk), qkv]
    ops.add(
        "attention", OpKind.attention, HEADS, flops=pair_flops * s * b.keys, in_elems=qkv_elems,
        out_elems=s * b.q_width, selective=True, inputs=inputs,
        fused_flops=pair_flops * flash_pairs(s, b.window) if b.causal else None, bmm=_bmm(b),
    )
    ops.add("softmax", OpKind.softmax, HEADS, params=a if b.sinks else 0, in_elems=as2, out_elems=as2,
            saved_elems=as2, selective=True,
            causal_keys=s if b.causal and b.window is None and not b.sinks and b.keys == s else 0)
    if b.dropout:
        add_dropout(ops, "attention_dropout", as2, HEADS, saved_elems=as2, selective=True)
    add_matmul(ops, "out_proj", ROW, s, h, b.q_width, b.linear(b.q_width, h, b.out_bias), saved=s * b.q_width)
    if b.dropout:
        add_dropout(ops, "dropout1", s * h)
    return ops.last


def _bmm(b: BlockShape) -> AttentionBmm:
    """The batched GEMMs of the block's attention run unfused (``Op.bmm``): every query head over ``keys`` keys
    per query (the op's FLOPs count the same pairs), QKᵀ over the query/key head width, PV over the value
    head width (MLA's qk_head_dim and v_head_dim, else head_dim for both)."""
    qk, v = (b.mla.qk_head_dim, b.mla.v_head_dim) if b.mla is not None else (b.head_dim, b.head_dim)
    return AttentionBmm(heads=b.heads, queries=b.seq, keys=b.keys, qk_dim=qk, v_dim=v)


def _add_mla_projections(ops: OpList, b: BlockShape, attn_in: str) -> tuple[int, str]:
    """MLA's query and key/value projections (DeepSeek-V2 §2.1.2): the attention's input elements and the
    query's op (the key/value op is the last one added)."""
    assert b.mla is not None
    s, h, a, m = b.seq, b.hidden, b.heads, b.mla
    q_width, kv_up_width = a * m.qk_head_dim, a * (m.qk_nope_head_dim + m.v_head_dim)
    if m.q_lora_rank is not None:
        r = m.q_lora_rank
        add_matmul(ops, "q_down", REP, s, r, h, b.linear(h, r, b.qkv_bias), inputs=[attn_in])
        add_norm(ops, "q_norm", s * r, b.norm_of(r))
        query = add_matmul(ops, "q_up", COL, s, q_width, r, b.linear(r, q_width, False), saved=s * q_width)
    else:
        query = add_matmul(ops, "q_proj", COL, s, q_width, h, b.linear(h, q_width, b.qkv_bias), saved=s * q_width,
                   inputs=[attn_in])
    latent = m.kv_lora_rank + m.qk_rope_head_dim
    add_matmul(ops, "kv_down", REP, s, latent, h, b.linear(h, latent, b.qkv_bias), saved=s * m.qk_rope_head_dim,
               inputs=[attn_in])
    add_norm(ops, "kv_norm", s * m.kv_lora_rank, b.norm_of(m.kv_lora_rank))
    add_matmul(ops, "kv_up", COL, s, kv_up_width, m.kv_lora_rank, b.linear(m.kv_lora_rank, kv_up_width, False),
               saved=s * kv_up_width)
    return s * (q_width + kv_up_width + m.qk_rope_head_dim), query


def _add_mlp(ops: OpList, b: BlockShape, mlp_input: str) -> str:
    """The dense or mixture-of-experts MLP (with its dropout); returns the last op."""
    if b.moe is not None:
        _add_moe(ops, b, b.moe, mlp_input)
    else:
        _add_dense_mlp(ops, b, b.ffn, mlp_input, "mlp")
    if b.dropout:
        add_dropout(ops, "dropout2", b.seq * b.hidden)
    return ops.last


def _add_dense_mlp(ops: OpList, b: BlockShape, ffn: int, mlp_input: str, prefix: str, **fields: object) -> str:
    s, h = b.seq, b.hidden
    up = add_matmul(ops, f"{prefix}_up", COL, s, ffn, h, b.mlp_linear(h, ffn), inputs=[mlp_input], **fields)
    act_inputs = [up]
    if b.gated_mlp:
        act_inputs.append(
            add_matmul(ops, f"{prefix}_gate", COL, s, ffn, h, b.mlp_linear(h, ffn), inputs=[mlp_input], **fields)
        )
    act_in = s * ffn * len(act_inputs)
    name = "activation" if prefix == "mlp" else f"{prefix}_activation"
    ops.add(name, OpKind.elementwise, COL, in_elems=act_in, out_elems=s * ffn, saved_elems=act_in, inputs=act_inputs,
            **fields)
    return add_matmul(ops, f"{prefix}_down", ROW, s, h, ffn, b.mlp_linear(ffn, h), saved=s * ffn, **fields)


def _add_moe(ops: OpList, b: BlockShape, moe: MoESpec, mlp_input: str) -> str:
    """Router, routing, routed experts, shared experts and the combine; see ``ExpertInfo`` for the metadata."""
    s, h, e, f = b.seq, b.hidden, moe.experts, moe.expert_ffn
    slots = s * moe.slots_per_token  # token-slots the routed experts process per sample
    rows = max(1, math.ceil(slots))  # the stacked GEMM's m (a whole number of rows)
    fraction = moe.slots_per_token / e

    def info(role: MoERole, dispatch: float = 0.0, combine: float = 0.0, bias: bool = False,
             clamp: bool = False) -> ExpertInfo:
        return ExpertInfo(role=role, experts=e, top_k=moe.top_k, capacity_factor=moe.capacity_factor, tokens=s,
                          tokens_fraction=fraction, dispatch_elems_per_token=dispatch, combine_elems_per_token=combine,
                          output_bias=bias, glu_clamp=clamp, aux_loss=moe.load_balancing != "none")

    a2a = moe.slots_per_token * h  # each token's hidden vector to (and back from) each of its expert slots
    add_matmul(ops, "router", REP, s, e, h, e * h + (e if moe.router_bias else 0), inputs=[mlp_input],
               moe=info(MoERole.router))
    routing = ops.add("routing", OpKind.elementwise, REP, in_elems=s * e, out_elems=s * e, saved_elems=s * e,
                      moe=info(MoERole.routing))

    def experts(name: str, split: TensorSplit, n: int, k: int, **fields: object) -> str:
        return ops.add(
            name, OpKind.matmul, split, flops=2.0 * slots * n * k, params=e * b.mlp_linear(k, n), gemm=(rows, n, k),
            in_elems=slots * k, out_elems=slots * n, **fields,
        )

    up = experts("experts_up", COL, f, h, saved_elems=slots * h, inputs=[mlp_input, routing],
                 moe=info(MoERole.expert, dispatch=a2a))
    act_inputs = [up]
    if b.gated_mlp:
        act_inputs.append(experts("experts_gate", COL, f, h, inputs=[mlp_input, routing], moe=info(MoERole.expert)))
    act_in = slots * f * len(act_inputs)
    ops.add("experts_activation", OpKind.elementwise, COL, in_elems=act_in, out_elems=slots * f, saved_elems=act_in,
            inputs=act_inputs, moe=info(MoERole.expert, clamp=b.glu_clamp and b.gated_mlp))
    combine_inputs = [experts("experts_down", ROW, h, f, saved_elems=slots * f,
                              moe=info(MoERole.expert, combine=a2a, bias=b.mlp_bias))]
    if moe.shared_ffn:
        combine_inputs.append(_add_dense_mlp(ops, b, moe.shared_ffn, mlp_input, "shared", moe=info(MoERole.shared)))
    if moe.shared_expert_gate:
        combine_inputs.append(add_matmul(ops, "shared_expert_gate", REP, s, 1, h, h, inputs=[mlp_input],
                                         moe=info(MoERole.shared)))
    combine_in = slots * h + (s * h if moe.shared_ffn else 0) + (s if moe.shared_expert_gate else 0)
    # The combine stores nothing for its backward: Megatron-Core applies the routing probabilities in the experts'
    # activation (``TEGroupedMLP`` ``bias_act_func(fc1_output, bias, permuted_probs)``, whose saved fc1 output and
    # probs the ``experts_activation`` and ``routing`` ops hold), and its dispatchers' unpermute takes no probs
    # (``MoEAlltoAllTokenDispatcher.combine_postprocess``: ``unpermute(tokens, reversed_mapping, restore_shape,
    # routing_map=…)``), a scatter-add whose backward is a gather through the index map (4 B per token-slot
    # against 2·h B of a slot's hidden vector: not counted). Frameworks that weight the experts' outputs in the
    # combine (GShard's einsum, older Megatron-Core's ``unpermute(…, probs=…)``) keep those outputs: slots·h.
    return ops.add("combine", OpKind.elementwise, REP, in_elems=combine_in, out_elems=s * h,
                   inputs=combine_inputs, moe=info(MoERole.combine))
