"""What one device holds of its stage's layers: their ops with the routed experts sharded, each layer's
parameters, the ZeRO-3/FSDP working set, and the model-state bytes per parameter of the stage.

Split from ``plan.plan``: these size a stage from its layers and know nothing of stages, collectives or
time, so ``build_plan`` (and the tests that check its sharding) take them from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tilewright.engine.ir.ops import LayerKind, Op, OpKind, TensorSplit
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.formats import OpFormats, mean_weight_bytes, resolve_formats
from tilewright.engine.perf.memory import StateBytes, params_on_device
from tilewright.engine.plan.experts import shard_experts
from tilewright.engine.plan.sharding import ShardComm
from tilewright.engine.plan.tied import tied_word_embedding
from tilewright.engine.workloads.graph import WorkloadGraph


def block_names(workload: WorkloadGraph) -> list[str]:
    """The names of the workload's transformer layers in order ("block0", …): what ``mapping.formats``'
    bf16 edge layers count (``perf.formats.edge_layers``)."""
    return [workload.layers[i].name for i in workload.block_layers]


def vocab_layers(workload: WorkloadGraph) -> list[str]:
    """The names of the layers around the vocabulary, which fp8 training keeps in bf16 whatever its recipe
    (``perf.formats.resolve_formats``): the embedding layers and the head layers whose GEMM is the logits' (split
    over the vocabulary: "head", a multi-token-prediction depth's "mtp0_head"; not the depth's own "mtp0" block,
    whose layers are Transformer Engine's).

    Why: Megatron-Core's GPTModel builds its word embedding and output layer as its own ``VocabParallelEmbedding``
    and ``tensor_parallel.ColumnParallelLinear`` (``megatron/core/models/gpt/gpt_model.py``), not as Transformer
    Engine modules, so neither fp8 autocast (only TE modules read it; Megatron-Core enters it per decoder layer,
    ``fp8_utils.get_fp8_context``) nor ``fp8_model_init`` reaches them: the logits GEMM is a bf16 matmul, and both
    weights are plain bf16 parameters, held and gathered at 2 B under ``--fp8-param-gather``. An fp8 output layer
    was proposed and closed unmerged (NVIDIA/Megatron-LM pull request #1551, "Fp8 LM-head", 2025); the one merged
    later is opt-in and MXFP8 only (#4825, ``fp8_output_proj``, 2026: "GPTModel default uses
    ColumnParallelLinear"). torchtitan's float8 converter swaps every ``nn.Linear`` but the output
    (``convert_to_float8_training(..., module_filter_fn=lambda mod, fqn: fqn != "output")``; torchtune's the
    same), and its embedding is an ``nn.Embedding``, never swapped."""
    out = []
    for li in workload.layers:
        ops = workload.layer_ops(li.index)
        logits = any(op.kind is OpKind.matmul and op.split is TensorSplit.vocab for op in ops)
        if li.kind is LayerKind.embedding or (li.kind is LayerKind.head and logits):
            out.append(li.name)
    return out


def edge_weight_bytes(formats: OpFormats, workload: WorkloadGraph) -> dict[int, float]:
    """Per index of a bf16 edge layer (``formats.bf16_layers``), its weights' bytes per parameter, each op in its
    own format (``mean_weight_bytes``): what a ZeRO-3 gather of that layer moves per parameter."""
    out = {}
    for li in workload.layers:
        if li.name in formats.bf16_layers:
            out[li.index] = mean_weight_bytes(formats, ((op.name, op.params) for op in workload.layer_ops(li.index)))
    return out


def layer_params(
    workload: WorkloadGraph, indices: list[int], tp: int, ep: int = 1, extra: dict[int, float] | None = None,
    etp: int | None = None,
) -> list[float]:
    """Each layer's parameters on one device: its experts sharded over ep (and etp, ``plan.experts``), plus
    ``extra`` (per layer index: the tied embedding's copy, ``plan.tied``)."""
    extra = extra or {}
    layers = sharded_layer_ops(workload, indices, ep, 1.0, tp, etp)
    return [params_on_device(ops, tp) + extra.get(i, 0.0) for i, ops in zip(indices, layers, strict=True)]


def gathered_bytes(shard: ShardComm | None, layer_params: list[float]) -> float:
    """ZeRO-3/FSDP working set: the largest layer's full weights twice (the one computing and the one
    prefetched or being gathered) and its full gradient before the reduce-scatter."""
    if shard is None or not shard.gather_weights or not layer_params:
        return 0.0
    return max(layer_params) * (2 * shard.weight_bytes + shard.grad_bytes)


def sharded_layer_ops(
    workload: WorkloadGraph, indices: list[int], ep: int = 1, imbalance: float = 1.0, tp: int = 1,
    etp: int | None = None,
) -> list[list[Op]]:
    """The ops of these layers as one device holds and runs them (expert parallelism: ``plan.experts``)."""
    return [shard_experts(workload.layer_ops(i), ep, imbalance, tp, etp) for i in indices]


def stage_mean_bytes(
    formats: OpFormats, workload: WorkloadGraph, chunk_layers: dict[int, list[int]], tp: int,
    bytes_of: Callable[[OpFormats], float], ep: int = 1, etp: int | None = None, extra: dict[int, float] | None = None,
) -> float | None:
    """Bytes per parameter of the stage's weights: ``bytes_of`` the run's formats for every parameter a device
    holds (its ops as sharded over ep, ``extra`` per layer: the tied embedding's copy, in the word embedding's
    format), corrected op by op where an op's resolved formats differ (``weights_by_op``, bf16 edge and
    vocabulary layers); None when none can differ, so the caller's uniform figure stands."""
    if not (formats.weights_by_op or formats.bf16_layers):
        return None
    uniform = bytes_of(formats)
    word = tied_word_embedding(workload) if extra else None  # the copy is the word embedding's, in its format
    copy = bytes_of(formats.for_op(word.name)) - uniform if word is not None else 0.0
    held = differ = 0.0
    for idx in chunk_layers.values():
        for i, ops in zip(idx, sharded_layer_ops(workload, idx, ep, 1.0, tp, etp), strict=True):
            for op in ops:
                n = params_on_device([op], tp)
                held += n
                differ += n * (bytes_of(formats.for_op(op.name)) - uniform)
            held += (extra or {}).get(i, 0.0)
            differ += (extra or {}).get(i, 0.0) * copy
    return uniform + differ / held if held > 0 else uniform


def stage_per_param(
    per_param: StateBytes, formats: OpFormats, workload: WorkloadGraph, chunk_layers: dict[int, list[int]], tp: int,
    held: Callable[[OpFormats], float] | None = None, ep: int = 1, etp: int | None = None,
    extra: dict[int, float] | None = None,
) -> StateBytes:
    """Model-state bytes per parameter of one stage: with ``mapping.formats.weights_by_op`` or bf16 edge layers
    the weights' bytes are the stage's own mean (each op's weights in its format, ``held``: with the bf16 copy
    of an fp8 training run's weights, ``perf.memory.held_weight_bytes``), so weights memory is exact."""
    mean = stage_mean_bytes(formats, workload, chunk_layers, tp, held or (lambda f: f.weight_bytes), ep, etp, extra)
    return per_param if mean is None else replace(per_param, weights=mean)


def run_formats(project: Project, workload: WorkloadGraph) -> OpFormats:
    """Each tensor kind's format for a run of ``project`` (``perf.formats.resolve_formats``): the mapping's, and in
    fp8 training the vocabulary's layers (``vocab_layers``) and the chosen edge layers in bf16. One place, read by
    the plan, the search and the split view."""
    m = project.mapping
    return resolve_formats(project.run.dtype, m.formats, m.fidelity, block_names(workload),
                           project.run.mode is Mode.train, vocab_layers(workload))
