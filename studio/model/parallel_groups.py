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

import re
from dataclasses import dataclass
from enum import Enum

import numpy as np
from tilewright.engine.ir.mapping import Mapping
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.plan.experts import expert_tp_of
from tilewright.engine.plan.served_experts import served_ep
from tilewright.studio.mapping import StageLayout, to_ranges
from tilewright.studio.model.level_cells import GridCells


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


_INSTANCE = re.compile(r"^(.*)\[(\d+)\]$")  # "gpu[3]": one index (a mesh's "die[1,0]" is left as named)


def _cell_names(names: list[str]) -> str:
    """Cells by their instance names, runs of one kind compressed: "gpu 0–7", "node 2, 5"; else listed."""
    parsed = [_INSTANCE.match(n) for n in names]
    if parsed and all(parsed) and len({m.group(1) for m in parsed if m}) == 1:
        kind = parsed[0].group(1) if parsed[0] else ""
        ranges = to_ranges([int(m.group(2)) for m in parsed if m])
        return f"{kind} " + ", ".join(f"{a}" if b - a == 1 else f"{a}–{b - 1}" for a, b in ranges)
    return ", ".join(names[:4]) + (f" … ({len(names)} cells)" if len(names) > 4 else "")


def groups_here(groups: Groups, cells: dict[str, GridCells]) -> dict[int, str]:
    """Where each group with devices at the shown level sits, in the level's own cells: "gpu 0–7" when it
    fills whole cells (inside an opened node: which GPUs), "4 of node 0's 8 devices" when it shares a cell
    with other groups (a node drawn as one cell: open it to see which). Keyed by group, in group order;
    groups with no device here are left out (another instance of the level holds them)."""
    parts: dict[int, list[tuple[str, int, int]]] = {}
    for gc in cells.values():
        for node, members in zip(gc.nodes, gc.members, strict=True):
            ids = groups.of_device[members]
            ids, counts = np.unique(ids[ids >= 0], return_counts=True)
            for g, n in zip(ids.tolist(), counts.tolist(), strict=True):
                parts.setdefault(g, []).append((node.rpartition("/")[2], n, len(members)))
    out: dict[int, str] = {}
    for g in sorted(parts):
        whole = [name for name, n, total in parts[g] if n == total]
        shared = [(name, n, total) for name, n, total in parts[g] if n < total]
        pieces = [_cell_names(whole)] if whole else []
        pieces += [f"{n} of {_cell_names([name])}'s {total} devices" for name, n, total in shared[:2]]
        if len(shared) > 2:
            pieces.append(f"{len(shared) - 2} more cells in part")
        out[g] = " + ".join(pieces)
    return out
