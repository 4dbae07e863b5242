"""What one op's spatial split puts on each core and moves over the NoC and DRAM, as the core-grid view
shows it. No Qt, and no formula of its own: the split is read back from the run's text and its traffic is
computed by the engine (``engine.results.split_traffic`` → ``engine.perf.spatial_traffic``, the module
whose DRAM bytes ``spatial_cost`` charges); this module turns that into links, blocks and text with units.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tilewright.engine.perf.spatial_traffic import first_cores, group_origins
from tilewright.engine.results.split_traffic import SplitRecord
from tilewright.studio.units import format_number


@dataclass(frozen=True)
class LinkLoad:
    """Bytes one operand's multicast puts on one NoC link between neighbouring cores (row, col)."""

    operand: str  # "A" | "B"
    src: tuple[int, int]
    dst: tuple[int, int]
    nbytes: float


def multicast_loads(rec: SplitRecord) -> list[LinkLoad]:
    """Every NoC link the op's multicast trees use, per operand, with the bytes it carries over the whole op
    (the engine's trees: each tree's bytes once per link, trees of one operand summed where they share)."""
    out = []
    for operand in ("A", "B"):
        for (src, dst), nbytes in rec.traffic.link_loads(operand).items():
            out.append(LinkLoad(operand, src, dst, nbytes))
    return out


def link_totals(rec: SplitRecord) -> dict[tuple[tuple[int, int], tuple[int, int]], float]:
    """Bytes per link, both operands together (what the heat map colours)."""
    return rec.traffic.link_loads()


def core_blocks(grid_rows: int, grid_cols: int, rec: SplitRecord) -> np.ndarray:
    """``grid_rows × grid_cols × 3``: each core's output block (block row, block column, K group), -1 where
    the core is unused — where the engine lays the split (``spatial_traffic.group_origins``, ``first_cores``)."""
    s = rec.split
    out = np.full((grid_rows, grid_cols, 3), -1, dtype=int)
    grid = (grid_rows, grid_cols)
    if s.kind == "2d":
        origins, _ = group_origins(grid, s)
        for g, (r0, c0) in enumerate(origins):
            for r in range(s.rows):
                for c in range(s.cols):
                    out[(r0 + r) % grid_rows, c0 + c] = (r, c, g)
        return out
    for i, (r, c) in enumerate(first_cores(grid, s.rows * s.cols)):
        out[r, c] = (0, i, 0) if s.kind == "1d_in0" else (i, 0, 0)
    return out


def format_traffic(nbytes: float) -> str:
    """Bytes moved, always in decimal prefixes ("12.6 MB", "262 kB"), so amounts in one line compare."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(nbytes) >= scale:
            return f"{format_number(nbytes / scale)} {prefix}B"
    return f"{format_number(nbytes)} B"


def block_bytes(rec: SplitRecord) -> float:
    """Bytes of one core's output block."""
    s = rec.split
    return s.per_m * s.per_n * rec.chip.tile_bytes(rec.problem.fmt_out)

