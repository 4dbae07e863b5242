"""Multi-token prediction (MTP) depths: the extra training modules of DeepSeek-V3 and Megatron-Core.

DeepSeek-V3 technical report (arXiv 2412.19437) §2.2: depth k predicts the token k + 1 positions ahead from
the previous depth's representation of token i and the embedding of token i + k. Megatron-Core builds it in
``megatron/core/transformer/multi_token_prediction.py`` (``MultiTokenPredictionLayer``), which this module
follows op for op, per depth (``TransformerDims.mtp_layers`` of them):

- ``hnorm``: RMSNorm (the model's norm kind) of the previous depth's output — for depth 0 the main model's
  output after its final norm (Megatron's decoder applies it before handing the hidden states over);
- ``word_embedding``: the shared embedding looked up again for the shifted tokens (``params = 0``: the weight
  is the main embedding's; with pipeline parallelism the last stage holds a copy, ``plan.tied``);
- ``enorm``: norm of that embedding; ``eh_proj``: the concatenation [enorm; hnorm] (2h) projected to h, no
  bias, column-parallel as Megatron-Core builds it (``backend.column_parallel_linear()``, ``gather_output``
  False, then ``gather_from_tensor_model_parallel_region``);
- one transformer block shaped like the main model's last block (dense or MoE, MLA or not: Megatron's FLOPs
  formula counts an MTP layer as MoE when ``last_layer_is_moe``);
- ``final_norm`` (Megatron's per-depth ``final_layernorm``, DeepSeek's ``shared_head.norm``);
- in a layer of its own (``transformer._mtp`` adds it), the shared output head's ``logits`` (``params = 0``:
  the main head's weight, or the embedding's when tied) and the depth's cross-entropy ``loss``.

Layers: depth k is two ``head``-kind layers after the main head, ``mtp{k}`` (norms, projection, block, norm)
and ``mtp{k}_head`` (logits, loss). Both ride on the last (virtual) pipeline stage with the head, as
Megatron-Core requires (``MultiTokenPredictionBlock`` asserts the last virtual stage; the DeepSeek-V3 recipe's
layout ``'Et|(tt|)*30mL'`` puts 'm' beside the loss); ``mapping.pipeline_layers`` keeps counting the main
model's blocks only. Splitting the depth in two matters for full recomputation: ``perf.memory.
recomputed_layers`` re-runs a layer holding tensor-parallel ops, which ``mtp{k}`` is, as Megatron checkpoints
``_proj_and_transformer_layer`` under ``recompute_granularity='full'``; the logits and the loss run outside
that checkpoint (``process_mtp_loss``), as the main head's do.

Parameters per depth: 3 norms (3h for RMSNorm) + 2h² (eh_proj) + one block; DeepSeek-V3's 11.5 B "unique
parameters" (README_WEIGHTS.md) — its 685 B total counts the checkpoint's copies of the embedding and the head
(2 × 0.9 B) in layer 61 again, which share the main model's weights and are not counted here.

Model FLOPs count every MTP op: Megatron-LM's ``num_floating_point_operations`` adds the MTP layers to the
block count, the eh_proj GEMM and one more logits GEMM per depth, so MFU follows it.

Approximations: the checkpoint of a recomputed depth is its first op's input (the previous hidden state,
s·h); Megatron also keeps the looked-up embedding (another s·h). The embedding lookup holds no weight here
(shared), so the plan charges it no vocabulary all-reduce, and eh_proj's output all-gather over tensor
parallelism (s·h per depth) has no counterpart among the plan's column-parallel collectives.
"""

from __future__ import annotations

from tilewright.engine.ir.ops import LayerKind, OpKind, TensorSplit
from tilewright.engine.ir.workload import TransformerDims
from tilewright.engine.workloads.builder import OpList
from tilewright.engine.workloads.transformer_block import COL, BlockShape, add_block, add_matmul, add_norm


def add_mtp_depth(ops: OpList, spec: TransformerDims, k: int, hidden: str, *, dropout: bool, causal: bool) -> str:
    """Open layer ``mtp{k}`` and add depth k's norms, projection, block and final norm; ``hidden``: the op whose
    output the depth reads (the main model's final norm, or the previous depth's). Returns the final norm,
    which the caller's ``mtp{k}_head`` layer (shared logits and loss) and the next depth read."""
    s, h = spec.seq_len, spec.hidden
    sh = s * h
    norm = (2 if spec.norm == "layernorm" else 1) * h
    ops.layer(f"mtp{k}", LayerKind.head)
    hnorm = add_norm(ops, "hnorm", sh, norm, inputs=[hidden])
    ops.add("word_embedding", OpKind.embedding, TensorSplit.vocab, params=0, in_elems=s, out_elems=sh)
    enorm = add_norm(ops, "enorm", sh, norm)
    add_matmul(ops, "eh_proj", COL, s, h, 2 * h, 2 * h * h, inputs=[enorm, hnorm])
    shape = BlockShape.of(spec, s, spec.layers - 1, dropout=dropout, pre_norm=True, causal=causal)
    out = add_block(ops, shape, ops.last)
    return add_norm(ops, "final_norm", sh, norm, inputs=[out])
