"""The records a pass is built from and built into: ``Segment`` (the compute between two collectives),
``ChunkPass`` (one pass of one model chunk for one micro-batch) and ``PassContext`` (what the builder needs to
know about the stage, its device and its mapping). Kept apart from ``plan.passes``, which builds them, so the
engines, the search and the serving model can read them without the builder."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from tilewright.engine.ir.mapping import HostFramework, SpatialSplit
from tilewright.engine.perf.device import DeviceModel, issues_kernels
from tilewright.engine.perf.formats import OpFormats
from tilewright.engine.perf.op_cost import OpTime
from tilewright.engine.perf.residency import Residency
from tilewright.engine.plan.context import ContextComm
from tilewright.engine.plan.grad_hooks import GradHooks
from tilewright.engine.plan.op_memo import OpTimes
from tilewright.engine.plan.sharding import ShardComm, spans_replicas

PassKind = str  # "F" | "B" | "R"


@dataclass
class Segment:
    label: str
    layer: int
    busy_s: float  # roofline time on the device (compute and local memory overlapped)
    compute_s: float  # arithmetic-only part, the rest of busy_s is memory stall
    flops: float
    dram_bytes: float
    comm: tuple[str, float] | None = None  # (collective kind, full-tensor bytes) after this segment
    local_bytes: float = 0.0  # moved to/from the device's own memory (its DRAM, else its SRAM): energy
    host_s: float = 0.0  # host time issuing the segment's kernels (``plan.launch``)
    offload_s: float = 0.0  # stored activations copied to (forward) or from (backward) host memory
    dispatch_wait_s: float = 0.0  # part of busy_s the device waited for the host (host_s past device time)
    hidden: tuple[tuple[str, float], ...] = ()  # collectives behind its kernels (the context ring): on links, untimed
    # an async collective the builder could not time (``PassContext.dgrad_seconds`` None, ``plan.dgrad_overlap``):
    # the seconds of weight-gradient GEMMs it runs beside, for a caller that times it per placement
    # (``search.multilevel``); ``comm`` then carries its whole bytes. None otherwise.
    deferred_cover_s: float | None = None
    # the layer of its last op when that is not its first's (a pass with no collective between its layers is one
    # segment: a tensor-parallel-free inference pass, all of it): the timeline names the segment by the range
    last_label: str = ""

    @property
    def span_label(self) -> str:
        """"block0…block31" for a segment over several layers, else its one layer's name (the timeline's)."""
        return f"{self.label}…{self.last_label}" if self.last_label and self.last_label != self.label else self.label

    @property
    def host_only(self) -> bool:
        """The device only waits for the host here (``host_wait``): the timeline files it under host wait."""
        return self.flops == 0 and self.compute_s == 0 and self.busy_s > 0 and self.dispatch_wait_s >= self.busy_s

    @classmethod
    def host_wait(cls, label: str, layer: int, seconds: float) -> Segment:
        """The device idle while the host works (a framework's synchronisation, a runtime's step): reported
        as host wait."""
        return cls(label=label, layer=layer, busy_s=seconds, compute_s=0.0, flops=0.0, dram_bytes=0.0,
                   host_s=seconds, dispatch_wait_s=seconds)

    def close(self) -> None:
        """The device cannot finish before the host has issued every kernel (``plan.launch``), nor before
        the copy engines have moved the stored activations over the host link (activation offload)."""
        if self.host_s > self.busy_s:
            self.dispatch_wait_s = self.host_s - self.busy_s
            self.busy_s = self.host_s
        self.busy_s = max(self.busy_s, self.offload_s)

    def add(self, t: OpTime, dataflows: Counter) -> None:
        """Accumulate one op's time; count the SRAM dataflow its tiling chose, or the split of a grid
        device, if any."""
        self.busy_s += t.busy_s
        self.compute_s += t.compute_s
        self.flops += t.flops
        self.dram_bytes += t.dram_bytes
        self.local_bytes += t.local_bytes
        if t.dataflow:
            dataflows[t.dataflow] += 1
        if t.split:
            dataflows[t.split] += 1


@dataclass
class ChunkPass:
    kind: PassKind
    segments: list[Segment] = field(default_factory=list)
    dataflows: Counter = field(default_factory=Counter)  # SRAM tiling choices / grid splits of its ops
    captured: bool = False  # inside a full-iteration CUDA graph: no host syncs (``plan.train_step``)
    # a backward's, per overlapped expert all-to-all in order: what its delayed weight gradients can add to the
    # cover of the paired forward's all-to-all (``PassComms._a2a``); the first 0, nothing of the paired layers
    # running before the backward's first all-to-all
    a2a_slack: list[float] = field(default_factory=list)

    @property
    def busy_s(self) -> float:
        return sum(s.busy_s for s in self.segments)

    @property
    def flops(self) -> float:
        return sum(s.flops for s in self.segments)

    @property
    def compute_s(self) -> float:
        return sum(s.compute_s for s in self.segments)

    @property
    def dispatch_wait_s(self) -> float:
        """Seconds the device waited for the host to issue kernels (part of ``busy_s``)."""
        return sum(s.dispatch_wait_s for s in self.segments)

    @cached_property
    def has_dram(self) -> bool:
        return any(s.dram_bytes > 0 for s in self.segments)

    @cached_property
    def has_dp_comm(self) -> bool:
        """Carries collectives over several replicas: sharded data parallelism (``plan.sharding``) or the
        context-parallel ring (``plan.context``)."""
        return any(s.comm is not None and spans_replicas(s.comm[0]) for s in self.segments)


@dataclass
class PassContext:
    dev: DeviceModel
    micro_batch: float  # samples per pass on one device: mapping.micro_batch, ÷ cp with context parallelism
    tp: int
    sequence_parallel: bool
    elem_bytes: float  # of activations (and every tensor when ``formats`` is None)
    fused: frozenset[tuple[str, str]] = frozenset()  # (producer, consumer) names within a layer, on chip
    formats: OpFormats | None = None  # per tensor kind (mapping.formats) and math fidelity
    spatial: SpatialSplit | None = None  # split policy over a grid device's cores (mapping.spatial)
    residency: Residency | None = None  # memory level of each category (mapping.memory_levels)
    rows_per_sample: int = 1  # token rows per sample: a fused chain streams its intermediate row block by block
    shard: ShardComm | None = None  # ZeRO-2/3 and FSDP collectives inside the passes (``plan.sharding``)
    offload_saved: float = 0.0  # training with activations in host memory: the host link's bytes/s (else 0)
    offload_layers: frozenset[int] = frozenset()  # the layers whose stored activations go (plan.activation_offload)
    context: ContextComm | None = None  # context parallelism's K/V ring (``plan.context``); micro_batch is per rank
    expert_parallel: int = 1  # ep: MoE ops exchange their tokens all-to-all (``plan.experts``)
    expert_tp: int | None = None  # routed experts' tensor parallelism (None: tp; ``experts.expert_tp_comm``)
    # with mapping.overlap_ep_comm: seconds of an all-to-all of that many bytes per tensor rank (the stage's
    # ep groups at once), to hide it behind the paired micro-batch's node of the layer (``PassComms._a2a``)
    ep_seconds: Callable[[float], float] | None = None
    # with ep_seconds: a pass Megatron-Core's combined 1F1B runs alone (a warmup forward, a cooldown backward:
    # ``plan.schedules``), no node of another micro-batch beside its all-to-alls, which show whole
    ep_alone: bool = False
    # with mapping.delay_wgrad_compute: the backward's delayed weight gradients hide its own all-to-alls too, by the
    # forward's (``PassComms._a2a``, ``plan.wgrad_delay``)
    delay_wgrad: bool = False
    tp_axes: tuple[int, int] | None = None  # 2-D tensor parallelism (``plan.tensor_axes``), forward passes only
    tp_axes_collectives: str = "all-reduce"  # mapping.tp_axes_collectives (``tensor_axes.layer_comms``)
    tp_tile: int = 1  # the device's tile edge: a 'tt-transformers' norm's statistics are one tile wide
    tp_decode: bool = False  # a decode step: 'tt-transformers' calls other collectives and pads users to tiles
    # a decode step's users where they are not micro_batch (serving: n tokens as one sample), else 0
    tp_rows: float = 0.0
    fused_loss: bool = False  # the cross-entropy as one fused kernel (mapping.fused_cross_entropy)
    # with mapping.overlap_tp_comm: a tensor-group collective's seconds, (kind, bytes) → s (``plan.tp_overlap``)
    tp_seconds: Callable[[str, float], float] | None = None
    # with sequence parallelism at tp > 1 (1-D): a tensor-group collective's seconds, (kind, bytes) → s, what the
    # backward's re-gather of a column-parallel input must hide behind its data gradient (``plan.sp_regather``)
    regather_seconds: Callable[[str, float], float] | None = None
    # mapping.overlap_dgrad_comm resolved (tp > 1, 1-D, no userbuffers): a column-parallel run's input-gradient
    # collective runs beside its weight-gradient GEMMs (``plan.dgrad_overlap``), timed by ``dgrad_seconds`` (a
    # tensor-group collective's seconds, (kind, bytes) → s; None: left to the caller, ``Segment.deferred_cover_s``)
    dgrad_overlap: bool = False
    dgrad_seconds: Callable[[str, float], float] | None = None
    tp_ring_reduce_scatter: bool = False  # mapping.tp_overlap_reduce_scatter 'ring_exchange' (``plan.tp_overlap``)
    moe_framework: bool = True  # MoE ops carry Megatron-Core's host work (``plan.moe_host``); serving: False
    cuda_graph_scope: tuple[str, ...] = ()  # training's CUDA graphs (mapping.cuda_graph_scope, ``plan.cuda_graphs``)
    moe_router_fusion: bool = False  # the routing op's host counts are TE's fused router's (``plan.moe_host``)
    grad_hooks: GradHooks | None = None  # training: the parameters' gradient hooks (``plan.grad_hooks``)
    host_framework: HostFramework = "megatron-lm"  # whose Python issues the kernels (``plan.framework_host``)
    op_times: OpTimes | None = None  # a memo of the op costs shared by a search's or a plan's passes (``plan.op_memo``)

    @property
    def expert_kernels(self) -> bool:
        """Whether routed experts run one GEMM kernel per local expert, each paying its own fill
        (``perf.op_cost._gemm_parts``): Transformer Engine's ``GroupedLinear`` (multi-stream cuBLAS)
        under the Megatron frameworks, and Megatron-DeepSpeed's experts (one ``nn.Linear`` each) — on a GPU a host
        framework drives kernel by kernel (``issues_kernels``: not a TPU, a grid or a wafer, whose compiler runs
        the experts as it runs any op). Not serving (``moe_framework`` False), nor plain PyTorch (torchtitan's
        ``GroupedExperts``: ``torch._grouped_mm``, one kernel for all experts)."""
        return (self.moe_framework and issues_kernels(self.dev.compute)
                and self.host_framework not in ("pytorch", "pytorch-compile"))  # framework_host.SDPA_FRAMEWORKS
