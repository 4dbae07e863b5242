"""Which devices form one expert-parallel or one context-parallel group, for the canvas to colour them.

Read from the layout the engine places (``studio.mapping.stage_layout``: each stage's devices replica by
replica, tp devices a replica, the replicas dp × cp of them), with the engine's own grouping
(``engine.plan.group_comm``): context ranks sit next to the tensor ranks, so replicas d·cp … d·cp + cp − 1
are one ring (``cp_group_collective``) — tp × cp consecutive devices of the stage; the experts' all-to-all
joins replicas k·ep … k·ep + ep − 1 (``ep_group_collective``) — ep × tp consecutive devices, or, with expert
tensor parallelism folded below tp, the stage's ranks re-read in blocks of ep × etp (``folded_groups``). A
block is the set of devices whose tokens or keys stay among themselves: each tensor rank (or expert-tensor
rank) of it exchanges with its peers in the block. No Qt.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np
from tilewright.engine.ir.mapping import Mapping
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.plan.experts import expert_tp_of
from tilewright.engine.plan.served_experts import served_ep
from tilewright.studio.mapping import StageLayout


class GroupKind(Enum):
    expert = "expert"
    context = "context"


@dataclass(frozen=True)
class Groups:
    """``of_device[d]``: the group of device index d (−1: in no stage); groups are numbered stage by stage."""

    kind: GroupKind
    degree: int  # ep or cp
    block: int  # devices per group
    of_device: np.ndarray
    stage_of_group: list[int]

    @property
    def count(self) -> int:
        return len(self.stage_of_group)


def degree(project: Project, kind: GroupKind) -> int:
    """ep or cp as the engine places them. An inference pass keeps every sequence whole (cp 1) and runs expert
    parallelism only where ep divides the data-parallel attention ranks (``plan.served_experts.served_ep``;
    else every device holds all the routed experts), so an inference project that keeps a training mapping's
    cp, or an ep it cannot serve, shows no groups."""
    m = project.mapping
    if project.run.mode is not Mode.train:
        return served_ep(m) if kind is GroupKind.expert else 1
    return m.ep if kind is GroupKind.expert else m.cp


def idle_degree(project: Project, kind: GroupKind) -> int:
    """The mapping's ep or cp when the run ignores it (an inference project keeping a training mapping's),
    else 1: what the canvas's key names when it shows no groups."""
    m = project.mapping
    asked = m.ep if kind is GroupKind.expert else m.cp
    return asked if asked > 1 and degree(project, kind) == 1 else 1


def block_size(mapping: Mapping, kind: GroupKind, deg: int) -> int:
    """Devices of one group: ep × etp (etp = tp unless folded) or tp × cp."""
    if kind is GroupKind.expert:
        return deg * expert_tp_of(mapping)
    return mapping.tp * deg


def parallel_groups(project: Project, layout: StageLayout, kind: GroupKind) -> Groups | None:
    """The groups of ``kind`` over the layout's devices, or None when the degree is 1 (no such group) or the
    layout has none."""
    deg = degree(project, kind)
    if deg <= 1 or layout.problem or not layout.stage_devices:
        return None
    block = block_size(project.mapping, kind, deg)
    of_device = np.full(len(layout.devices) + 1, -1, np.int32)  # the extra slot answers index −1
    stage_of_group: list[int] = []
    for s, devs in enumerate(layout.stage_devices):
        if not devs or len(devs) % block:
            return None  # a placement by hand that does not split into whole groups: nothing to draw
        first = len(stage_of_group)
        n = len(devs) // block
        of_device[devs] = first + np.arange(len(devs)) // block
        stage_of_group.extend([s] * n)
    return Groups(kind, deg, block, of_device, stage_of_group)
