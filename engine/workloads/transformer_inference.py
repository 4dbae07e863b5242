"""The ops one inference pass of a transformer runs: a prefill of the prompt, or one decode step.

Built from the training graph of the same model at ``seq_len = tokens`` (every per-token op is then
right) and changed where inference differs from training:

- attention: ``tokens`` new queries per sequence over ``context`` keys (the new tokens are the last
  ``tokens`` of the context). Query i of the new ones attends to ``context - tokens + i + 1`` keys
  (causal), so QKᵀ and AV cost 4·h FLOPs per (query, key) pair over t·(c − t) + t·(t + 1)/2 pairs — about
  half of the s² pairs of a square prefill. ``fused`` (flash-style) runs the softmax inside the
  attention kernel: the scores never leave the chip, only Q, K, V (the new tokens') and the cached K, V
  of earlier tokens are read, once. ``materialised`` keeps the separate softmax over the full t·c score
  tensor (stored and moved) and the full t·c pairs of FLOPs (no causal skipping), as the engine did
  before fused attention existed.
- the cached keys and values of earlier tokens (2·(c − t)·kv_dim elements per sequence) are marked as
  ``cache_elems``, so the cost model reads them in the KV cache's format;
- embedding lookups are gathers: each reads the rows of its table for the pass's tokens, not the table.
  An inference pass graph puts those rows in the op's ``params`` (the weight elements the op reads), for
  ``sequences`` sequences at once; the model's weights in memory come from the model's own graph;
- the head computes logits for the last token of each sequence only (decoders sample one token from
  it); an encoder (BERT) keeps its head over every token. Logits tied to the word embedding (GPT-2, OPT,
  Gemma) hold no weight of their own in the model's graph, but the pass reads the V × h table all the same:
  their ``params`` here are its elements, so a decode step streams them;
- no loss, no dropout (inference runs in eval mode);
- no multi-token-prediction depths (``TransformerDims.mtp_layers``): serving uses them only as the draft
  model of speculative decoding (vLLM's and SGLang's DeepSeek MTP drafters), which plain prefill and decode
  do not run, and no speculative mode exists here yet, so a pass is built from the spec with ``mtp_layers``
  0 (``without_mtp``) and the model's weights in memory leave them out too (``simulate.make_plan``);
- a sliding window (``TransformerDims.sliding_window``) limits each query to the last w keys; the KV
  cache is still sized for the whole context (as engines without a ring-buffer cache allocate it);
- multi-head latent attention caches the latent (kv_lora_rank + qk_rope_head_dim per token and layer,
  shared by all heads, so replicated over tensor parallelism), as the absorbed-weights kernels of vLLM and
  SGLang do; the attention FLOPs stay those of the per-head form (2·a·(d_qk + d_v) per pair);
- a routed-expert op reads the weights of the experts the pass's tokens touch: of ``experts`` experts,
  each token picking top_k, n tokens touch E·(1 − (1 − k/E)ⁿ) on average (uniform routing), so a decode
  step of a few sequences reads a fraction of a MoE layer's weights while a long prefill reads all.
- a runtime that samples on the device (``Compute.runtime_sampling``, tt-transformers) ends a decode step with
  ops the model graph has no counterpart for (``sampling_ops``), appended to the head: the logits untilized
  and, for one sequence, their argmax and the next step's index updates.
"""

from __future__ import annotations

import math

from tilewright.engine.ir.ops import AttentionShape, LayerKind, MoERole, Op, OpKind, TensorSplit
from tilewright.engine.ir.workload import BertSpec, TransformerDims
from tilewright.engine.workloads.graph import WorkloadGraph
from tilewright.engine.workloads.transformer_block import attention_flops_per_pair

DROPPED = {OpKind.dropout, OpKind.loss}


def kv_heads(dims: TransformerDims) -> int:
    return dims.kv_heads_n


def kv_dim(dims: TransformerDims) -> int:
    """Key (or value) elements per token per attention layer: kv_heads · head_dim."""
    return kv_heads(dims) * dims.head_dim_n


def kv_cache_width(dims: TransformerDims) -> int:
    """Cached elements per token per attention layer: 2 · kv_heads · head_dim (K and V), or MLA's latent."""
    if dims.mla is not None:
        return dims.mla.kv_lora_rank + dims.mla.qk_rope_head_dim
    return 2 * kv_dim(dims)


def kv_cache_bytes(
    dims: TransformerDims, attention_layers: int, tp: int, sequences: int, tokens: int, elem_bytes: float,
    block_tokens: int = 1,
) -> float:
    """KV cache per device: 2 (K and V) · attention layers · kv_heads · head_dim · tokens · sequences ·
    bytes per element, each sequence's tokens rounded up to whole pages of ``block_tokens``; kv heads are
    split over ``tp`` devices (replicated when ``tp`` exceeds them, as Megatron and vLLM do). MLA caches
    its latent instead, whole on every tensor-parallel device."""
    paged = math.ceil(tokens / block_tokens) * block_tokens if tokens > 0 else 0
    if dims.mla is not None:
        return float(attention_layers * kv_cache_width(dims) * paged * sequences * elem_bytes)
    per_device_heads = max(kv_heads(dims) / tp, 1.0)
    return 2.0 * attention_layers * per_device_heads * dims.head_dim_n * paged * sequences * elem_bytes


def attention_pairs(tokens: int, context: int, causal: bool, window: int | None = None) -> float:
    """(query, key) pairs of ``tokens`` new queries over ``context`` keys, the new ones last; with a
    ``window`` each query sees at most the last ``window`` keys (itself included)."""
    if not causal:
        return float(tokens * min(context, window) if window is not None else tokens * context)
    if window is None or window >= context:
        return tokens * (context - tokens) + tokens * (tokens + 1) / 2
    # query at position p (0-based) sees min(p + 1, window) keys; p runs over the last `tokens` positions
    first = context - tokens
    ramp_end = min(max(window - 1, first), context)  # positions p < window - 1 see p + 1 keys
    ramp = (ramp_end * (ramp_end + 1) - first * (first + 1)) / 2
    return ramp + (context - ramp_end) * window


def without_mtp(dims: TransformerDims) -> TransformerDims:
    """The spec an inference pass serves: the multi-token-prediction depths left out (module docstring)."""
    return dims.model_copy(update={"mtp_layers": 0}) if dims.mtp_layers else dims


def touched_experts(experts: int, top_k: int, tokens: int) -> float:
    """Experts that ``tokens`` tokens reach on average when each picks ``top_k`` of ``experts`` uniformly."""
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def sampling_ops(logits: Op, vocab: int, sequences: int, tile: int) -> list[Op]:
    """The ops tt-transformers runs after the LM head of a traced decode step (tenstorrent/tt-metal
    models/tt_transformers/tt/model.py, ``ttnn_decode_forward``), per sample of a micro-batch of ``sequences``:

    - ``sample_untilize``: ``ttnn.untilize`` of the logits, which the LM head leaves in DRAM
      (``LM_HEAD_OUTPUT_MEMCFG``) in whole ``tile``-row tiles: the sequences' rows padded to a multiple of
      ``tile`` (32 rows at batch 1), read and written once; on a multi-chip group it reads the logits after an
      all-gather over the vocabulary (``plan.passes.forward_pass`` puts it after the vocab-split head);
    - for one sequence only (the demos take the argmax on the device only at batch 1 and temperature 0,
      ``argmax_on_device``; a larger batch is sampled on the host): ``sample_argmax`` (``ttnn.argmax`` over the
      untilized rows, one comparison per element) and ``sample_update`` (``_increment_decode_positions_device``
      and the ``ttnn.copy`` of the token into the next step's input: a few elements, whose device programs the
      runtime's ``programs_by_op`` counts).

    Every op is replicated: after the gather each chip holds the whole vocabulary and runs the same program."""
    rows = math.ceil(sequences / tile) * tile
    padded = float(rows * vocab) / sequences  # elements per sample, the padding rows shared out
    layer = logits.name.rsplit(".", 1)[0] + "." if "." in logits.name else ""

    def op(name: str, flops: float, in_elems: float, out_elems: float, source: str) -> Op:
        return Op(name=layer + name, kind=OpKind.elementwise, layer=logits.layer, flops=flops, in_elems=in_elems,
                  out_elems=out_elems, split=TensorSplit.replicated, inputs=[source])

    out = [op("sample_untilize", 0.0, padded, padded, logits.name)]
    if sequences == 1:  # position, rotary index and token: one element each
        out += [op("sample_argmax", padded, padded, float(rows), out[0].name),
                op("sample_update", 3.0, 3.0, 3.0, layer + "sample_argmax")]
    return out


def inference_graph(
    dims: TransformerDims, tokens: int, context: int, sequences: int, fused: bool, sampling_tile: int = 0,
    routed_ranks: int = 1,
) -> WorkloadGraph:
    """The ops of one pass of ``tokens`` new tokens per sequence attending over ``context`` keys, for
    ``sequences`` sequences (the pass's micro-batch: it sizes the embedding gathers). ``sampling_tile`` > 0: a
    decoder's decode step (one token) ends with the runtime's on-device sampling (``sampling_ops``) on tiles of
    that many rows. ``routed_ranks``: the expert-parallel ranks whose tokens a MoE layer routes together, each
    with this pass's tokens (``plan.served_experts``): the experts reached are those of all their tokens."""
    from tilewright.engine.workloads import build_workload  # the package imports this module's siblings

    if not 1 <= tokens <= context:
        raise ValueError(f"tokens: {tokens} new tokens over a context of {context}")
    base = build_workload(without_mtp(dims).model_copy(update={"seq_len": tokens}))
    encoder = isinstance(dims, BertSpec)
    head = {li.index for li in base.layers if li.kind is LayerKind.head}
    width, heads, per_pair = kv_cache_width(dims), dims.heads, attention_flops_per_pair(dims)
    block = {li.index: i for i, li in enumerate(li for li in base.layers if li.kind is LayerKind.transformer)}
    alias: dict[str, str] = {}  # a dropped op → the op whose output stands in for its output
    ops: list[Op] = []
    prev = ""
    for op in base.ops():
        source = alias.get(op.inputs[0], op.inputs[0]) if op.inputs else prev
        dropped = op.kind in DROPPED or (fused and op.kind is OpKind.softmax)
        if dropped:
            alias[op.name] = source
            continue
        update: dict = {"inputs": [alias.get(i, i) for i in op.inputs]}
        if op.kind is OpKind.embedding:
            update |= {"params": float(sequences * op.out_elems), "in_elems": float(tokens)}
        elif op.kind is OpKind.attention:
            cached = float((context - tokens) * width)
            window = dims.window_of(block[op.layer])
            update |= {
                "flops": per_pair * attention_pairs(tokens, context, causal=fused, window=window),
                "in_elems": op.in_elems + cached,
                "cache_elems": cached,
                "fused_flops": None,  # ``flops`` above already count the pass's causal pairs when fused
            }
            if fused and dims.mla is None:  # a flash kernel: its head structure sizes the grid split
                update["attention"] = AttentionShape(heads=heads, kv_heads=dims.kv_heads_n,
                                                     head_dim=dims.head_dim_n, queries=tokens, keys=context)
        elif op.kind is OpKind.softmax:  # materialised: the t × c scores of every head, whole rows read (a
            scores = float(heads * tokens * context)  # serving framework's softmax, not Megatron's causal kernel)
            update |= {"in_elems": scores, "out_elems": scores, "saved_elems": scores, "causal_keys": 0}
        elif op.moe is not None and op.moe.role is MoERole.expert and op.params:
            reached = touched_experts(op.moe.experts, op.moe.top_k, tokens * sequences * routed_ranks)
            update |= {"params": op.params * reached / op.moe.experts}
        elif op.layer in head and not encoder and op.kind is OpKind.matmul:  # logits of the last token
            m, n, k = op.gemm
            update |= {"flops": op.flops / m, "in_elems": op.in_elems / m, "out_elems": op.out_elems / m,
                       "gemm": (1, n, k), "bwd_flops": None}
            if not op.params:  # tied to the word embedding: the pass still reads the V × h weight
                update["params"] = float(n * k)
        ops.append(op.model_copy(update=update))
        prev = op.name
    if sampling_tile > 0 and tokens == 1 and not encoder:
        logits = next(op for op in reversed(ops) if op.layer in head and op.kind is OpKind.matmul)
        ops += sampling_ops(logits, dims.vocab, sequences, sampling_tile)
    return WorkloadGraph.from_ops(base.name, base.spec, base.layers, ops, dims=base.dims)
