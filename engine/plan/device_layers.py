"""What one device holds of its stage's layers: their ops with the routed experts sharded, each layer's
parameters, the ZeRO-3/FSDP working set, and the model-state bytes per parameter of the stage.

Split from ``plan.plan``: these size a stage from its layers and know nothing of stages, collectives or
time, so ``build_plan`` (and the tests that check its sharding) take them from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tilewright.engine.ir.ops import Op
from tilewright.engine.perf.formats import OpFormats, mean_weight_bytes
from tilewright.engine.perf.memory import StateBytes, params_on_device
from tilewright.engine.plan.experts import shard_experts
from tilewright.engine.plan.sharding import ShardComm
from tilewright.engine.workloads.graph import WorkloadGraph


def block_names(workload: WorkloadGraph) -> list[str]:
    """The names of the workload's transformer layers in order ("block0", …): what ``mapping.formats``'
    bf16 edge layers count (``perf.formats.edge_layers``)."""
    return [workload.layers[i].name for i in workload.block_layers]


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
    holds (its ops as sharded over ep, ``extra`` per layer: the tied embedding's copy), corrected op by op
    where an op's resolved formats differ (``weights_by_op``, bf16 edge layers); None when none can differ, so
    the caller's uniform figure stands."""
    if not (formats.weights_by_op or formats.bf16_layers):
        return None
    uniform = bytes_of(formats)
    held = differ = 0.0
    for idx in chunk_layers.values():
        for i, ops in zip(idx, sharded_layer_ops(workload, idx, ep, 1.0, tp, etp), strict=True):
            for op in ops:
                n = params_on_device([op], tp)
                held += n
                differ += n * (bytes_of(formats.for_op(op.name)) - uniform)
            held += (extra or {}).get(i, 0.0)
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
