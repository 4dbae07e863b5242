"""The grid of cores inside one device (``Compute.grid``) as the canvas draws it, and which of those cores
an op's spatial split uses. No Qt: the canvas paints what these functions return.

A run reports each matmul's split as text (``Result.spatial_splits``: "2-D 8×7, 16×50 tiles/core, K-block
8, A mcast rows, B mcast cols" or "1-D 64, 1×6 tiles/core, K-block 1, A mcast to all, B split"); the
engine lays a 2-D split on the top-left ``rows × cols`` sub-grid, and a 1-D one on the first cores in
row-major order, so that is what is marked here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from tilewright.engine.ir.hardware import Component
from tilewright.engine.ir.project import Project
from tilewright.engine.ir.tile_grid import TileGrid
from tilewright.engine.perf.spatial_chip import grid_chip
from tilewright.studio.model.split_traffic import (
    OpGemm,
    SplitShape,
    block_bytes,
    core_blocks,
    format_traffic,
    multicast_loads,
    op_dram,
    op_gemm,
    parse_shape,
    workload_gemms,
)
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
    shape: SplitShape | None = None  # the split in full (blocks in tiles), when the text gives it
    gemm: OpGemm | None = None  # the op's GEMM on one device, when the workload has it: bytes follow
    dram_read_bps: float = 0.0  # the device's DRAM as the cost model reads it (interleaved pages), B/s; 0: none
    dram_write_bps: float = 0.0
    dram_local_bps: float = 0.0  # bank-adjacent readers (a DRAM-sharded B), B/s
    dram_name: str = ""

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


def grid_device(component: Component) -> Component | None:
    """The first component at or below ``component`` with a grid of cores (where the run's splits were
    made)."""
    if core_grid(component) is not None:
        return component
    for child in component.children:
        found = grid_device(child)
        if found is not None:
            return found
    return None


def op_uses(project: Project, rows: list[dict[str, Any]]) -> list[tuple[str, CoreUse]]:
    """(chooser text, ``CoreUse``) per row of ``Result.spatial_splits``, each with its full split, its GEMM
    (bytes of blocks, multicast and DRAM) when they can be read back, and the device's DRAM bandwidth as
    the cost model sees it (``perf.spatial_chip``)."""
    device = grid_device(project.hardware)
    grid = core_grid(device) if device is not None else None
    ops = workload_gemms(project)
    dram = next((m for m in device.memories if m.kind.value != "sram"), None) if device is not None else None
    chip = grid_chip(device.compute, dram) if device is not None and device.compute is not None else None
    bandwidth = {}
    if chip is not None and chip.has_dram and dram is not None:
        bandwidth = {"dram_read_bps": chip.dram_read_Bps(), "dram_write_bps": chip.dram_write_Bps(),
                     "dram_local_bps": chip.dram_read_Bps(interleaved=False), "dram_name": dram.name}
    out = []
    for row in rows:
        text = str(row.get("split", ""))
        use = parse_split(text, f"{row['op']} ({row['where']})")
        if use is None:
            continue
        shape = parse_shape(text)
        gemm = op_gemm(project, str(row["op"]), shape, grid.tile, ops) if shape is not None and grid else None
        out.append((f"{split_label(row)}: {text}", replace(use, shape=shape, gemm=gemm, **bandwidth)))
    return out


def core_block_caption(use: CoreUse) -> str:
    """"block per core 16 × 48 tiles = 512 × 1536 elements · 1.5 MiB bf16 (block row, block column)"."""
    s, g = use.shape, use.gemm
    if s is None:
        return ""
    tiles = f"block per core {s.per_m} × {s.per_n} tiles"
    if g is None:
        return tiles
    return (f"{tiles} = {s.per_m * g.tile} × {s.per_n * g.tile} elements · "
            f"{format_traffic(block_bytes(s, g))} {g.fmt_a}")


def traffic_caption(use: CoreUse, grid_rows: int, grid_cols: int) -> list[str]:
    """The op's NoC multicast per link and its DRAM bytes, one line each (empty without the GEMM)."""
    s, g = use.shape, use.gemm
    if s is None or g is None:
        return []
    loads = multicast_loads(grid_rows, grid_cols, s, g)
    parts = []
    for operand in ("A", "B"):
        mine = [ld.nbytes for ld in loads if ld.operand == operand]
        if mine:
            parts.append(f"{operand} {format_traffic(max(mine))}/link on {len(mine)} links")
    d = op_dram(s, g)
    dram = (f"DRAM per op: read A {format_traffic(d.read_a)} + B {format_traffic(d.read_b)}, "
            f"write {format_traffic(d.write)}")
    noc = ["NoC multicast per op: " + " · ".join(parts), "(bars between cores: bytes per link, red = busiest)"]
    return (noc if parts else []) + [dram]


def core_tooltip(use: CoreUse, row: int, col: int, grid_rows: int, grid_cols: int) -> str:
    """What core (row, col) does in the op: which output block it holds (block and element ranges of C),
    its size in tiles and bytes, and where its operands come from; or that the op leaves it idle."""
    s, g = use.shape, use.gemm
    head = f"core ({row}, {col})"
    if s is None:
        return f"{head}: {use.label}"
    br, bc, grp = (int(v) for v in core_blocks(grid_rows, grid_cols, s)[row, col])
    if br < 0:
        return f"{head}: idle in {use.label}"
    lines = [f"{head}: output block ({br}, {bc})" + (f", K group {grp}" if s.k_split > 1 else "") + f" of {use.label}"]
    if g is not None:
        t = g.tile
        m0, n0 = br * s.per_m * t, bc * s.per_n * t
        lines.append(f"C rows {m0}–{m0 + s.per_m * t - 1}, columns {n0}–{n0 + s.per_n * t - 1} (elements)")
    lines.append(core_block_caption(use))
    if s.kind == "2d":
        lines.append(f"A panel from core ({row}, {grp * s.cols}) along the row, "
                     f"B panel from core (0, {col}) down the column")
    else:
        lines.append(f"{'A' if s.kind == '1d_in0' else 'B'} from core (0, 0), multicast to every used core")
    return "\n".join(lines)
