"""Compile a project into a plan both engines execute: stages, their devices, pass costs, transfers, memory.

The plan holds everything that does not depend on *when* things happen; the event engine adds time
and contention, the analytic engine closed-form timing. Sharing the plan is what makes the two agree.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.hardware.interleave import stream_usage
from tilewright.engine.ir.common import dtype_bytes
from tilewright.engine.ir.mapping import Recompute, Schedule
from tilewright.engine.ir.ops import Op
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.collectives import Collective, collective, point_to_point
from tilewright.engine.perf.device import DeviceModel, device_capacity, device_model, issues_kernels, remote_memory
from tilewright.engine.perf.formats import OpFormats, mean_weight_bytes, per_op_notes, resolve_formats
from tilewright.engine.perf.memory import (
    StateBytes,
    activation_bytes,
    bytes_per_param,
    expert_model_state,
    fp8_param_copy,
    gathered_weight_bytes,
    held_weight_bytes,
    param_gather_bytes,
    params_on_device,
    recomputed_layers,
    workspace_bytes,
)
from tilewright.engine.plan.activation_offload import notes as offload_notes
from tilewright.engine.plan.activation_offload import offloaded_layers, offloaded_ops
from tilewright.engine.plan.context import ring_fused
from tilewright.engine.plan.device_layers import (
    block_names,
    edge_weight_bytes,
    gathered_bytes,
    layer_params,
    sharded_layer_ops,
    stage_mean_bytes,
    stage_per_param,
)
from tilewright.engine.plan.dgrad_overlap import active as dgrad_active
from tilewright.engine.plan.dgrad_overlap import notes as dgrad_notes
from tilewright.engine.plan.dgrad_overlap import overlaps as dgrad_overlaps
from tilewright.engine.plan.experts import (
    ETP_PREFIX,
    expert_dp,
    expert_tp_of,
    experts_apart,
    is_ep,
    is_etp,
    routed_experts,
    routing_for,
)
from tilewright.engine.plan.grad_hooks import grad_hooks, param_tensors
from tilewright.engine.plan.group_comm import (
    context_comm,
    cp_group_collective,
    dp_group_collective,
    edp_group_collective,
    embedding_group_collective,
    ep_group_collective,
    ep_seconds,
    etp_group_collective,
    scaled,
    shard_comm,
    tp_seconds,
)
from tilewright.engine.plan.hardware_flops import run_flops
from tilewright.engine.plan.memo import memo_method
from tilewright.engine.plan.passes import ChunkPass, PassContext, backward_pass, forward_pass, fused_edges
from tilewright.engine.plan.pipeline_p2p import PipelineP2P, add_receive_gathers, pipeline_p2p
from tilewright.engine.plan.pipeline_p2p import notes as p2p_notes
from tilewright.engine.plan.placement import stage_groups, virtual_stage_layers
from tilewright.engine.plan.report import format_notes, split_rows
from tilewright.engine.plan.residency import (
    StageResidency,
    adam_step,
    offloaded_activations,
    stage_residency,
    step_seconds,
)
from tilewright.engine.plan.residency import notes as residency_notes
from tilewright.engine.plan.sharding import dp_kind, is_dp, is_edp, spans_replicas
from tilewright.engine.plan.tensor_axes import axis_collective, is_axis
from tilewright.engine.plan.tensor_axes import notes as tensor_axes_notes
from tilewright.engine.plan.tied import TiedEmbedding, tied_embedding
from tilewright.engine.plan.train_logging import TrainLogging
from tilewright.engine.plan.train_logging import step_seconds as logging_seconds
from tilewright.engine.plan.train_step import TOKEN_BYTES, add_drains, flag_allreduce_s, step_overhead, te_holds_master
from tilewright.engine.workloads.graph import WorkloadGraph


@dataclass
class StagePlan:
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


@dataclass(eq=False)  # hashed by identity, so its methods can cache per plan
class Plan:
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

    @memo_method
    def dp_collective(self, rank: int, chunk: int) -> Collective:
        """Gradient reduction of one chunk across replicas, all tensor ranks at once (one ring each)."""
        st = self.stages[rank]
        if self.replicas <= 1 or self.project.mapping.zero >= 2:  # stage ≥ 2 reduces in every backward pass
            return Collective("all-reduce", "none", ())
        kind = "reduce-scatter" if self.project.mapping.zero >= 1 else "all-reduce"
        experts = st.expert_grad_bytes.get(chunk, 0.0)
        return self._replica_collective(rank, kind, st.grad_bytes[chunk] - experts, experts)

    def _replica_collective(self, rank: int, kind: str, dense_bytes: float, expert_bytes: float) -> Collective:
        """``kind`` over the stage's replicas, every tensor rank at once: the dense weights' bytes over all
        of them, then (expert parallelism) the routed experts' bytes over the replicas holding the same
        experts, ``expert_groups`` (Megatron-Core's expert-data-parallel group)."""
        st = self.stages[rank]
        dense = dp_group_collective(self.hw, st.groups, kind, dense_bytes)
        if expert_bytes <= 0:
            return dense
        expert = edp_group_collective(self.hw, st.groups, self.ep, kind, expert_bytes, self.expert_tp)
        same = dense.payload_fraction == expert.payload_fraction  # else the phases differ: data = wire bytes
        return Collective(dense.kind, dense.algorithm, dense.phases + expert.phases,
                          dense.payload_fraction if same else 1.0)

    @property
    def ep(self) -> int:
        return self.project.mapping.ep if self.project.run.mode is Mode.train else 1

    @property
    def expert_tp(self) -> int:
        """The routed experts' tensor-parallel degree (``plan.experts.expert_tp_of``)."""
        return expert_tp_of(self.project.mapping, self.project.run.mode is Mode.train)

    @property
    def replicas(self) -> int:
        """The largest group a gradient is reduced over: dp, or the routed experts' expert-data-parallel
        group when expert tensor parallelism folds it over tensor ranks too (``experts.expert_dp``)."""
        if not experts_apart(self.ep, self.expert_tp, self.tp):
            return self.dp
        return max(self.dp, expert_dp(self.tp, self.dp, self.ep, self.expert_tp))

    @memo_method
    def dp_buckets(self, rank: int, chunk: int) -> tuple[Collective, Collective]:
        """With overlap: (the reduction of all but the chunk's first layer, launched as its last backward
        starts, as the gradients of later layers become ready; the first layer's bucket, launched when
        that backward ends). Without overlap: (nothing, the whole reduction after the backward)."""
        whole = self.dp_collective(rank, chunk)
        layers = len(self.stages[rank].chunk_layers[chunk])
        if not self.project.mapping.overlap_grad_reduce or layers < 2 or not whole.phases:
            return Collective(whole.kind, "none", ()), whole
        early = (layers - 1) / layers
        return scaled(whole, early), scaled(whole, 1 - early)

    @memo_method
    def zero_gather(self, rank: int) -> Collective:
        """ZeRO 1 and 2: all-gather the updated weights after the sharded optimizer step (stage 3 keeps them
        sharded: each layer gathers its weights when it runs, ``plan.sharding``)."""
        st = self.stages[rank]
        if self.replicas <= 1 or self.project.mapping.zero < 1 or self.project.mapping.zero >= 3:
            return Collective("all-gather", "none", ())
        experts = sum(st.expert_grad_bytes.values()) / self.stage_grad_per_param(rank)
        per = self.gather_bytes_per_param(rank)
        return self._replica_collective(rank, "all-gather", (st.params - experts) * per, experts * per)

    @memo_method
    def gather_bytes_per_param(self, rank: int) -> float:
        """Bytes per parameter stage ``rank``'s ``zero_gather`` moves: the parameters' dtype (bf16 under fp8
        training unless ``mapping.fp8_param_gather`` keeps them in fp8, ``perf.memory.param_gather_bytes``),
        op by op where formats differ per op (a bf16 edge layer's parameters stay 2 B: ``perf.formats``)."""
        m, train = self.project.mapping, self.project.run.mode is Mode.train
        if self.formats is None:
            return param_gather_bytes(self.elem_bytes, self.project.run.dtype, train, m.fp8_param_gather, m.zero)
        per_op = gathered_weight_bytes(train, m.fp8_param_gather, m.zero)
        tied = {self.tied.layer: self.tied.params} if self.tied is not None and rank == self.tied.last else {}
        mean = stage_mean_bytes(self.formats, self.workload, self.stages[rank].chunk_layers, self.tp, per_op,
                                self.ep, self.expert_tp, tied)
        return mean if mean is not None else per_op(self.formats)

    @memo_method
    def zero_gather_exposed(self, rank: int) -> tuple[Collective, Collective]:
        """What of ``zero_gather`` the iteration waits for, as two collectives run one after the other: with
        ``overlap_param_gather`` the first bucket and what the next forward cannot hide of the rest, else
        the whole gather and nothing (``plan.param_gather``). Energy and traffic count the whole gather."""
        from tilewright.engine.plan.param_gather import exposed_gather  # it times passes (plan.timing)

        return exposed_gather(self, rank)

    @memo_method
    def tied_collective(self) -> Collective:
        """The tied embedding's gradient all-reduce over every embedding group (first and last stage of each
        pipeline, ``plan.tied``), after both stages' data-parallel reductions and before their optimizer step."""
        if self.tied is None or self.tied_bytes <= 0:
            return Collective("all-reduce", "none", ())
        first, last = self.stages[self.tied.first].groups, self.stages[self.tied.last].groups
        return embedding_group_collective(self.hw, first, last, self.tied_bytes)

    def tied_ranks(self) -> tuple[int, ...]:
        """The pipeline ranks that take part in the tied embedding's all-reduce (none without one)."""
        if not self.tied_collective().phases:
            return ()
        return (self.tied.first, self.tied.last)  # type: ignore[union-attr]

    def stage_grad_per_param(self, rank: int) -> float:
        """Gradient bytes per parameter of a stage (its ``grad_bytes`` over its ``params``)."""
        st = self.stages[rank]
        total = sum(st.grad_bytes.values())
        return total / st.params if st.params > 0 and total > 0 else 1.0


def build_plan(project: Project, hw: HardwareGraph, workload: WorkloadGraph) -> Plan:
    m = project.mapping
    run = project.run
    if m.layer_parallelism and run.mode is Mode.train:
        from tilewright.engine.plan.hypar_plan import build_hypar_plan  # imports this module

        return build_hypar_plan(project, hw, workload)
    blocks = workload.block_layers
    formats = resolve_formats(run.dtype, m.formats, m.fidelity, block_names(workload), run.mode is Mode.train)
    elem = dtype_bytes(formats.activations)
    v = m.interleave if m.schedule is Schedule.interleaved else 1
    cp = m.cp if run.mode is Mode.train else 1
    groups = stage_groups(hw.devices, m if cp == 1 else m.model_copy(update={"dp": m.dp * cp}))
    mb = m.micro_batch / cp  # samples' worth of tokens one device runs per micro-batch (``plan.context``)
    fusion = fused_edges(m.fusion) | ring_fused(map(workload.layer_ops, blocks), cp)  # ring attention is flash
    ep = m.ep if run.mode is Mode.train else 1
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
    tied = tied_embedding(workload, per_virtual, m.pp, m.tp)
    micro_batches = m.micro_batches if run.mode is Mode.train else 1
    stages: list[StagePlan] = []
    flags: list[float] = []
    log = TrainLogging.of(m)  # the training loop's logging flags (plan.train_logging)
    world: list[float] = []

    def world_s(dev: DeviceModel) -> float:
        """A 4-byte all-reduce over every rank (the level-1 timers' barriers), timed once when any is charged."""
        if not issues_kernels(dev.compute) or not log.barriers:
            return 0.0
        if not world:
            world.append(flag_allreduce_s(hw, [d for g in groups for grp in g for d in grp]))
        return world[0]

    def flag_s(dev: DeviceModel) -> float:
        """The optimizer's flag all-reduce over the model-parallel group (one group for every stage), timed
        once and only for devices a host framework drives (``plan.train_step``)."""
        if not issues_kernels(dev.compute):
            return 0.0
        if not flags:
            flags.append(flag_allreduce_s(hw, [d for g in groups for d in g[0]]))
        return flags[0]

    notes_residency: list[tuple[int, StageResidency, dict[str, float]]] = []
    rerun_layers: set[int] = set()  # layers full recomputation re-runs (mapping.recompute_layers)
    edge_bytes = edge_weight_bytes(formats, workload)  # the bf16 edge layers' weight bytes, once per plan
    for r in range(m.pp):
        first = groups[r][0][0]
        d = hw.devices[first]
        dev = device_model(d.compute, d.memories, remote_memory(hw, first), run.dtype)
        ctx = PassContext(dev, mb, m.tp, m.sequence_parallel, elem, fusion, formats, m.spatial)
        chunk_layers = {c: per_virtual[c * m.pp + r] for c in range(v)}
        ctx.rows_per_sample = workload.tokens_per_sample
        ctx.fused_loss = m.fused_cross_entropy
        ctx.cuda_graph_scope = tuple(m.cuda_graph_scope or ())  # plan.cuda_graphs
        ctx.moe_router_fusion = m.moe_router_fusion  # plan.moe_host
        ctx.grad_hooks = grad_hooks(project, formats.weight_bytes)  # plan.grad_hooks
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
        tied_copy = {tied.layer: tied.params} if tied is not None and r == tied.last else {}  # plan.tied
        held = held_weight_bytes(run.mode is Mode.train, m.fp8_param_gather, m.zero)  # weights_by_op, bf16 layers
        per_param = stage_per_param(state_per_param, formats, workload, chunk_layers, m.tp, held, ep, etp, tied_copy)
        # ZeRO-3 gathers the model's parameters: bf16 ones under fp8 without fp8_param_gather, as the post-step
        # gather does (``param_gather_bytes``), and the bf16 edge layers at 2 B
        gathered = param_gather_bytes(formats.weight_bytes, formats.weights, run.mode is Mode.train,
                                      m.fp8_param_gather, m.zero)
        ctx.shard = shard_comm(project, hw, groups[r], gathered, state_per_param.gradients, tied_copy, edge_bytes)
        ctx.context = context_comm(hw, groups[r], cp)
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
             for ls in sharded_layer_ops(workload, idx, ep, m.expert_imbalance, m.tp, etp)],
            per_param,
            elem,
            mb,
            shard_dp,
            formats,
        )
        if placed is not None:
            ctx.residency = placed[0].residency
            if run.mode is Mode.train and ctx.residency.at("activations") == "host":
                ctx.offload_saved, ctx.residency = offloaded_activations(ctx.residency)
                ctx.offload_layers = offloaded_layers(chunk_layers.values(), blocks, m.offload_layers)
            notes_residency.append((r, *placed))
        passes: dict[tuple[int, str], ChunkPass] = {}
        act: dict[int, float] = {}
        offloaded: dict[int, float] = {}
        grad: dict[int, float] = {}
        expert_grad: dict[int, float] = {}
        expert_params: dict[int, float] = {}
        all_ops: list[Op] = []
        transient = 0.0
        params = 0.0
        for c, idx in chunk_layers.items():
            layers = sharded_layer_ops(workload, idx, ep, m.expert_imbalance, m.tp, etp)
            ops = [op for ls in layers for op in ls]
            all_ops += ops
            passes[(c, "F")] = forward_pass(layers, ctx)
            passes[(c, "B")] = backward_pass(layers, ctx)
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
            if apart:
                expert_params[c] = params_on_device(routed_experts(ops), m.tp)
                expert_grad[c] = expert_params[c] * state_per_param.gradients
        if run.mode is Mode.train:  # the framework's host synchronisations (``plan.train_step``)
            add_drains(passes, m.pp, r, dev.compute, m.tp, mb * (workload.tokens_per_sample + 1) * TOKEN_BYTES, log)
        experts = sum(expert_params.values())
        state = expert_model_state(params, experts, per_param, m.zero, shard_dp, ep, edp if apart else None)
        if run.mode is Mode.infer:
            state = StateBytes(state.weights, 0.0, 0.0)
        step = adam_step(state_per_param, m.optimizer_moments, m.optimizer_master)
        # the optimizer steps the parameters whose state this device holds (ZeRO: its shard of each group's)
        local_params = (params - experts) / shard_dp + experts / edp if m.zero >= 1 else params
        train = run.mode is Mode.train
        fused_s = step_seconds(dev, placed[0] if placed else None, local_params, step) if train else 0.0
        stages.append(
            StagePlan(
                rank=r,
                groups=groups[r],
                dev=dev,
                chunk_layers=chunk_layers,
                passes=passes,
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
                                run.dtype.value == "fp16", flag_s(dev), shard_dp,
                                full_iteration="full_iteration" in (m.cuda_graph_scope or ()),
                                te_master=te_holds_master(m.optimizer_moments, m.optimizer_master, formats.weights,
                                                          m.formats.fp8_scaling), log=log)
                + logging_seconds(dev, log, tensors=sum(param_tensors(op, workload.tokens_per_sample, False)[0]
                                                        for op in all_ops),
                                  params=params, weight_bytes=formats.weight_bytes, bf16=run.dtype.value == "bf16",
                                  model_reduce_s=flag_s(dev), world_reduce_s=world_s(dev),
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
        )
    p2p: dict[int, float] = {}
    for vs in range(m.pp * v - 1):
        last_ops = workload.layer_ops(per_virtual[vs][-1])
        out = last_ops[-1].out_elems if last_ops else 0.0
        p2p[vs] = out * mb * elem / m.tp  # Megatron's scatter/gather: each rank sends 1/tp
    pipeline = pipeline_p2p(m.pipeline_p2p, m.recompute, stages[0].dev.compute, run.mode is Mode.train, m.tp,
                            m.sequence_parallel)
    if pipeline.gather and m.pp > 1:  # each receive all-gathered over the tensor group (plan.pipeline_p2p)
        whole = {vs: nbytes * m.tp for vs, nbytes in p2p.items()}
        for st in stages:
            add_receive_gathers(st.passes, m.pp, st.rank, st.dev.compute, whole)
    model_flops, hardware_flops = run_flops(workload, project, fusion, rerun_layers)
    notes = format_notes(project, stages[0].dev, formats)
    notes += per_op_notes(formats, [op.name for op in workload.ops()])  # mapping.formats.*_by_op
    notes += p2p_notes(m.pipeline_p2p, pipeline, m.pp)  # sends that block by default (plan.pipeline_p2p)
    notes += dgrad_notes(m.overlap_dgrad_comm, dgrad_overlaps(m.overlap_dgrad_comm, m.recompute, stages[0].dev.compute,
                                                              run.mode is Mode.train),
                         run.mode is Mode.train, m.tp, m.tp_axes is not None, m.overlap_tp_comm)  # plan.dgrad_overlap
    if m.tp_axes is not None:
        notes += tensor_axes_notes(hw, stages[0].groups[0], m.tp_axes, list(workload.ops()),
                                   m.tp_axes_collectives == "scatter-gather")
    for st in stages:
        forward = Counter()
        for (_c, kind), ps in st.passes.items():
            if kind == "F":
                forward.update(ps.dataflows)
        if forward and st.dev.compute.grid is None:  # a grid device reports its splits (Plan.split_notes)
            chosen = ", ".join(f"{n} × {flow}" for flow, n in forward.most_common())
            notes.append(f"stage {st.rank}: SRAM tiling of forward matmuls per micro-batch: {chosen}")
    notes += residency_notes(notes_residency)
    notes += offload_notes(stages, blocks, m.offload_layers)  # plan.activation_offload
    if m.layer_parallelism:
        notes.append("mapping.layer_parallelism (HyPar) partitions training; this inference run ignores it")
    compute = stages[0].dev.compute
    if run.dtype not in compute.peak_flops:
        notes.append(
            f"the device has no {run.dtype.value} peak: its matmuls run at the nearest wider type's "
            f"({stages[0].dev.peak_flops / 1e12:.0f} TFLOP/s), storage stays {run.dtype.value}"
        )
    return Plan(
        formats=formats,
        notes=notes,
        project=project,
        hw=hw,
        workload=workload,
        pp=m.pp,
        chunks=v,
        micro_batches=micro_batches,
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
        tied_bytes=tied.allreduce_bytes(state_per_param.gradients, m.zero, shard_dp)
        if tied is not None and run.mode is Mode.train
        else 0.0,
    )

