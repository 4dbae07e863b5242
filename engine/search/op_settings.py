"""The per-op cost settings a search takes from its project, so it costs ops exactly as ``build_plan`` does.

Besides tp, micro-batch and sequence parallelism, an op's time depends on the mapping's tensor formats and
math fidelity (``mapping.formats``/``fidelity``), the fusion chains it keeps on chip (``mapping.fusion``),
the split policy over a grid device's cores (``mapping.spatial``), the token rows a fused chain streams and
where each category of state lives (``mapping.memory_levels``, resolved per candidate by the caller). This
module gathers the candidate-independent ones once and builds the plan's own ``PassContext`` from them, so
search, ``map`` and the engines share one cost function per op (``perf.op_cost.op_time``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.ir.common import dtype_bytes
from tilewright.engine.ir.hardware import Compute
from tilewright.engine.ir.mapping import HostFramework, Recompute, SpatialSplit
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.device import DeviceModel
from tilewright.engine.perf.formats import OpFormats
from tilewright.engine.perf.residency import Residency
from tilewright.engine.plan.context import flash_fused
from tilewright.engine.plan.cuda_graphs import FULL_ITERATION
from tilewright.engine.plan.device_layers import run_formats
from tilewright.engine.plan.dgrad_overlap import active as dgrad_active
from tilewright.engine.plan.framework_host import attention_device, host_framework
from tilewright.engine.plan.grad_hooks import GradHooks, grad_hooks
from tilewright.engine.plan.passes import PassContext, collective_between, fused_edges, local_name
from tilewright.engine.workloads.graph import WorkloadGraph


@dataclass(frozen=True)
class OpSettings:
    formats: OpFormats
    elem_bytes: float  # of activations: what ``build_plan`` calls ``elem``
    fused: frozenset[tuple[str, str]]
    spatial: SpatialSplit
    rows_per_sample: int
    fused_loss: bool = False  # mapping.fused_cross_entropy: the loss's kernels and its logits' width
    # mapping.cuda_graph_scope: what CUDA graphs replay (``plan.cuda_graphs``): the captured ops' host work and,
    # under 'full_iteration', the passes' host syncs (``plan.train_step``) are gone, as in the plan
    cuda_graph_scope: tuple[str, ...] = ()
    moe_router_fusion: bool = False  # mapping.moe_router_fusion: the routing op's host counts (``plan.moe_host``)
    grad_hooks: GradHooks | None = None  # training: the parameters' gradient hooks (``plan.grad_hooks``)
    overlap_dgrad: bool | None = None  # mapping.overlap_dgrad_comm, resolved per candidate (``dgrad``)
    train: bool = True
    host_framework: HostFramework | None = None  # mapping.host_framework (resolved by ``context``)

    @classmethod
    def of(cls, project: Project, workload: WorkloadGraph) -> OpSettings:
        m = project.mapping
        train = project.run.mode is Mode.train  # bf16 edge layers of an fp8 training run (``perf.formats``)
        formats = run_formats(project, workload)
        return cls(
            formats, dtype_bytes(formats.activations), _fused(m.fusion, workload), m.spatial,
            workload.tokens_per_sample, m.fused_cross_entropy, tuple(m.cuda_graph_scope or ()), m.moe_router_fusion,
            grad_hooks(project, formats.weight_bytes), m.overlap_dgrad_comm, train, m.host_framework,
        )

    @property
    def weight_bytes(self) -> float:
        return self.formats.weight_bytes

    def context(
        self, dev: DeviceModel, micro_batch: int, tp: int, sp: bool, residency: Residency | None = None
    ) -> PassContext:
        """The ``PassContext`` ``build_plan`` makes for a stage of this mapping."""
        ctx = PassContext(dev, micro_batch, tp, sp, self.elem_bytes, self.fused, self.formats, self.spatial)
        ctx.host_framework = host_framework(self.host_framework, dev.compute, self.train)  # plan.framework_host
        ctx.dev = attention_device(dev, ctx.host_framework)  # its attention kernel (plan.framework_host)
        ctx.rows_per_sample = self.rows_per_sample
        ctx.residency = residency
        ctx.fused_loss = self.fused_loss
        ctx.cuda_graph_scope = self.cuda_graph_scope
        ctx.moe_router_fusion = self.moe_router_fusion
        ctx.grad_hooks = self.grad_hooks
        return ctx

    def dgrad(self, recompute: Recompute, compute: Compute, tp: int) -> bool:
        """Whether a candidate's backward hides its column-parallel input-gradient collectives behind their weight
        gradients, as ``build_plan`` resolves it (``plan.dgrad_overlap``; the search's candidates are 1-D and
        time userbuffers through the plan itself)."""
        return dgrad_active(self.overlap_dgrad, recompute, compute, self.train, tp, False, False)

    @property
    def full_iteration(self) -> bool:
        """The whole forward-backward is one CUDA graph: its passes carry no host syncs (``ChunkPass.captured``)."""
        return FULL_ITERATION in self.cuda_graph_scope


def fusion_allows(workload: WorkloadGraph, fused: frozenset[tuple[str, str]], tp: int) -> bool:
    """False when a fused edge would cross a tensor-parallel collective at ``tp`` (``plan.checks`` refuses
    such a mapping: the tensor leaves the chip there)."""
    if not fused or tp <= 1:
        return True
    for li in workload.layers:
        ops = workload.layer_ops(li.index)
        for a, b in zip(ops, ops[1:], strict=False):
            if (local_name(a), local_name(b)) in fused and collective_between(a, b, tp):
                return False
    return True


def _fused(chains: list[list[str]], workload: WorkloadGraph) -> frozenset[tuple[str, str]]:
    """``mapping.fusion``'s edges, each fused attention core whole (its dropout inside the flash kernel), as the
    plan reads them (``plan.context.flash_fused``)."""
    edges = fused_edges(chains)
    return edges | flash_fused(map(workload.layer_ops, workload.block_layers), 1, edges)
