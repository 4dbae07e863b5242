"""Where the mapping puts the model: each device's pipeline stage and each stage's layers.

The canvas colours devices by stage and labels them "L12–23"; the workload panel shows which stage
holds each layer; layer drops need the devices' indices. All of them read one ``StageLayout``, computed
here from the project with the engine's own placement (``engine.plan.placement``), so what the studio
draws is what the simulator runs. No Qt: the rules are tested without a window.

Elaboration is the slow part on a 64 × 64 wafer (≈ 0.25 s), and a mapping edit does not change the
hardware, so the last few elaborated graphs are kept, keyed by the (immutable) hardware value. The layout
itself (placing 262,144 tiles takes ~0.2 s) and the displayed hardware are kept too, keyed by the project
value: every edit (an undo command) makes a new project, so a changed project is never answered from the
cache, while the canvas, the workload panel and the layer drops share one layout of an unchanged one —
and a large project's opening worker (``studio.opening``) computes it ahead of the GUI thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from tilewright.engine.hardware import HardwareGraph, elaborate, grow
from tilewright.engine.hardware.model import Device
from tilewright.engine.ir.hardware import Component
from tilewright.engine.ir.mapping import Mapping, Schedule
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.plan.budget import estimate
from tilewright.engine.plan.experts import expert_tp_of
from tilewright.engine.plan.placement import stage_groups
from tilewright.engine.plan.placement import virtual_stage_layers as engine_virtual_stage_layers
from tilewright.engine.workloads import WorkloadGraph, build_workload

LayerRange = tuple[int, int]  # [first, last) workload layer indices

_GRAPHS: list[tuple[Component, int, HardwareGraph]] = []
_WORKLOADS: list[tuple[object, WorkloadGraph]] = []
_LAYOUTS: list[tuple[Project, int | None, StageLayout]] = []
_DISPLAYED: list[tuple[Project, Component]] = []
_CACHE_SIZE = 3
_LOCK = threading.Lock()  # the opening worker fills the caches the GUI thread reads


def _remember(cache: list, entry: tuple) -> None:
    with _LOCK:
        cache.insert(0, entry)
        del cache[_CACHE_SIZE:]


def elaborated(hardware: Component, devices_needed: int) -> HardwareGraph:
    """``elaborate`` with a small cache (hardware values are immutable, so identity is a safe key)."""
    for hw, needed, graph in _GRAPHS:
        if hw is hardware and needed == devices_needed:
            return graph
    graph = elaborate(hardware, devices_needed=devices_needed)
    _remember(_GRAPHS, (hardware, devices_needed, graph))
    return graph


def workload_graph(spec: object) -> WorkloadGraph:
    """``build_workload`` with the same kind of cache (the layer table and the layout both need it)."""
    for s, graph in _WORKLOADS:
        if s is spec:
            return graph
    graph = build_workload(spec)  # type: ignore[arg-type]
    _remember(_WORKLOADS, (spec, graph))
    return graph


def display_hardware(project: Project) -> Component:
    """The hardware as the run sees it: a growable cluster grown to the devices the mapping needs (one
    value per project, so what is computed from it can be cached by identity)."""
    for p, hardware in _DISPLAYED:
        if p is project:
            return hardware
    try:
        hardware = grow(project.hardware, project.mapping.devices)
    except ValueError:
        hardware = project.hardware
    _remember(_DISPLAYED, (project, hardware))
    return hardware


def format_ranges(ranges: list[LayerRange]) -> str:
    """ "L12–23" for [12, 24); several chunks (interleaving) are joined: "L0–3, L16–19"."""
    parts = []
    for first, last in ranges:
        parts.append(f"L{first}" if last - first == 1 else f"L{first}–{last - 1}")
    return ", ".join(parts)


def expert_tp_text(mapping: Mapping) -> int | None:
    """The expert tensor parallelism worth showing: only when it differs from tp (Megatron's default, so
    "etp" would otherwise repeat tp), with or without expert parallelism (``plan.experts.expert_tp_of``)."""
    etp = expert_tp_of(mapping)
    return etp if etp != mapping.tp else None


def stage_split(mapping: Mapping) -> tuple[int, str]:
    """Devices per pipeline stage and how they split it: (16, "tp 1 × dp 16 · ep 8"). Context ranks
    multiply a stage (tp × cp × dp devices); expert ranks are data-parallel ranks, so ep adds none."""
    cp = mapping.cp
    text = f"tp {mapping.tp}" + (f" × cp {cp}" if cp > 1 else "") + f" × dp {mapping.dp}"
    if mapping.ep > 1:
        text += f" · ep {mapping.ep}"
    if (etp := expert_tp_text(mapping)) is not None:
        text += f" · etp {etp}"
    return mapping.stage_devices, text


def to_ranges(indices: list[int]) -> list[LayerRange]:
    """Sorted layer indices as maximal contiguous [first, last) ranges."""
    out: list[LayerRange] = []
    for i in sorted(indices):
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


def virtual_stage_layers(mapping: Mapping, workload: WorkloadGraph, chunks: int) -> list[list[int]]:
    """Layers of each virtual stage, exactly as ``engine.plan.plan.build_plan`` splits them: explicit
    stages as given; otherwise the repeated blocks evenly, the embedding on the first virtual stage and
    the head on the last (a test keeps the two in step)."""
    if mapping.stages:
        return [list(range(s.layers[0], s.layers[1])) for s in sorted(mapping.stages, key=lambda s: s.stage)]
    blocks = workload.block_layers
    others = [li.index for li in workload.layers if li.index not in blocks]
    layout = mapping.pipeline_layers if len(mapping.pipeline_layers or []) == mapping.pp * chunks else None
    return engine_virtual_stage_layers(blocks, others, mapping.pp * chunks, layout)


@dataclass
class StageLayout:
    """Stages, their devices and layers; ``problem`` says why there is no layout (then all is empty)."""

    devices: list[Device] = field(default_factory=list)
    device_stage: dict[str, int] = field(default_factory=dict)  # device node id → pipeline stage
    stage_devices: list[list[int]] = field(default_factory=list)  # all replicas, replica-major
    stage_layers: list[list[LayerRange]] = field(default_factory=list)
    layer_stage: dict[int, int] = field(default_factory=dict)
    layers: int = 0  # the workload's layer count
    explicit: bool = False
    problem: str = ""

    @property
    def stages(self) -> int:
        return len(self.stage_devices)

    def label(self, stage: int) -> str:
        return format_ranges(self.stage_layers[stage]) if 0 <= stage < self.stages else ""

    def contiguous_stages(self) -> list[tuple[LayerRange, list[int]]]:
        """(layers, devices) per stage when every stage holds one range of layers (no interleaving)."""
        if any(len(r) != 1 for r in self.stage_layers):
            return []
        return [(r[0], devs) for r, devs in zip(self.stage_layers, self.stage_devices, strict=True)]


def stage_layout(project: Project, chunks: int | None = None) -> StageLayout:
    """The layout of ``project``'s mapping (``chunks`` overrides the model chunks per device), cached per
    project value; callers only read it."""
    for p, c, layout in _LAYOUTS:
        if p is project and c == chunks:
            return layout
    layout = _stage_layout(project, chunks)
    _remember(_LAYOUTS, (project, chunks, layout))
    return layout


def _stage_layout(project: Project, chunks: int | None) -> StageLayout:
    m = project.mapping
    too_large = estimate(project).problems()
    if too_large:  # elaborating it here, on the GUI thread, would hang the window
        return StageLayout(problem="; ".join(str(p) for p in too_large))
    try:
        workload = workload_graph(project.workload)
        graph = elaborated(project.hardware, m.devices)
        cp = m.cp if project.run.mode is Mode.train else 1  # as ``engine.plan.plan.build_plan`` places them:
        groups = stage_groups(graph.devices, m if cp == 1 else m.model_copy(update={"dp": m.dp * cp}))  # dp × cp
    except (ValueError, TypeError, KeyError) as exc:
        return StageLayout(problem=str(exc))
    if chunks is None:
        chunks = m.interleave if m.schedule is Schedule.interleaved and not m.stages else 1
    per_virtual = virtual_stage_layers(m, workload, chunks)
    layout = StageLayout(devices=graph.devices, layers=len(workload.layers), explicit=bool(m.stages))
    for r, replicas in enumerate(groups):
        devs = [d for group in replicas for d in group]
        layout.stage_devices.append(devs)
        for d in devs:
            layout.device_stage[graph.devices[d].node] = r
        layers = [i for c in range(chunks) if c * m.pp + r < len(per_virtual) for i in per_virtual[c * m.pp + r]]
        layout.stage_layers.append(to_ranges(layers))
        layout.layer_stage.update({i: r for i in layers})
    return layout
