"""The grid of cores inside one device (``Compute.grid``) as the canvas draws it, and which of those cores
an op's spatial split uses. No Qt: the canvas paints what these functions return.

A run reports each matmul's split as text (``Result.spatial_splits``: "2-D 8×7, 16×50 tiles/core, K-block
8, A mcast rows, B mcast cols" or "1-D 64, 1×6 tiles/core, K-block 1, A mcast to all, B split"); the
engine lays a 2-D split on the top-left ``rows × cols`` sub-grid, and a 1-D one on the first cores in
row-major order, so that is what is marked here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from tilewright.engine.ir.hardware import Component
from tilewright.engine.ir.tile_grid import TileGrid
from tilewright.studio.units import BYTES, format_value

_HEAD = re.compile(r"^\s*(?:(2)-D\s+(\d+)\s*[×x]\s*(\d+)|(1)-D\s+(\d+))")
_KSPLIT = re.compile(r"K-split\s+(\d+)")


def core_grid(component: Component) -> TileGrid | None:
    """The component's grid of cores, or None (a plain device, or one with children)."""
    compute = component.compute
    return compute.grid if compute is not None else None


def core_caption(grid: TileGrid) -> str:
    """"8 × 8 cores · 1.5 MB L1 each"."""
    return f"{grid.rows} × {grid.cols} cores · {format_value(grid.l1_bytes, BYTES)} L1 each"


@dataclass(frozen=True)
class CoreUse:
    """Which cores of a ``rows × cols`` grid one op uses and how its operands travel.

    ``a_along`` / ``b_along``: "rows" (multicast along each used row), "all" (one sender to every used
    core) or "" (split, not multicast)."""

    kind: str  # "2d" | "1d"
    rows: int  # 2-D: the sub-grid used; 1-D: 1
    cols: int  # 2-D: the sub-grid used; 1-D: the number of cores
    k_split: int = 1
    a_along: str = ""
    b_along: str = ""
    label: str = ""

    @property
    def cores(self) -> int:
        return self.rows * self.cols * self.k_split


def parse_split(text: str, label: str = "") -> CoreUse | None:
    """``CoreUse`` of one split as ``Split.describe`` writes it; None if the text is not a split."""
    m = _HEAD.match(text)
    if m is None:
        return None
    ks = _KSPLIT.search(text)
    k_split = int(ks.group(1)) if ks else 1
    if m.group(1):
        return CoreUse("2d", int(m.group(2)), int(m.group(3)), k_split, "rows", "cols", label)
    n = int(m.group(5))
    b_all = "B mcast to all" in text
    return CoreUse("1d", 1, n, k_split, "" if b_all else "all", "all" if b_all else "", label)


def split_label(row: dict[str, Any]) -> str:
    """"stage 0, prefill · 32 × mlp_up" — one row of ``Result.spatial_splits``, as the op chooser lists it."""
    return f"{row['where']} · {row['count']} × {row['op']}"


def used_mask(grid_rows: int, grid_cols: int, use: CoreUse | None) -> np.ndarray:
    """Boolean ``grid_rows × grid_cols``: the cores ``use`` occupies (2-D: the top-left sub-grid, K-split
    groups side by side along the columns; 1-D: the first cores, row by row)."""
    mask = np.zeros((grid_rows, grid_cols), bool)
    if use is None:
        return mask
    if use.kind == "2d":
        cols = min(grid_cols, use.cols * use.k_split)
        mask[: min(grid_rows, use.rows), :cols] = True
    else:
        mask.reshape(-1)[: min(grid_rows * grid_cols, use.cores)] = True
    return mask


def multicast_lines(mask: np.ndarray, use: CoreUse) -> list[tuple[str, tuple[int, int], tuple[int, int]]]:
    """Lines to draw, in core coordinates: (operand, (row, col) from, (row, col) to). A 2-D split sends A
    along each used row and B down each used column; a 1-D split sends the multicast operand from the
    first core along every used row (one line per row, and one down the first column to reach them)."""
    out: list[tuple[str, tuple[int, int], tuple[int, int]]] = []
    used_rows = [r for r in range(mask.shape[0]) if mask[r].any()]
    for r in used_rows:
        cs = np.flatnonzero(mask[r])
        if use.a_along in ("rows", "all") and len(cs) > 1:
            out.append(("A", (r, int(cs[0])), (r, int(cs[-1]))))
        if use.b_along == "all" and len(cs) > 1:
            out.append(("B", (r, int(cs[0])), (r, int(cs[-1]))))
    if use.b_along == "cols":
        for c in range(mask.shape[1]):
            rs = np.flatnonzero(mask[:, c])
            if len(rs) > 1:
                out.append(("B", (int(rs[0]), c), (int(rs[-1]), c)))
    elif use.a_along == "all" or use.b_along == "all":
        if len(used_rows) > 1:
            out.append(("A" if use.a_along == "all" else "B", (used_rows[0], 0), (used_rows[-1], 0)))
    return out
