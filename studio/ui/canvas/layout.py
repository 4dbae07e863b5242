"""Geometry of one level: where each child's grid sits and where each instance cell is.

Pure arithmetic on the model (no items), so the scene, the link drawing and tests agree on the same
numbers. Saved positions (``project.canvas.positions``, keyed by component path) win; children without
one are laid out left to right after the ones that have one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilewright.engine.ir.hardware import Component
from tilewright.studio.ui.canvas.style import CELL, GAP, ITEM_SPACING, PLANE_GAP

Point = tuple[float, float]


def grid_size(rows: int, cols: int) -> tuple[float, float]:
    """Width and height of a rows × cols grid of cells in scene units."""
    return cols * CELL + (cols - 1) * GAP, rows * CELL + (rows - 1) * GAP


@dataclass(frozen=True)
class GridShape:
    """How a child's instances are drawn: ``planes`` side by side, each ``rows × cols``.

    Usually the component's own rows × cols in one plane. When the parent's interconnect gives ``dims``
    (a TPU cube is 1 × 64 chips on a 4 × 4 × 4 torus) the drawing follows the network's shape instead,
    so neighbours on the canvas are neighbours on the network. Instances are numbered row-major
    within a plane, planes in order.
    """

    rows: int
    cols: int
    planes: int = 1
    folded: bool = False  # a line of instances drawn as rows × cols (behind a switch): names stay [i]

    @property
    def plane_width(self) -> float:
        return grid_size(self.rows, self.cols)[0]

    @property
    def plane_stride(self) -> float:
        return self.plane_width + PLANE_GAP

    def size(self) -> tuple[float, float]:
        w, h = grid_size(self.rows, self.cols)
        return self.planes * w + (self.planes - 1) * PLANE_GAP, h

    def locate(self, index: int) -> tuple[int, int, int]:
        """(plane, row, col) of instance ``index``."""
        plane, rest = divmod(index, self.rows * self.cols)
        return (plane, *divmod(rest, self.cols))

    def cell_center(self, index: int) -> Point:
        plane, row, col = self.locate(index)
        return plane * self.plane_stride + col * (CELL + GAP) + CELL / 2, row * (CELL + GAP) + CELL / 2


LINE_WRAP = 8  # a line of more instances than this behind a switch is folded into a near-square block
GRID_LINKED = ("mesh", "torus", "ring")


def _folded(n: int) -> GridShape:
    """A line of ``n`` instances as rows × cols: one row up to ``LINE_WRAP``, else the most square exact
    factorisation (a prime count stays a line: every cell of a grid must be an instance)."""
    if n <= LINE_WRAP:
        return GridShape(1, n, folded=True)
    cols = min((c for c in range(1, n + 1) if n % c == 0), key=lambda c: (abs(c - math.sqrt(n * 2)), c))
    return GridShape(n // cols, cols, folded=True) if 1 < cols < n else GridShape(1, n, folded=True)


def display_shape(level: Component, child: Component) -> GridShape:
    """The drawing shape of ``child`` under ``level`` (see ``GridShape``). Behind a switch (or nothing)
    the position of an instance means nothing, so a column of nodes — a DGX cluster grown to 32 nodes —
    is drawn as a row or a block under the switch bar, not as a tall thin strip (only a grown or long
    column: a short one the user laid out stays as it is)."""
    ic = level.interconnect
    dims = ic.dims if ic is not None else None
    if dims and len(level.children) == 1 and math.prod(dims) == child.count and len(dims) > 1:
        if len(dims) == 2:
            return GridShape(dims[0], dims[1])
        return GridShape(dims[1], dims[2], planes=dims[0])
    linked_as_grid = ic is not None and ic.topology.value in GRID_LINKED
    # A short column the user drew stays as drawn; a grown one, or a long one, is folded.
    if not linked_as_grid and child.cols == 1 and (child.growable or child.rows > LINE_WRAP):
        return _folded(child.rows)
    return GridShape(child.rows, child.cols)


def cell_center(index: int, cols: int) -> Point:
    row, col = divmod(index, cols)
    return col * (CELL + GAP) + CELL / 2, row * (CELL + GAP) + CELL / 2


@dataclass(frozen=True)
class Placement:
    path: str
    x: float
    y: float
    width: float
    height: float
    first_instance: int  # row-major index of this child's first instance among all children's instances


def auto_positions(level: Component, level_path: str, saved: dict[str, Point]) -> list[Placement]:
    """Placements of ``level``'s children, saved positions first, others in a row to their right."""
    placements: list[Placement] = []
    sized = [(f"{level_path}/{c.name}", c, display_shape(level, c).size()) for c in level.children]
    placed = [saved[p] for p, _, _ in sized if p in saved]
    right = max((saved[p][0] + w for p, _, (w, _h) in sized if p in saved), default=None)
    x = (right + ITEM_SPACING) if right is not None else 0.0
    top = min((y for _x, y in placed), default=0.0)
    first = 0
    for path, child, (w, h) in sized:
        if path in saved:
            px, py = saved[path]
        else:
            px, py = x, top
            x += w + ITEM_SPACING
        placements.append(Placement(path, px, py, w, h, first))
        first += child.count
    return placements
