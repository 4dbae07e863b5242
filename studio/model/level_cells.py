"""Which devices sit under each cell of the viewed level, as small rasters the painters index into.

A cell of a grid item is one instance of a child component (``palm-wafer/die[2,1]``); the devices
under it are named below that instance in the elaborated graph. Each cell gets a raster of device
indices laid out by the devices' grid coordinates (a die's 4 × 4 tiles) or, for devices behind a
switch, in a row (a node's 8 GPUs), so the stage colours and the heat map show *which* tiles of a die
do what. Rasters are capped at ``MAX_RASTER`` per side by sampling. Pure numpy, no Qt.

Sorting 262,144 tiles into their cells takes ~0.2 s, so the last few answers are kept, keyed by the
(immutable) level component and device list they were computed from: a project edit makes new ones, and
a large project's opening worker (``studio.opening``) computes the first level's cells ahead of the GUI
thread, which then finds them here (so this lives in the Qt-free model, not with the canvas's items).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import numpy as np
from tilewright.engine.hardware.model import Device, index_label
from tilewright.engine.ir.hardware import Component

MAX_RASTER = 16
_CACHE_SIZE = 4


def instance_name(component: Component, index: int) -> str:
    """``die[2,1]`` for instance ``index`` (row-major) of ``component``, as the elaborated graph names it."""
    r, c = divmod(index, component.cols)
    return f"{component.name}{index_label(component.rows, component.cols, r, c)}"


def level_instance(hardware: Component, level_path: str, choice: dict[str, int]) -> str:
    """Node id of the instance of ``level_path`` the canvas shows: the root, then for each deeper
    component the instance picked by ``choice`` (its path → index), the first one by default."""
    names = level_path.split("/")
    node, comp = hardware.name, hardware
    for depth in range(1, len(names)):
        comp = next(c for c in comp.children if c.name == names[depth])
        path = "/".join(names[: depth + 1])
        index = min(choice.get(path, 0), comp.count - 1)
        node = f"{node}/{instance_name(comp, index)}"
    return node


@dataclass
class GridCells:
    """Cell ``i`` of one grid item is instance ``nodes[i]``; ``raster[i]`` its devices as drawn (−1 =
    none; sampled when a cell holds more than ``MAX_RASTER`` per side), ``members[i]`` all of them (what a
    label counts and a layer drop places onto: a 512 × 512-tile die drawn from 16 × 16 samples still
    holds every stage)."""

    nodes: list[str]
    raster: np.ndarray  # int32, (cells, rows, cols)
    members: list[np.ndarray] = field(default_factory=list)  # int32 device indices per cell, sorted

    def __post_init__(self) -> None:
        if not self.members:
            self.members = [np.unique(r[r >= 0]).astype(np.int32) for r in self.raster]

    def devices(self, cell: int) -> list[int]:
        return self.members[cell].tolist() if 0 <= cell < len(self.nodes) else []

    def all_devices(self) -> list[int]:
        return np.unique(np.concatenate(self.members)).tolist() if self.members else []


def _cell_raster(devs: list[Device]) -> np.ndarray:
    coords = [d.coord for d in devs]
    if devs and all(c is not None and len(c) == 2 for c in coords):
        r0 = min(c[0] for c in coords)  # type: ignore[index]
        c0 = min(c[1] for c in coords)  # type: ignore[index]
        rows = 1 + max(c[0] for c in coords) - r0  # type: ignore[index]
        cols = 1 + max(c[1] for c in coords) - c0  # type: ignore[index]
        out = np.full((rows, cols), -1, np.int32)
        for d in devs:
            out[d.coord[0] - r0, d.coord[1] - c0] = d.index  # type: ignore[index]
        return out
    out = np.full((1, max(1, len(devs))), -1, np.int32)
    for i, d in enumerate(devs):
        out[0, i] = d.index
    if out.shape[1] > MAX_RASTER:  # a long row of devices folds into a near-square block
        cols = math.ceil(math.sqrt(out.shape[1]))
        rows = math.ceil(out.shape[1] / cols)
        folded = np.full(rows * cols, -1, np.int32)
        folded[: out.shape[1]] = out[0]
        out = folded.reshape(rows, cols)
    return out


def _fit(raster: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Sample or pad ``raster`` to ``rows × cols``."""
    h, w = raster.shape
    ri = (np.arange(rows) * h // rows) if h > rows else np.arange(rows)
    ci = (np.arange(cols) * w // cols) if w > cols else np.arange(cols)
    out = np.full((rows, cols), -1, np.int32)
    rr, cc = np.meshgrid(ri, ci, indexing="ij")
    ok = (rr < h) & (cc < w)
    out[ok] = raster[rr[ok], cc[ok]]
    return out


_CELLS: list[tuple[Component, str, str, list[Device], dict[str, GridCells]]] = []
_LOCK = threading.Lock()


def level_cells(level: Component, level_path: str, level_node: str, devices: list[Device]) -> dict[str, GridCells]:
    """``GridCells`` of each child of the shown level instance ``level_node``, keyed by child path (the
    answer is shared: callers only read it)."""
    for entry in _CELLS:
        if entry[0] is level and entry[1] == level_path and entry[2] == level_node and entry[3] is devices:
            return entry[4]
    cells = _level_cells(level, level_path, level_node, devices)
    with _LOCK:
        _CELLS.insert(0, (level, level_path, level_node, devices, cells))
        del _CELLS[_CACHE_SIZE:]
    return cells


def _level_cells(level: Component, level_path: str, level_node: str, devices: list[Device]) -> dict[str, GridCells]:
    depth = level_node.count("/") + 2
    by_cell: dict[str, list[Device]] = {}
    prefix = level_node + "/"
    for d in devices:
        if d.node.startswith(prefix):
            by_cell.setdefault("/".join(d.node.split("/", depth)[:depth]), []).append(d)
    out: dict[str, GridCells] = {}
    for child in level.children:
        nodes = [f"{level_node}/{instance_name(child, i)}" for i in range(child.count)]
        rasters = [_cell_raster(by_cell.get(n, [])) if n in by_cell else np.full((1, 1), -1, np.int32) for n in nodes]
        rows = min(MAX_RASTER, max(r.shape[0] for r in rasters))
        cols = min(MAX_RASTER, max(r.shape[1] for r in rasters))
        stack = np.stack([r if r.shape == (rows, cols) else _fit(r, rows, cols) for r in rasters])
        members = [np.sort(np.fromiter((d.index for d in by_cell.get(n, ())), np.int32)) for n in nodes]
        out[f"{level_path}/{child.name}"] = GridCells(nodes, stack, members)
    return out
