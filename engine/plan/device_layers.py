"""What one device holds of its stage's layers: their ops with the routed experts sharded, each layer's
parameters, the ZeRO-3/FSDP working set, and the model-state bytes per parameter of the stage.

Split from ``plan.plan``: these size a stage from its layers and know nothing of stages, collectives or
time, so ``build_plan`` (and the tests that check its sharding) take them from here.
"""

from __future__ import annotations

from dataclasses import replace

from tilewright.engine.ir.ops import Op
from tilewright.engine.perf.formats import OpFormats, mean_weight_bytes
from tilewright.engine.perf.memory import StateBytes, params_on_device
from tilewright.engine.plan.experts import shard_experts
from tilewright.engine.plan.sharding import ShardComm
from tilewright.engine.workloads.graph import WorkloadGraph


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


def stage_per_param(
    per_param: StateBytes, formats: OpFormats, workload: WorkloadGraph, chunk_layers: dict[int, list[int]], tp: int
) -> StateBytes:
    """Model-state bytes per parameter of one stage: with ``mapping.formats.weights_by_op`` the weights'
    bytes are the stage's own mean (each op's weights in its format), so weights memory is exact."""
    if not formats.weights_by_op:
        return per_param
    ops = [op for idx in chunk_layers.values() for ls in sharded_layer_ops(workload, idx) for op in ls]
    held = ((op.name, params_on_device([op], tp)) for op in ops)
    return replace(per_param, weights=mean_weight_bytes(formats, held))
