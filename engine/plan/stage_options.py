"""How one pipeline stage's passes are costed: its ``PassContext`` and its memory residency.

A pass is costed op by op with a ``PassContext`` (``plan.passes``); which options it carries depends on the
stage's devices and groups, not only on the mapping: the tensor-parallel overlaps time their collectives on
the stage's own tensor group (``plan.tp_overlap``, ``plan.sp_regather``, ``plan.dgrad_overlap``), ZeRO-3 and
context parallelism on its replicas (``plan.sharding``, ``plan.context``), the experts' all-to-alls on its
expert groups (``plan.experts``), and ``mapping.memory_levels`` is resolved from the stage's own sizes
(``plan.residency``), which in turn decides whether its activations are offloaded
(``plan.activation_offload``).

Split from ``plan.plan`` so that this resolution sits in one place apart from building the passes
(``plan.stage_build``); the rules are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.ir.project import Mode
from tilewright.engine.perf.device import DeviceModel
from tilewright.engine.perf.memory import StateBytes, held_weight_bytes, param_gather_bytes
from tilewright.engine.plan.activation_offload import offloaded_layers
from tilewright.engine.plan.device_layers import sharded_layer_ops, stage_per_param
from tilewright.engine.plan.dgrad_overlap import active as dgrad_active
from tilewright.engine.plan.experts import routing_for
from tilewright.engine.plan.framework_host import SDPA_FRAMEWORKS, attention_device, host_framework
from tilewright.engine.plan.grad_hooks import grad_hooks
from tilewright.engine.plan.group_comm import context_comm, ep_seconds, shard_comm, tp_seconds
from tilewright.engine.plan.passes import PassContext
from tilewright.engine.plan.plan_settings import PlanSettings
from tilewright.engine.plan.residency import StageResidency, home_level, offloaded_activations, stage_residency
from tilewright.engine.plan.sharding import offloaded_shards


@dataclass
class StageOptions:
    """One stage's pass context and what resolving it found on the way."""

    ctx: PassContext
    per_param: StateBytes  # the stage's model-state bytes per parameter (``device_layers.stage_per_param``)
    tied_copy: dict[int, float]  # the tied word embedding's copy on this stage: {layer: parameters} (``plan.tied``)
    placed: tuple[StageResidency, dict[str, float]] | None  # ``memory_levels`` and the sizes it was resolved from


def stage_options(
    s: PlanSettings, r: int, first: int, dev: DeviceModel, chunk_layers: dict[int, list[int]]
) -> StageOptions:
    """The ``PassContext`` of stage ``r`` (``first``: its first device, ``dev`` that device's model), with its
    residency resolved from the layers of ``chunk_layers``."""
    project, hw, workload = s.project, s.hw, s.workload
    m, run = project.mapping, project.run
    groups, formats, ep, etp = s.groups, s.formats, s.ep, s.etp
    d = hw.devices[first]
    ctx = PassContext(dev, s.mb, m.tp, m.sequence_parallel, s.elem, s.fusion, formats, m.spatial)
    ctx.op_times = s.op_times  # one memo of op costs for the plan (``plan.op_memo``)
    ctx.rows_per_sample = workload.tokens_per_sample
    ctx.fused_loss = m.fused_cross_entropy
    ctx.cuda_graph_scope = tuple(m.cuda_graph_scope or ())  # plan.cuda_graphs
    ctx.moe_router_fusion = m.moe_router_fusion  # plan.moe_host
    ctx.grad_hooks = grad_hooks(project, formats.weight_bytes)  # plan.grad_hooks
    # whose Python issues the kernels (plan.framework_host)
    ctx.host_framework = host_framework(m.host_framework, d.compute, run.mode is Mode.train)
    ctx.dev = attention_device(dev, ctx.host_framework)  # its attention kernel (plan.framework_host)
    if m.overlap_tp_comm and m.tp > 1 and m.tp_axes is None:  # plan.tp_overlap
        ctx.tp_seconds = tp_seconds(hw, groups[r][0])
        ctx.tp_ring_reduce_scatter = m.tp_overlap_reduce_scatter == "ring_exchange"
    if m.sequence_parallel and m.tp > 1 and m.tp_axes is None:  # the backward's re-gather (plan.sp_regather)
        ctx.regather_seconds = ctx.tp_seconds or tp_seconds(hw, groups[r][0])
    if dgrad_active(m.overlap_dgrad_comm, m.recompute, d.compute, run.mode is Mode.train, m.tp,
                    m.tp_axes is not None, m.overlap_tp_comm):  # the backward's async dgrad (plan.dgrad_overlap)
        ctx.dgrad_overlap = True
        ctx.dgrad_seconds = ctx.regather_seconds or tp_seconds(hw, groups[r][0])
    ctx.tp_axes = m.tp_axes  # 2-D tensor parallelism (plan.tensor_axes)
    tied = s.tied
    tied_copy = {tied.layer: tied.params} if tied is not None and r == tied.last else {}  # plan.tied
    held = held_weight_bytes(run.mode is Mode.train, m.fp8_param_gather, m.zero)  # weights_by_op, bf16 layers
    per_param = stage_per_param(s.state_per_param, formats, workload, chunk_layers, m.tp, held, ep, etp, tied_copy)
    # ZeRO-3 gathers the model's parameters: bf16 ones under fp8 without fp8_param_gather, as the post-step
    # gather does (``param_gather_bytes``), and the bf16 edge layers at 2 B
    gathered = param_gather_bytes(formats.weight_bytes, formats.weights, run.mode is Mode.train,
                                  m.fp8_param_gather, m.zero)
    ctx.shard = shard_comm(project, hw, groups[r], gathered, s.state_per_param.gradients, tied_copy, s.edge_bytes)
    # PyTorch's context_parallel under the plain-PyTorch frameworks (plan.torch_ring), else Transformer Engine's
    ctx.context = context_comm(hw, groups[r], s.cp, ctx.host_framework in SDPA_FRAMEWORKS)
    ctx.expert_parallel = ep
    ctx.expert_tp = etp
    if ep > 1 and m.overlap_ep_comm:
        ctx.ep_seconds = ep_seconds(hw, groups[r], ep, routing_for(project), etp)
        ctx.delay_wgrad = m.delay_wgrad_compute  # weight gradients hide the backward's too (plan.passes)
    placed = stage_residency(
        project,
        hw,
        first,
        dev,
        [ls for idx in chunk_layers.values()
         for ls in sharded_layer_ops(workload, idx, ep, s.imbalance, m.tp, etp)],
        per_param,
        s.elem,
        s.mb,
        s.shard_dp,
        formats,
    )
    if placed is not None:
        ctx.residency = placed[0].residency
        if run.mode is Mode.train and ctx.residency.at("activations") == "host":
            ctx.offload_saved, ctx.residency = offloaded_activations(ctx.residency)
            ctx.offload_layers = offloaded_layers(chunk_layers.values(), s.blocks, m.offload_layers)
        if ctx.shard is not None:  # offloaded sharded state crosses the host link as its shard (plan.sharding)
            ctx.shard, ctx.residency = offloaded_shards(ctx.shard, ctx.residency, home_level(dev))
    return StageOptions(ctx, per_param, tied_copy, placed)
