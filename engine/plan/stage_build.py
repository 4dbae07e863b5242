"""One pipeline stage of a plan: its passes per model chunk, and the memory and optimizer time they imply.

For each chunk the stage runs, ``build_stage`` costs the forward, backward and (with recomputation) the
re-run forward with the stage's ``PassContext`` (``plan.stage_options``), and counts what the chunk holds on
a device: stored activations per micro-batch (and of them the host's share under activation offload), the
largest layer a recomputed backward re-materialises, parameters and gradients (the routed experts' apart).
From the stage's parameters follow its model state (ZeRO shards, ``perf.memory``), its workspace and the
optimizer's seconds: the fused Adam step, the framework's step overhead (``plan.train_step``) and the
training loop's logging (``plan.train_logging``).

Split from ``plan.plan``, which assembles the stages into a ``Plan``; the costing is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.ops import Op
from tilewright.engine.ir.project import Mode
from tilewright.engine.perf.device import DeviceModel, device_capacity, device_model, issues_kernels, remote_memory
from tilewright.engine.perf.memory import (
    StateBytes,
    activation_bytes,
    expert_model_state,
    params_on_device,
    recomputed_layers,
    workspace_bytes,
)
from tilewright.engine.plan.activation_offload import offloaded_ops
from tilewright.engine.plan.device_layers import gathered_bytes, layer_params, sharded_layer_ops
from tilewright.engine.plan.experts import routed_experts
from tilewright.engine.plan.grad_hooks import param_tensors
from tilewright.engine.plan.passes import ChunkPass, backward_pass, forward_pass
from tilewright.engine.plan.plan_settings import PlanSettings
from tilewright.engine.plan.residency import StageResidency, adam_step, step_seconds
from tilewright.engine.plan.stage_options import stage_options
from tilewright.engine.plan.train_logging import TrainLogging
from tilewright.engine.plan.train_logging import step_seconds as logging_seconds
from tilewright.engine.plan.train_step import add_drains, flag_allreduce_s, step_overhead, te_holds_master


@dataclass
class StagePlan:
    """One pipeline stage as both engines read it: its devices, passes per chunk, memory and optimizer time."""

    rank: int
    groups: list[list[int]]  # per dp replica: the tensor group's device indices
    dev: DeviceModel
    chunk_layers: dict[int, list[int]]
    passes: dict[tuple[int, str], ChunkPass]
    act_bytes: dict[int, float]  # stored activations per micro-batch, per chunk
    transient_bytes: float  # one layer re-materialised during a recomputed backward
    state: StateBytes
    workspace: float
    capacity: float
    params: float
    grad_bytes: dict[int, float]  # per chunk, per device
    optimizer_s: float
    label: str = ""
    residency: StageResidency | None = None  # mapping.memory_levels resolved for this stage; None: not set
    expert_grad_bytes: dict[int, float] = field(default_factory=dict)  # per chunk: the routed experts' share
    fused_step_s: float = 0.0  # of optimizer_s, the fused Adam step's stream alone (plan.param_gather)
    # activation offload (plan.activation_offload): the layers copied to the host, and per chunk their stored
    # activations per micro-batch (of act_bytes: the host's share, the rest stays on the device)
    offload_layers: frozenset[int] = frozenset()
    offloaded_bytes: dict[int, float] = field(default_factory=dict)
    # under Megatron-Core's combined 1F1B (mapping.overlap_ep_comm): per (chunk, "F"|"B"), the pass the schedule
    # runs alone — a warmup forward, a cooldown backward (``plan.schedules``) — its all-to-alls hidden by nothing
    alone: dict[tuple[int, str], ChunkPass] = field(default_factory=dict)


class HostReductions:
    """The small all-reduces the training loop makes around the optimizer step, timed once per plan (every stage
    charges the same) and only for devices a host framework drives (``plan.train_step``)."""

    def __init__(self, hw: HardwareGraph, groups: list[list[list[int]]], log: TrainLogging) -> None:
        self.hw = hw
        self.groups = groups
        self.log = log
        self._world: list[float] = []
        self._flags: list[float] = []

    def world_s(self, dev: DeviceModel) -> float:
        """A 4-byte all-reduce over every rank (the level-1 timers' barriers, torchtitan's log-step reductions),
        timed once when any is charged."""
        if not issues_kernels(dev.compute) or not self.log.world_reductions:
            return 0.0
        if not self._world:
            self._world.append(flag_allreduce_s(self.hw, [d for g in self.groups for grp in g for d in grp]))
        return self._world[0]

    def flag_s(self, dev: DeviceModel) -> float:
        """The optimizer's flag all-reduce over the model-parallel group (one group for every stage), timed
        once and only for devices a host framework drives (``plan.train_step``)."""
        if not issues_kernels(dev.compute):
            return 0.0
        if not self._flags:
            self._flags.append(flag_allreduce_s(self.hw, [d for g in self.groups for d in g[0]]))
        return self._flags[0]


@dataclass
class BuiltStage:
    """``build_stage``'s answer: the stage, and what the plan gathers from every stage beside it."""

    stage: StagePlan
    rerun_layers: set[int]  # layers full recomputation re-runs (mapping.recompute_layers), for the hardware FLOPs
    residency_note: tuple[int, StageResidency, dict[str, float]] | None  # (rank, residency, sizes): plan.residency


def build_stage(s: PlanSettings, r: int, host: HostReductions) -> BuiltStage:
    """Stage ``r`` of the plan ``s`` describes."""
    project, hw, workload = s.project, s.hw, s.workload
    m, run = project.mapping, project.run
    mb, elem, formats, log = s.mb, s.elem, s.formats, s.log
    ep, etp, state_per_param, shard_dp = s.ep, s.etp, s.state_per_param, s.shard_dp
    first = s.groups[r][0][0]
    d = hw.devices[first]
    dev = device_model(d.compute, d.memories, remote_memory(hw, first), run.dtype)
    chunk_layers = {c: s.per_virtual[c * m.pp + r] for c in range(s.v)}
    opts = stage_options(s, r, first, dev, chunk_layers)
    ctx, per_param, tied_copy, placed = opts.ctx, opts.per_param, opts.tied_copy, opts.placed
    rerun_layers: set[int] = set()
    passes: dict[tuple[int, str], ChunkPass] = {}
    alone: dict[tuple[int, str], ChunkPass] = {}
    act: dict[int, float] = {}
    offloaded: dict[int, float] = {}
    grad: dict[int, float] = {}
    expert_grad: dict[int, float] = {}
    expert_params: dict[int, float] = {}
    all_ops: list[Op] = []
    transient = 0.0
    params = 0.0
    for c, idx in chunk_layers.items():
        layers = sharded_layer_ops(workload, idx, ep, s.imbalance, m.tp, etp)
        ops = [op for ls in layers for op in ls]
        all_ops += ops
        backward = backward_pass(layers, ctx)  # first: its delayed weight gradients join the forward's cover
        passes[(c, "F")] = forward_pass(layers, ctx, slack=backward.a2a_slack)
        passes[(c, "B")] = backward
        if ctx.ep_seconds is not None:  # the combined 1F1B's warmup and cooldown (``plan.schedules``)
            lone = replace(ctx, ep_alone=True)
            alone[(c, "F")], alone[(c, "B")] = forward_pass(layers, lone), backward_pass(layers, lone)
        rerun = recomputed_layers(layers, m.recompute, m.recompute_layers)
        rerun_layers.update(ls[0].layer for ls in rerun)
        if rerun:
            passes[(c, "R")] = forward_pass(rerun, ctx, "R")
        elif m.recompute is Recompute.selective:
            passes[(c, "R")] = forward_pass(layers, ctx, "R", only_selective=True, modules=m.recompute_modules)
        act[c] = activation_bytes(layers, mb, m.tp, m.sequence_parallel, m.recompute, elem, ctx.fused,  # type: ignore[arg-type]
                                  m.recompute_layers, m.recompute_modules, m.fused_cross_entropy, formats)
        if ctx.offload_saved:  # activation offload, even of no layer (mapping.offload_layers 0)
            offloaded[c] = activation_bytes(offloaded_ops(layers, ctx.offload_layers), mb, m.tp,  # type: ignore[arg-type]
                                            m.sequence_parallel, m.recompute, elem, ctx.fused, m.recompute_layers,
                                            m.recompute_modules, m.fused_cross_entropy, formats)
        transient = max(
            [transient]
            + [
                activation_bytes([ls], mb, m.tp, m.sequence_parallel, Recompute.none, elem, ctx.fused)  # type: ignore[arg-type]
                for ls in rerun
            ]
        )
        p = params_on_device(ops, m.tp) + sum(tied_copy.get(i, 0.0) for i in idx)
        params += p
        grad[c] = p * state_per_param.gradients
        if s.apart:
            expert_params[c] = params_on_device(routed_experts(ops), m.tp)
            expert_grad[c] = expert_params[c] * state_per_param.gradients
    if run.mode is Mode.train:  # the framework's host synchronisations (``plan.train_step``)
        add_drains(passes, m.pp, r, dev.compute, m.tp, mb, workload.tokens_per_sample, log, ctx.host_framework)
    experts = sum(expert_params.values())
    state = expert_model_state(params, experts, per_param, m.zero, shard_dp, ep, s.edp if s.apart else None)
    if run.mode is Mode.infer:
        state = StateBytes(state.weights, 0.0, 0.0)
    step = adam_step(state_per_param, m.optimizer_moments, m.optimizer_master)
    # the optimizer steps the parameters whose state this device holds (ZeRO: its shard of each group's)
    local_params = (params - experts) / shard_dp + experts / s.edp if m.zero >= 1 else params
    train = run.mode is Mode.train
    fused_s = step_seconds(dev, placed[0] if placed else None, local_params, step) if train else 0.0
    tensors = sum(param_tensors(op, workload.tokens_per_sample, False)[0] for op in all_ops) if train else 0.0
    stage = StagePlan(
        rank=r,
        groups=s.groups[r],
        dev=dev,
        chunk_layers=chunk_layers,
        passes=passes,
        alone=alone,
        act_bytes=act,
        transient_bytes=transient,
        state=state,
        workspace=workspace_bytes(all_ops, mb, m.tp, m.sequence_parallel, elem,  # type: ignore[arg-type]
                                  m.fused_cross_entropy, ctx.fused)
        + gathered_bytes(
            ctx.shard,
            [p for idx in chunk_layers.values()
             for p in layer_params(workload, idx, m.tp, ep, tied_copy, etp)],
        ),
        capacity=device_capacity(hw, first, dev),
        params=params,
        grad_bytes=grad,
        expert_grad_bytes=expert_grad,
        optimizer_s=fused_s
        + step_overhead(dev, placed[0] if placed else None, local_params, step.mixed,
                        run.dtype.value == "fp16", host.flag_s(dev), shard_dp,
                        full_iteration="full_iteration" in (m.cuda_graph_scope or ()),
                        te_master=te_holds_master(m.optimizer_moments, m.optimizer_master, formats.weights,
                                                  m.formats.fp8_scaling), log=log,
                        tensors=tensors, shard=shard_dp if m.zero >= 1 else 1)
        + logging_seconds(dev, log, tensors=tensors,
                          params=params, weight_bytes=formats.weight_bytes, bf16=run.dtype.value == "bf16",
                          model_reduce_s=host.flag_s(dev), world_reduce_s=host.world_s(dev),
                          zero_shard=shard_dp if m.zero >= 1 else 1, grad_bytes=state_per_param.gradients,
                          dp=shard_dp, overlap_grad_reduce=m.overlap_grad_reduce)
        if run.mode is Mode.train
        else 0.0,
        label=f"stage {r}",
        residency=placed[0] if placed else None,
        fused_step_s=fused_s,
        offload_layers=ctx.offload_layers,
        offloaded_bytes=offloaded,
    )
    return BuiltStage(stage, rerun_layers, (r, *placed) if placed is not None else None)
