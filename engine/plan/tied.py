"""Tied word embeddings with pipeline parallelism (Megatron-LM's "embedding group").

A model whose logits reuse the word embedding (GPT as Megatron trains it, BERT's decoder, Gemma…) has that
weight in two places once the pipeline puts the embedding and the head on different stages: Megatron-LM
keeps a copy of the word embedding on the last stage (``setup_embeddings_and_output_layer``: initialised
from the first stage's, as a parameter of the last stage's model chunk), so that stage holds its weight, its
gradient and — the optimizer steps every parameter of a chunk — its optimizer state; the data-parallel
reduction of the last stage carries its gradient too (with ZeRO-2/3 its per-layer collectives, with the head
layer: ``plan.sharding``). After the data-parallel gradient reduction, before the optimizer step, the two
copies' gradients are summed by an all-reduce over the embedding group, the first and the last stage of each
pipeline (megatron/core/distributed/finalize_model_grads.py ``_allreduce_word_embedding_grads``, after
``finish_grad_sync``), so that both copies take the same step. Per device the copy is vocab × hidden / tp
parameters (the embedding is split by vocabulary over the tensor ranks); the all-reduce carries them at the
gradients' bytes — with ZeRO-2/3 only the device's 1/dp shard of them, the gradient it keeps (Megatron's FSDP
path all-reduces the local shard likewise).

The all-reduce is reported as ``dp_comm``: it is a gradient synchronisation of a replicated weight, in the same
window as the data-parallel reduction (between the last backward and the optimizer step), not a pipeline
transfer of activations (``pp_comm``). A stage that reaches it before its partner waits (bubble).

A custom ``mapping.stages`` that puts the embedding and the head on one stage needs no copy and no all-reduce.
Not modelled: position embeddings (Megatron shares them only between the encoder and decoder stages of an
encoder-decoder model).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.ir.ops import LayerKind, Op, OpKind, TensorSplit
from tilewright.engine.ir.workload import BertSpec
from tilewright.engine.perf.memory import params_on_device
from tilewright.engine.workloads.graph import WorkloadGraph


@dataclass(frozen=True)
class TiedEmbedding:
    """Where a tied word embedding lives when the pipeline splits it from the logits (module docstring)."""

    first: int  # pipeline rank holding the word embedding
    last: int  # pipeline rank holding the logits, and the copy
    layer: int  # the head layer (the logits' layer): the copy is its parameter
    params: float  # of the copy, per device (vocab × hidden / tp)

    def allreduce_bytes(self, grad_bytes: float, zero: int, dp: int) -> float:
        """Bytes per device of the embedding group's all-reduce: the copy's gradient, or with ZeRO-2/3 the
        device's 1/dp shard of it."""
        return self.params * grad_bytes / (dp if zero >= 2 else 1)


def ties_embeddings(workload: WorkloadGraph) -> bool:
    """The last stage needs the word embedding too: the logits reuse it (``tie_embeddings`` of a GPT/LLaMA
    spec; BERT's decoder always), or multi-token-prediction depths (``mtp_layers``) look it up again there —
    Megatron keeps the same copy and all-reduce for them (finalize_model_grads: ``share_embeddings_and_output_
    weights or mtp_num_layers``)."""
    dims = workload.dims
    if dims is None:
        return False
    return bool(getattr(dims, "tie_embeddings", isinstance(dims, BertSpec))) or dims.mtp_layers > 0


def tied_word_embedding(workload: WorkloadGraph) -> Op | None:
    """The vocabulary-split embedding op the logits reuse, if the model ties them: what the last stage's copy
    copies, held in that op's format (plain bf16 under fp8 training: ``plan.device_layers.vocab_layers``)."""
    if not ties_embeddings(workload):
        return None
    return next((op for op in workload.ops() if op.kind is OpKind.embedding and op.split is TensorSplit.vocab), None)


def copy_params(workload: WorkloadGraph, tp: int) -> float:
    """Parameters per device of the copy the last stage holds when the pipeline splits embedding and logits
    (vocab × hidden / tp), 0 for an untied model."""
    word = tied_word_embedding(workload)
    return params_on_device([word], tp) if word is not None else 0.0


def tied_embedding(workload: WorkloadGraph, per_virtual: list[list[int]], pp: int, tp: int) -> TiedEmbedding | None:
    """The copy a pipeline needs (``per_virtual``: the layers of each virtual stage, in order; virtual stage
    vs runs on rank vs mod pp), or None: untied, one stage, or embedding and logits on the same rank."""
    word = tied_word_embedding(workload) if pp > 1 else None
    heads = [li.index for li in workload.layers if li.kind is LayerKind.head]
    if word is None or not heads:
        return None
    rank_of = {layer: vs % pp for vs, layers in enumerate(per_virtual) for layer in layers}
    first, last = rank_of.get(word.layer), rank_of.get(heads[-1])
    if first is None or last is None or first == last:
        return None
    return TiedEmbedding(first, last, heads[-1], copy_params(workload, tp))
