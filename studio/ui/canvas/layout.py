"""Geometry of one level: where each child's grid sits and where each instance cell is.

Pure arithmetic on the model (no items), so the scene, the link drawing and tests agree on the same
numbers. Saved positions (``project.canvas.positions``, keyed by component path) win; children without
one are laid out left to right after the ones that have one.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.ir.hardware import Component
from studio.ui.canvas.style import CELL, GAP, ITEM_SPACING

Point = tuple[float, float]


def grid_size(rows: int, cols: int) -> tuple[float, float]:
    """Width and height of a rows × cols grid of cells in scene units."""
    return cols * CELL + (cols - 1) * GAP, rows * CELL + (rows - 1) * GAP


def cell_origin(row: int, col: int) -> Point:
    """Top-left of cell (row, col) relative to its grid's top-left."""
    return col * (CELL + GAP), row * (CELL + GAP)


def cell_center(index: int, cols: int) -> Point:
    row, col = divmod(index, cols)
    x, y = cell_origin(row, col)
    return x + CELL / 2, y + CELL / 2


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
    sized = [(f"{level_path}/{c.name}", c, grid_size(c.rows, c.cols)) for c in level.children]
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
