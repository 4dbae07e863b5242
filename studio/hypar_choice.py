"""HyPar's per-layer choice for the project as it stands, and the mapping's own, as the workload panel
shows them: one short text per layer, "dp" or "mp" per level of halving ("dp·dp·mp·mp" on 16 devices).

The inputs come from the project (the mapping's devices, its global batch, the run's data type), so the
column follows every edit without a form of its own; the Explore panel's HyPar tab is where they are
varied. The dynamic programme is linear in layers: 0.3 ms for VGG-A on 16 devices, 1 ms for VGG-E on
1,024, so it runs on the GUI thread. No Qt here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tilewright.engine.errors import InputError
from tilewright.engine.ir.mapping import LayerParallelism, Mapping
from tilewright.engine.ir.project import Project
from tilewright.engine.search.hypar.partition import Partition, hypar, hypar_layers, uniform
from tilewright.engine.search.hypar.report import apply_partition
from tilewright.studio.mapping import workload_graph

SEPARATOR = "·"
MAX_ACCELERATORS = 1024


def joined(choices: list[str]) -> str:
    return SEPARATOR.join(choices)


def accelerators_for(devices: int) -> int:
    """The largest power of two not above ``devices`` (HyPar halves the array level by level)."""
    return min(1 << (devices.bit_length() - 1), MAX_ACCELERATORS) if devices >= 1 else 0


@dataclass
class HyparChoice:
    """HyPar on the project's workload, or why not (``problem``); ``applies`` is False for workloads
    that are not chains of conv/fc layers, where the panel shows no HyPar column at all."""

    applies: bool = False
    problem: str = ""
    accelerators: int = 0
    devices: int = 0
    batch: int = 0
    dtype: str = ""
    partition: Partition | None = None
    by_layer: dict[int, str] = field(default_factory=dict)  # workload layer index → "dp·dp·mp·mp"
    total_bytes: float = 0.0
    dp_bytes: float = 0.0

    @property
    def levels(self) -> int:
        return len(self.partition.levels) if self.partition is not None else 0


def hypar_choice(project: Project) -> HyparChoice:
    try:
        layers = hypar_layers(workload_graph(project.workload))
    except (InputError, ValueError, TypeError) as exc:
        return HyparChoice(problem=str(exc))
    m, dtype = project.mapping, project.run.dtype.value
    n = accelerators_for(m.devices)
    out = HyparChoice(applies=True, accelerators=n, devices=m.devices, batch=m.global_batch, dtype=dtype)
    if n < 2:
        out.problem = "the mapping uses one device: nothing to partition"
        return out
    best = hypar(layers, n, m.global_batch, dtype)
    out.partition = best
    out.total_bytes = best.total_bytes
    out.dp_bytes = uniform(layers, n, m.global_batch, dtype, "dp").total_bytes
    out.by_layer = {
        layer.index: joined([lv.choices[i] for lv in best.levels]) for i, layer in enumerate(best.layers)
    }
    return out


def stores_levels() -> bool:
    """Whether the mapping IR keeps a choice per level (``LayerParallelism.levels``) or only one."""
    return "levels" in LayerParallelism.model_fields


def layer_choice_text(choice: Any) -> str:
    """One ``LayerParallelism`` as shown: its levels when it has them; a single choice alone means that
    choice at every level (older IR versions had only ``parallelism``)."""
    levels = getattr(choice, "levels", None)
    if levels:
        return joined([str(getattr(c, "value", c)) for c in levels])
    single = getattr(choice, "parallelism", None)
    return f"{getattr(single, 'value', single)} (every level)" if single else ""


def mapped_choices(mapping: Mapping, layers: list[int]) -> dict[int, str]:
    """The mapping's ``layer_parallelism`` for ``layers`` (those it does not list are data-parallel at
    every level); nothing at all when it is not set."""
    given = {lp.layer: layer_choice_text(lp) for lp in mapping.layer_parallelism}
    if not given:
        return {}
    return {i: given.get(i, "dp (default)") for i in layers}


def mapping_with(project: Project, choice: HyparChoice) -> tuple[Mapping | None, str]:
    """The mapping that runs HyPar's partition, written by the engine's own ``apply_partition`` (per-layer
    choices and HyPar's array: dp = the devices it partitions, one micro-batch), or why there is none."""
    if choice.partition is None or not choice.partition.levels:
        return None, choice.problem
    try:
        return apply_partition(project, choice.partition).mapping, ""
    except (InputError, ValueError) as exc:
        return None, str(exc)


def is_applied(project: Project, target: Mapping | None) -> bool:
    return target is not None and target == project.mapping
