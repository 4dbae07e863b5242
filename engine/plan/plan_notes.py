"""The notes a plan carries for the user: what it resolved, assumed or ignored that the numbers alone hide.

Tensor formats and per-op formats, blocking pipeline sends, the backward's async dgrad, 2-D tensor
parallelism's collectives, each stage's SRAM tiling of its matmuls, ``memory_levels`` placements, activation
offload, a HyPar mapping an inference run ignores, and a device without a peak for the run's data type. Each
note's wording belongs to the module that decides the matter (``plan.report``, ``plan.pipeline_p2p``, …);
this module only gathers them in a fixed order once the stages are built.

Split from ``plan.plan``; the notes and their order are unchanged.
"""

from __future__ import annotations

from collections import Counter

from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.project import Mode
from tilewright.engine.perf.device import issues_kernels
from tilewright.engine.perf.formats import per_op_notes
from tilewright.engine.perf.recompute import changes_nothing, reruns_flash
from tilewright.engine.plan.activation_offload import notes as offload_notes
from tilewright.engine.plan.dgrad_overlap import notes as dgrad_notes
from tilewright.engine.plan.dgrad_overlap import overlaps as dgrad_overlaps
from tilewright.engine.plan.framework_host import host_framework
from tilewright.engine.plan.pipeline_p2p import PipelineP2P
from tilewright.engine.plan.pipeline_p2p import notes as p2p_notes
from tilewright.engine.plan.plan_settings import PlanSettings
from tilewright.engine.plan.report import format_notes
from tilewright.engine.plan.residency import StageResidency
from tilewright.engine.plan.residency import notes as residency_notes
from tilewright.engine.plan.stage_build import StagePlan
from tilewright.engine.plan.tensor_axes import notes as tensor_axes_notes

# selective recomputation whose modules all run inside a fused attention kernel (``perf.recompute.changes_nothing``)
SELECTIVE_CHANGES_NOTHING = (
    "selective recomputation changes nothing here: the ops its modules re-run run inside the fused attention kernel "
    "(mapping.fusion, or the context-parallel ring), which stores no scores and recomputes them in its own "
    "backward, so this is the run without recomputation (as Megatron-LM's flash path)"
)
# the same under Megatron-Core, which re-runs the fused kernel's forward (``perf.recompute.reruns_flash``)
SELECTIVE_RERUNS_FLASH = (
    "selective recomputation saves nothing here: the ops its modules re-run run inside the fused attention kernel, "
    "which stores no scores, yet Megatron-Core checkpoints the attention core whatever its backend, so the "
    "kernel's forward runs once more in the backward: slower than no recomputation, for the same memory"
)


def plan_notes(
    s: PlanSettings, stages: list[StagePlan], pipeline: PipelineP2P,
    residencies: list[tuple[int, StageResidency, dict[str, float]]],
) -> list[str]:
    """The notes of a plan built from ``s`` with ``stages`` and ``pipeline``; ``residencies``: each stage's
    resolved ``memory_levels`` with the sizes it was resolved from (``plan.residency.notes``)."""
    project, hw, workload, formats = s.project, s.hw, s.workload, s.formats
    m, run = project.mapping, project.run
    notes = format_notes(project, stages[0].dev, formats)
    notes += per_op_notes(formats, [op.name for op in workload.ops()])  # mapping.formats.*_by_op
    notes += p2p_notes(m.pipeline_p2p, pipeline, m.pp)  # sends that block by default (plan.pipeline_p2p)
    notes += dgrad_notes(m.overlap_dgrad_comm, dgrad_overlaps(m.overlap_dgrad_comm, m.recompute, stages[0].dev.compute,
                                                              run.mode is Mode.train),
                         run.mode is Mode.train, m.tp, m.tp_axes is not None, m.overlap_tp_comm,
                         issues_kernels(stages[0].dev.compute))  # plan.dgrad_overlap
    if m.tp_axes is not None:
        grid = stages[0].dev.compute.grid
        notes += tensor_axes_notes(hw, stages[0].groups[0], m.tp_axes, list(workload.ops()), m.tp_axes_collectives,
                                   grid.tile if grid is not None else 1)
    for st in stages:
        forward: Counter = Counter()
        for (_c, kind), ps in st.passes.items():
            if kind == "F":
                forward.update(ps.dataflows)
        if forward and st.dev.compute.grid is None:  # a grid device reports its splits (Plan.split_notes)
            chosen = ", ".join(f"{n} × {flow}" for flow, n in forward.most_common())
            notes.append(f"stage {st.rank}: SRAM tiling of forward matmuls per micro-batch: {chosen}")
    notes += residency_notes(residencies)
    notes += offload_notes(stages, s.blocks, m.offload_layers)  # plan.activation_offload
    if m.layer_parallelism:
        notes.append("mapping.layer_parallelism (HyPar) partitions training; this inference run ignores it")
    if run.mode is Mode.train and m.recompute is Recompute.selective and changes_nothing(
        [workload.layer_ops(i) for i in s.blocks], s.fusion, m.recompute_modules
    ):
        framework = host_framework(m.host_framework, stages[0].dev.compute, True)  # as the passes resolve it
        notes.append(SELECTIVE_RERUNS_FLASH if reruns_flash(framework) else SELECTIVE_CHANGES_NOTHING)
    compute = stages[0].dev.compute
    if run.dtype not in compute.peak_flops:
        notes.append(
            f"the device has no {run.dtype.value} peak: its matmuls run at the nearest wider type's "
            f"({stages[0].dev.peak_flops / 1e12:.0f} TFLOP/s), storage stays {run.dtype.value}"
        )
    return notes
