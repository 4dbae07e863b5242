"""Compile a project into a plan both engines execute: stages, their devices, pass costs, transfers, memory.

The plan holds everything that does not depend on *when* things happen; the event engine adds time
and contention, the analytic engine closed-form timing. Sharing the plan is what makes the two agree.

``build_plan`` resolves the plan-wide figures once (``plan.plan_settings``), builds each stage
(``plan.stage_build``, with its pass context from ``plan.stage_options``), then the pipeline sends and the
notes (``plan.plan_notes``). ``Plan`` answers the engines' questions about collectives and DRAM streams;
those across a stage's data-parallel replicas after the backward are ``plan.replica_sync``'s, which it
inherits.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.hardware.interleave import stream_usage
from tilewright.engine.ir.mapping import Schedule
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.collectives import Collective, collective, point_to_point
from tilewright.engine.perf.formats import OpFormats, mean_weight_bytes
from tilewright.engine.plan.experts import ETP_PREFIX, expert_tp_of, is_ep, is_etp, routing_for
from tilewright.engine.plan.framework_host import host_framework
from tilewright.engine.plan.group_comm import (
    cp_group_collective,
    dp_group_collective,
    edp_group_collective,
    ep_group_collective,
    etp_group_collective,
)
from tilewright.engine.plan.hardware_flops import run_flops
from tilewright.engine.plan.memo import memo_method
from tilewright.engine.plan.pipeline_p2p import PipelineP2P, add_receive_gathers, pipeline_p2p
from tilewright.engine.plan.plan_notes import plan_notes
from tilewright.engine.plan.plan_settings import PlanSettings
from tilewright.engine.plan.replica_sync import ReplicaSync
from tilewright.engine.plan.report import split_rows
from tilewright.engine.plan.residency import StageResidency
from tilewright.engine.plan.served_experts import served_ep
from tilewright.engine.plan.sharding import dp_kind, is_dp, is_edp, spans_replicas
from tilewright.engine.plan.stage_build import BuiltStage, HostReductions, StagePlan, build_stage
from tilewright.engine.plan.tensor_axes import axis_collective, is_axis
from tilewright.engine.plan.tied import TiedEmbedding
from tilewright.engine.workloads.graph import WorkloadGraph


@dataclass(eq=False)  # hashed by identity, so its methods can cache per plan
class Plan(ReplicaSync):
    project: Project
    hw: HardwareGraph
    workload: WorkloadGraph
    pp: int
    chunks: int
    micro_batches: int
    micro_batch: int
    tp: int
    dp: int
    schedule: Schedule
    elem_bytes: int
    stages: list[StagePlan]
    p2p_bytes: dict[int, float]  # per member, sent from virtual stage vs to vs + 1
    model_flops: float
    hardware_flops: float
    notes: list[str] = field(default_factory=list)
    formats: OpFormats | None = None  # per tensor kind; None: every tensor elem_bytes per element
    tied: TiedEmbedding | None = None  # the word embedding's copy on the last stage (``plan.tied``)
    tied_bytes: float = 0.0  # per device, the embedding group's gradient all-reduce (training; 0: none)
    pipeline: PipelineP2P = field(default_factory=PipelineP2P)  # blocking sends, gathered receives (plan.pipeline_p2p)

    @property
    def weight_bytes(self) -> float:
        """Bytes per weight element (``mapping.formats.weights``, else the run's data type); with per-op
        formats (``weights_by_op``) the model's mean, each op's weights in its own format."""
        if self.formats is None:
            return self.elem_bytes
        return mean_weight_bytes(self.formats, ((op.name, op.params) for op in self.workload.ops()))

    def spatial_splits(self) -> list[dict[str, object]]:
        """On grid devices: how each forward matmul of a micro-batch was split over the cores, per stage."""
        out = []
        for st in self.stages:
            forward: Counter = Counter()
            for (_c, kind), ps in st.passes.items():
                if kind == "F":
                    forward.update(ps.dataflows)
            if st.dev.compute.grid is not None:
                out += split_rows(f"stage {st.rank}, forward", forward)
        return out

    def stage_of(self, virtual_stage: int) -> tuple[int, int]:
        """(rank, chunk) of a virtual stage."""
        return virtual_stage % self.pp, virtual_stage // self.pp

    @property
    def virtual_stages(self) -> int:
        return self.pp * self.chunks

    @property
    def combined_1f1b(self) -> bool:
        """Megatron-Core's combined 1F1B schedule (the overlapped expert all-to-all): its warmup forwards and
        cooldown backwards run alone (``plan.schedules``, ``StagePlan.alone``)."""
        return any(st.alone for st in self.stages)

    @memo_method
    def tp_collective(self, rank: int, replica: int, kind: str, nbytes: float) -> Collective:
        """A segment's collective: on the replica's tensor group, or (kind ``dp:…``, ``plan.sharding``) on
        the stage's data-parallel groups, every tensor rank at once (``edp:…``: its expert-data-parallel
        groups), or (kind ``cp:…``, ``plan.context``) on its context-parallel rings."""
        if is_dp(kind):
            return dp_group_collective(self.hw, self.stages[rank].groups, dp_kind(kind), nbytes)
        if is_edp(kind):  # routed experts: over the replicas holding the same experts (``plan.sharding``)
            return edp_group_collective(self.hw, self.stages[rank].groups, self.ep, dp_kind(kind), nbytes,
                                        self.expert_tp)
        if is_ep(kind):
            return ep_group_collective(self.hw, self.stages[rank].groups, self.project.mapping.ep, nbytes,
                                       routing_for(self.project), self.expert_tp)
        if is_etp(kind):  # a routed expert's gather or reduce-scatter over its expert-tensor groups
            return etp_group_collective(self.hw, self.stages[rank].groups[replica], self.expert_tp,
                                        kind.removeprefix(ETP_PREFIX), nbytes)
        if spans_replicas(kind):
            return cp_group_collective(
                self.hw, self.stages[rank].groups, self.project.mapping.cp, dp_kind(kind), nbytes
            )
        if is_axis(kind):  # 2-D tensor parallelism (plan.tensor_axes)
            axes = self.project.mapping.tp_axes
            return axis_collective(self.hw, self.stages[rank].groups[replica], axes, kind, nbytes)  # type: ignore[arg-type]
        return collective(self.hw, kind, self.stages[rank].groups[replica], nbytes)  # type: ignore[arg-type]

    @memo_method
    def tp_time(self, rank: int, replica: int, kind: str, nbytes: float) -> float:
        """Uncontended duration of a tensor-parallel collective."""
        return self.tp_collective(rank, replica, kind, nbytes).time(self.hw)

    @memo_method
    def p2p(self, virtual_stage: int, replica: int, backward: bool) -> Collective:
        r0, _ = self.stage_of(virtual_stage)
        r1, _ = self.stage_of(virtual_stage + 1)
        a, b = self.stages[r0].groups[replica], self.stages[r1].groups[replica]
        pairs = list(zip(b, a, strict=True)) if backward else list(zip(a, b, strict=True))
        return point_to_point(self.hw, pairs, self.p2p_bytes[virtual_stage])

    @memo_method
    def dram_usage(self, rank: int, replica: int) -> dict[int, float]:
        """Links crossed when every member of a tensor group streams one byte from its remote DRAM: spread
        over all the memory's ports (interleaved, the default) or from each member's nearest port."""
        st = self.stages[rank]
        mem = st.dev.remote_dram
        return stream_usage(self.hw, st.groups[replica], mem) if mem is not None else {}

    @memo_method
    def dram_usage_replicas(self, rank: int) -> dict[int, float]:
        """Every data-parallel replica's tensor group streaming at once (they run in lockstep): the usage of
        an event-engine unit that stands for all of them when links are shared (contention on)."""
        st = self.stages[rank]
        if len(st.groups) == 1:
            return self.dram_usage(rank, 0)
        mem = st.dev.remote_dram
        return stream_usage(self.hw, [d for g in st.groups for d in g], mem) if mem is not None else {}

    @memo_method
    def dram_usage_member(self, rank: int, replica: int, member: int) -> dict[int, float]:
        """One device's DRAM stream (per-device simulation)."""
        st = self.stages[rank]
        mem = st.dev.remote_dram
        return stream_usage(self.hw, [st.groups[replica][member]], mem) if mem is not None else {}

    @memo_method
    def p2p_member(self, virtual_stage: int, replica: int, backward: bool, member: int) -> Collective:
        """One device's share of a pipeline send: member i of one stage's group to member i of the next."""
        r0, _ = self.stage_of(virtual_stage)
        r1, _ = self.stage_of(virtual_stage + 1)
        a, b = self.stages[r0].groups[replica][member], self.stages[r1].groups[replica][member]
        return point_to_point(self.hw, [(b, a)] if backward else [(a, b)], self.p2p_bytes[virtual_stage])

    @memo_method
    def dram_seconds_per_byte(self, rank: int) -> float:
        """Seconds per streamed byte (per member) on the tightest link of the tensor group's DRAM streams —
        its ports' channels among them, so a pass never beats its own DRAM bytes over its ports' bandwidth.
        Uncontended, as every transfer the analytic engine times: other replicas' and other stages' streams
        on shared ports bound the whole iteration instead (``timing.dram_floor``), and share the links in
        the event engine with contention on."""
        usage = self.dram_usage(rank, 0)
        return max((u / self.hw.links[lk].bandwidth for lk, u in usage.items()), default=0.0)

    def segment_seconds(self, rank: int, seg) -> float:
        """A segment's uncontended time: its roofline, or its DRAM stream if that is longer."""
        if seg.dram_bytes <= 0:
            return seg.busy_s
        return max(seg.busy_s, seg.dram_bytes * self.dram_seconds_per_byte(rank))

    @property
    def ep(self) -> int:
        """Expert parallelism, in training and in a served pass alike (``plan.served_experts``)."""
        m = self.project.mapping
        return m.ep if self.project.run.mode is Mode.train else served_ep(m)

    @property
    def expert_tp(self) -> int:
        """The routed experts' tensor-parallel degree (``plan.experts.expert_tp_of``)."""
        return expert_tp_of(self.project.mapping, self.project.run.mode is Mode.train)


def build_plan(project: Project, hw: HardwareGraph, workload: WorkloadGraph) -> Plan:
    """The plan of ``project`` on ``hw``: HyPar's (``plan.hypar_plan``) when layer parallelism partitions a
    training run, else one pipeline of ``mapping.pp`` stages."""
    m = project.mapping
    run = project.run
    if m.layer_parallelism and run.mode is Mode.train:
        from tilewright.engine.plan.hypar_plan import build_hypar_plan  # imports this module

        return build_hypar_plan(project, hw, workload)
    s = PlanSettings.of(project, hw, workload)
    mb, elem, v, cp = s.mb, s.elem, s.v, s.cp
    host = HostReductions(hw, s.groups, s.log)  # the loop's small all-reduces, timed once for every stage
    built: list[BuiltStage] = [build_stage(s, r, host) for r in range(m.pp)]
    stages: list[StagePlan] = [b.stage for b in built]
    rerun_layers: set[int] = set().union(*(b.rerun_layers for b in built))  # layers full recomputation re-runs
    residencies: list[tuple[int, StageResidency, dict[str, float]]] = [
        b.residency_note for b in built if b.residency_note is not None
    ]
    p2p: dict[int, float] = {}
    for vs in range(m.pp * v - 1):
        last_ops = workload.layer_ops(s.per_virtual[vs][-1])
        out = last_ops[-1].out_elems if last_ops else 0.0
        p2p[vs] = out * mb * elem / m.tp  # Megatron's scatter/gather: each rank sends 1/tp
    pipeline = pipeline_p2p(m.pipeline_p2p, m.recompute, stages[0].dev.compute, run.mode is Mode.train, m.tp,
                            m.sequence_parallel)
    if pipeline.gather and m.pp > 1:  # each receive all-gathered over the tensor group (plan.pipeline_p2p)
        whole = {vs: nbytes * m.tp for vs, nbytes in p2p.items()}
        for st in stages:
            add_receive_gathers(st.passes, m.pp, st.rank, st.dev.compute, whole)
    framework = host_framework(m.host_framework, stages[0].dev.compute, run.mode is Mode.train)  # as the passes
    model_flops, hardware_flops = run_flops(workload, project, s.fusion, rerun_layers, framework)
    notes = plan_notes(s, stages, pipeline, residencies)
    tied = s.tied
    return Plan(
        formats=s.formats,
        notes=notes,
        project=project,
        hw=hw,
        workload=workload,
        pp=m.pp,
        chunks=v,
        micro_batches=s.micro_batches,
        micro_batch=m.micro_batch,
        tp=m.tp,
        dp=m.dp * cp,  # context ranks are replicas of the stage's tensor group too (``plan.context``)
        schedule=m.schedule,
        elem_bytes=elem,
        stages=stages,
        p2p_bytes=p2p,
        model_flops=model_flops,
        hardware_flops=hardware_flops,
        tied=tied,
        pipeline=pipeline,
        tied_bytes=tied.allreduce_bytes(s.state_per_param.gradients, m.zero, s.shard_dp)
        if tied is not None and run.mode is Mode.train
        else 0.0,
    )
