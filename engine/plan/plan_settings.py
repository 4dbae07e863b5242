"""The plan-wide figures ``build_plan`` resolves once from the project, before it builds any stage.

Tensor formats, the degrees that apply to this run (context parallelism in training only),
each stage's device groups, the layers of each virtual stage, the model state per parameter, the tied
embedding and the training loop's logging flags. Every stage is built from the same values
(``plan.stage_build``), so they are resolved here, in one place, rather than recomputed per stage.

Split from ``plan.plan``; the rules are the plan's, unchanged (the search's estimator reads the same ones
per candidate: ``search.op_settings``, ``search.parallel.estimate``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.common import dtype_bytes
from tilewright.engine.ir.mapping import Schedule
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.formats import OpFormats
from tilewright.engine.perf.memory import StateBytes, bytes_per_param, fp8_param_copy
from tilewright.engine.plan.context import flash_fused
from tilewright.engine.plan.device_layers import edge_weight_bytes, run_formats
from tilewright.engine.plan.experts import expert_dp, expert_tp_of, experts_apart
from tilewright.engine.plan.op_memo import OpTimes
from tilewright.engine.plan.passes import fused_edges
from tilewright.engine.plan.placement import stage_groups, virtual_stage_layers
from tilewright.engine.plan.routing_imbalance import resolved_imbalance
from tilewright.engine.plan.served_experts import served_ep
from tilewright.engine.plan.tied import TiedEmbedding, tied_embedding
from tilewright.engine.plan.train_logging import TrainLogging
from tilewright.engine.workloads.graph import WorkloadGraph


@dataclass
class PlanSettings:
    """What every stage of one plan is built from (``of`` resolves it from the project)."""

    project: Project
    hw: HardwareGraph
    workload: WorkloadGraph
    blocks: list[int]  # the workload's transformer blocks (``WorkloadGraph.block_layers``)
    formats: OpFormats
    elem: int  # bytes per activation element
    v: int  # model chunks per stage (interleaved schedule), else 1
    cp: int  # context parallelism, training only
    groups: list[list[list[int]]]  # per stage, per dp · cp replica: the tensor group's device indices
    mb: float  # samples' worth of tokens one device runs per micro-batch
    fusion: frozenset[tuple[str, str]]  # producer → consumer edges kept on chip (``plan.passes.fused_edges``)
    ep: int  # expert parallelism (a served pass's too: ``plan.served_experts``)
    etp: int  # the routed experts' tensor-parallel degree
    imbalance: float  # busiest ep rank's routed load over the mean (``plan.routing_imbalance``)
    shard_dp: int  # the replicas ZeRO shards the dense weights' state over
    edp: int  # the routed experts' expert-data-parallel group
    apart: bool  # the experts have a layout of their own
    per_virtual: list[list[int]]  # the layers of each virtual stage
    state_per_param: StateBytes
    tied: TiedEmbedding | None
    micro_batches: int
    log: TrainLogging
    edge_bytes: dict[int, float]  # the bf16 edge layers' weight bytes per parameter
    # the op costs every stage's passes share (``plan.op_memo``): a stage's blocks, and the stages, repeat one shape
    op_times: OpTimes = field(default_factory=OpTimes)

    @classmethod
    def of(cls, project: Project, hw: HardwareGraph, workload: WorkloadGraph) -> PlanSettings:
        m = project.mapping
        run = project.run
        blocks = workload.block_layers
        formats = run_formats(project, workload)
        elem = dtype_bytes(formats.activations)
        v = m.interleave if m.schedule is Schedule.interleaved else 1
        cp = m.cp if run.mode is Mode.train else 1
        groups = stage_groups(hw.devices, m if cp == 1 else m.model_copy(update={"dp": m.dp * cp}))
        mb = m.micro_batch / cp  # samples' worth of tokens one device runs per micro-batch (``plan.context``)
        chains = fused_edges(m.fusion)  # a fused attention core, and ring attention, is a flash kernel
        fusion = chains | flash_fused(map(workload.layer_ops, blocks), cp, chains)
        # expert parallelism in training and serving alike (``plan.served_experts``: data-parallel attention)
        ep = m.ep if run.mode is Mode.train else served_ep(m)
        etp = expert_tp_of(m, run.mode is Mode.train)  # MoE parallel folding (``plan.experts``)
        # ZeRO shards the dense weights' state over the dp · cp replicas: context ranks hold the same weights, and
        # Megatron-Core's distributed optimizer and its gradient buffers use the data-parallel group with context
        # parallelism (``plan.sharding``)
        shard_dp = m.dp * cp
        edp = expert_dp(m.tp, shard_dp, ep, etp)  # the MoE layer folds over the stage's dp · cp replicas too
        apart = experts_apart(ep, etp, m.tp)  # the experts' own layout: ep > 1, or expert tp below tp at ep 1
        if m.stages:
            ordered = sorted(m.stages, key=lambda s: s.stage)
            per_virtual = [list(range(s.layers[0], s.layers[1])) for s in ordered]
        else:
            extra = [li.index for li in workload.layers if li.index not in blocks]
            per_virtual = virtual_stage_layers(blocks, extra, m.pp * v, m.pipeline_layers)
        bf16_params = fp8_param_copy(formats.weights, run.mode is Mode.train, m.fp8_param_gather, m.zero)  # perf.memory
        state_per_param = bytes_per_param(formats.weight_bytes, run.master_weights_fp32, run.optimizer, run.dtype,
                                          bf16_params, m.optimizer_moments, m.grad_reduce_in_fp32, m.optimizer_master)
        return cls(
            project=project,
            hw=hw,
            workload=workload,
            blocks=blocks,
            formats=formats,
            elem=elem,
            v=v,
            cp=cp,
            groups=groups,
            mb=mb,
            fusion=fusion,
            ep=ep,
            etp=etp,
            # a served pass prices a balanced router (``plan.served_experts``)
            imbalance=resolved_imbalance(project, mb, ep, etp) if run.mode is Mode.train else 1.0,
            shard_dp=shard_dp,
            edp=edp,
            apart=apart,
            per_virtual=per_virtual,
            state_per_param=state_per_param,
            tied=tied_embedding(workload, per_virtual, m.pp, m.tp),
            micro_batches=m.micro_batches if run.mode is Mode.train else 1,
            log=TrainLogging.of(m),  # the training loop's logging flags (plan.train_logging)
            edge_bytes=edge_weight_bytes(formats, workload),  # the bf16 edge layers' weight bytes, once per plan
        )
