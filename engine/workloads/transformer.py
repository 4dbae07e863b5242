"""GPT (Megatron), LLaMA-style and BERT operator graphs.

Layers: 0 = embedding, then one ``transformer`` layer per block, last = ``head`` (final norm, logits,
loss). Blocks are built by ``transformer_block.add_block``; this module adds the ends.

Choices worth knowing:

- GPT has learned positions (P·h parameters: the table is the model's ``position_table`` rows, by default
  ``seq_len``; GPT-2's 1024 whatever the run's sequence), biases, LayerNorm, GeLU, dropout, and logits tied
  to the word embedding, so with the final LayerNorm its parameters are 12lh² + 13lh + Vh + Ph + 2h
  (Megatron's formula, P = s, plus 2h). BERT's position table is sized the same way.
- The tied logits op has ``params=0`` (the weight lives in the embedding op) and an explicit
  ``bwd_flops`` of 2× forward, since it still computes both the input and the weight gradient.
- LLaMA has no biases, no dropout (it trains without), RMSNorm (h parameters) and SwiGLU; rotary
  position embeddings are elementwise on Q and K and are not modelled as an op. The LLaMA kind also
  carries the rotary decoders imported from Hugging Face (Mixtral, Qwen2, Gemma, Phi-3, Falcon, DeepSeek)
  through the block variants of ``TransformerDims``; GPT keeps learned positions and may untie its logits.
- BERT is post-norm as published (norm after each residual add, plus one after the embeddings) with
  token-type embeddings (2 types) and the masked-LM head (dense, GeLU, LayerNorm, tied decoder with a
  V-sized bias) computed on every position, as Megatron and Hugging Face do; no pooler/NSP head.
- Attention is causal in GPT and LLaMA (decoders) and not in BERT: a fused kernel then computes about half
  the query-key pairs (``Op.fused_flops``); ``flops`` keep every pair (``transformer_block``).
- ``mtp_layers`` (GPT, LLaMA) appends the multi-token-prediction depths after the head
  (``transformer_mtp``); BERT refuses them.
- The loss stores the softmax of the logits in fp32 whatever the run's data type (Megatron and Hugging
  Face upcast logits before the cross-entropy), hence ``saved_bytes_fixed = 4·s·V``.
"""

from __future__ import annotations

from tilewright.engine.ir.ops import LayerKind, OpKind, TensorSplit
from tilewright.engine.ir.workload import BertSpec, GPTSpec, LlamaSpec, TransformerDims
from tilewright.engine.workloads.builder import OpList
from tilewright.engine.workloads.graph import WorkloadGraph
from tilewright.engine.workloads.transformer_block import REP, BlockShape, add_block, add_dropout, add_matmul, add_norm
from tilewright.engine.workloads.transformer_mtp import add_mtp_depth

VOCAB = TensorSplit.vocab
BERT_TOKEN_TYPES = 2


def build_gpt(spec: GPTSpec) -> WorkloadGraph:
    s, h = spec.seq_len, spec.hidden
    ops = OpList()
    ops.layer("embedding", LayerKind.embedding)
    _word_embedding(ops, spec)
    ops.add("position_embedding", OpKind.embedding, REP, params=spec.positions * h, in_elems=s * h, out_elems=s * h)
    add_dropout(ops, "embedding_dropout", s * h)
    _blocks(ops, spec, dropout=True, pre_norm=True, causal=True)
    ops.layer("head", LayerKind.head)
    final = add_norm(ops, "final_norm", s * h, _norm_params(spec))
    _logits_and_loss(ops, spec, weight_params=0 if spec.tie_embeddings else spec.vocab * h)
    _mtp(ops, spec, final, dropout=True)
    return ops.graph(_name(spec), spec, dims=spec)


def build_llama(spec: LlamaSpec) -> WorkloadGraph:
    s, h = spec.seq_len, spec.hidden
    ops = OpList()
    ops.layer("embedding", LayerKind.embedding)
    _word_embedding(ops, spec)
    _blocks(ops, spec, dropout=False, pre_norm=True, causal=True)
    ops.layer("head", LayerKind.head)
    final = add_norm(ops, "final_norm", s * h, _norm_params(spec))
    _logits_and_loss(ops, spec, weight_params=0 if spec.tie_embeddings else spec.vocab * h)
    _mtp(ops, spec, final, dropout=False)
    return ops.graph(_name(spec), spec, dims=spec)


def build_bert(spec: BertSpec) -> WorkloadGraph:
    s, h = spec.seq_len, spec.hidden
    sh = s * h
    ops = OpList()
    ops.layer("embedding", LayerKind.embedding)
    _word_embedding(ops, spec)
    ops.add("position_embedding", OpKind.embedding, REP, params=spec.positions * h, in_elems=sh, out_elems=sh)
    ops.add("token_type_embedding", OpKind.embedding, REP, params=BERT_TOKEN_TYPES * h, in_elems=sh, out_elems=sh)
    add_norm(ops, "embedding_norm", sh, _norm_params(spec))
    add_dropout(ops, "embedding_dropout", sh)
    _blocks(ops, spec, dropout=True, pre_norm=False, causal=False)
    ops.layer("head", LayerKind.head)
    # Megatron's BERT LM head uses a plain (not tensor-parallel) dense layer: every rank runs it whole.
    add_matmul(ops, "mlm_dense", REP, s, h, h, h * h + h)
    ops.add("mlm_activation", OpKind.elementwise, REP, in_elems=sh, out_elems=sh, saved_elems=sh)
    add_norm(ops, "mlm_norm", sh, _norm_params(spec))
    _logits_and_loss(ops, spec, weight_params=0, bias=True)
    return ops.graph(_name(spec), spec, dims=spec)


def _name(spec: TransformerDims) -> str:
    kind = getattr(spec, "kind", "transformer")
    return spec.name or f"{kind}-{spec.layers}x{spec.hidden}"


def _word_embedding(ops: OpList, spec: TransformerDims) -> None:
    s, h = spec.seq_len, spec.hidden
    ops.add("word_embedding", OpKind.embedding, VOCAB, params=spec.vocab * h, in_elems=s, out_elems=s * h)


def _norm_params(spec: TransformerDims) -> int:
    return (2 if spec.norm == "layernorm" else 1) * spec.hidden


def _blocks(ops: OpList, spec: TransformerDims, *, dropout: bool, pre_norm: bool, causal: bool) -> None:
    """The transformer blocks; ``causal``: a decoder's masked self-attention (GPT, LLaMA), which a fused kernel
    computes over about half the pairs (``transformer_block.flash_pairs``); BERT's encoder attends both ways."""
    block_input = ops.last
    for i in range(spec.layers):
        ops.layer(f"block{i}", LayerKind.transformer)
        shape = BlockShape.of(spec, spec.seq_len, i, dropout=dropout, pre_norm=pre_norm, causal=causal)
        block_input = add_block(ops, shape, block_input)


def _mtp(ops: OpList, spec: TransformerDims, hidden: str, *, dropout: bool) -> None:
    """The multi-token-prediction depths of a decoder (``transformer_mtp``): each reads the previous depth's
    output and ends with the shared head's logits (no weight of their own) and its own loss."""
    for k in range(spec.mtp_layers):
        hidden = add_mtp_depth(ops, spec, k, hidden, dropout=dropout, causal=True)
        ops.layer(f"mtp{k}_head", LayerKind.head)
        _logits_and_loss(ops, spec, weight_params=0)


def _logits_and_loss(ops: OpList, spec: TransformerDims, weight_params: int, bias: bool = False) -> None:
    """Logits over the vocabulary and the cross-entropy; ``weight_params`` is 0 when tied to the embedding."""
    s, h, v = spec.seq_len, spec.hidden, spec.vocab
    flops = 2.0 * s * v * h
    add_matmul(ops, "logits", VOCAB, s, v, h, weight_params + (v if bias else 0), bwd_flops=2 * flops)
    ops.add("loss", OpKind.loss, VOCAB, in_elems=s * v, out_elems=1, saved_bytes_fixed=4 * s * v)
