"""The grid of cores inside one device (``Compute.grid``) as the canvas draws it, and which of those cores
an op's spatial split uses. No Qt: the canvas paints what these functions return.

A run reports each matmul's split as text (``Result.spatial_splits``: "2-D 8×7, 16×50 tiles/core, K-block
8, A mcast rows, B mcast cols" or "1-D 64, 1×6 tiles/core, K-block 1, A mcast to all, B split"); the
engine reads it back (``engine.results.split_traffic``) with the op's GEMM and its traffic, and lays a 2-D
split on the top-left ``rows × cols`` sub-grid (K-split groups side by side), a 1-D one on the first cores
in row-major order — which is what is marked here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from tilewright.engine.ir.hardware import Component
from tilewright.engine.ir.project import Project
from tilewright.engine.ir.tile_grid import TileGrid
from tilewright.engine.perf.spatial_traffic import first_cores, group_origins, restreams
from tilewright.engine.results import split_traffic as engine_split
from tilewright.engine.results.split_traffic import SplitReader, SplitRecord
from tilewright.studio.model.split_traffic import block_bytes, core_blocks, format_traffic, multicast_loads
from tilewright.studio.units import format_bytes

_OVER = re.compile(r"\bover\s+(\d+)\s+cores\b")


def core_grid(component: Component) -> TileGrid | None:
    """The component's grid of cores, or None (a plain device, or one with children)."""
    compute = component.compute
    return compute.grid if compute is not None else None


def core_caption(grid: TileGrid) -> str:
    """"8 × 8 cores · 1.5 MB L1 each"."""
    return f"{grid.rows} × {grid.cols} cores · {format_bytes(grid.l1_bytes)} L1 each"


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
    record: SplitRecord | None = None  # the engine's reading of the split: GEMM, chip, DRAM, traffic

    @property
    def cores(self) -> int:
        return self.rows * self.cols * self.k_split


def parse_split(text: str, label: str = "") -> CoreUse | None:
    """``CoreUse`` of one split as ``Split.describe`` writes it (read by the engine), or of an op spread
    1-D "over N cores"; None if the text is neither."""
    parsed = engine_split.parse_split(text)
    if parsed is None:  # a streamed op spread 1-D ("flash attention over 64 cores"): its cores, no multicast
        over = _OVER.search(text)
        return CoreUse("1d", 1, int(over.group(1)), label=label) if over and ";" not in text else None
    s, _ = parsed
    if s.kind == "2d":
        return CoreUse("2d", s.rows, s.cols, s.k_split, "rows", "cols", label)
    a_all = s.kind == "1d_in0"
    return CoreUse("1d", 1, s.rows * s.cols, s.k_split, "all" if a_all else "", "" if a_all else "all", label)


def split_label(row: dict[str, Any]) -> str:
    """"stage 0, prefill · 32 × mlp_up" — one row of ``Result.spatial_splits``, as the op chooser lists it."""
    return f"{row['where']} · {row['count']} × {row['op']}"


def used_mask(grid_rows: int, grid_cols: int, use: CoreUse | None) -> np.ndarray:
    """Boolean ``grid_rows × grid_cols``: the cores ``use`` occupies, where the engine lays them (2-D: the
    top-left sub-grid, K-split groups side by side; 1-D: the first cores, row by row)."""
    mask = np.zeros((grid_rows, grid_cols), bool)
    if use is None:
        return mask
    grid = (grid_rows, grid_cols)
    if use.kind == "2d":
        for r0, c0 in group_origins(grid, use)[0]:
            rows = [(r0 + r) % grid_rows for r in range(min(use.rows, grid_rows))]
            mask[np.ix_(rows, range(c0, min(grid_cols, c0 + use.cols)))] = True
    else:
        for r, c in first_cores(grid, use.cores):
            mask[r, c] = True
    return mask


def multicast_lines(mask: np.ndarray, use: CoreUse) -> list[tuple[str, tuple[int, int], tuple[int, int]]]:
    """Lines to draw, in core coordinates: (operand, (row, col) from, (row, col) to). A 2-D split sends A
    along each used row and B down each used column; a 1-D split's one tree (``spatial_traffic``) runs
    from the first core along the first row, then down every used column. With the engine's reading of
    the split, its trees themselves (``tree_lines``: K-split groups apart)."""
    if use.record is not None:
        return tree_lines(use.record)
    out: list[tuple[str, tuple[int, int], tuple[int, int]]] = []
    if use.kind == "2d":
        for r in range(mask.shape[0]):
            cs = np.flatnonzero(mask[r])
            if len(cs) > 1:
                out.append(("A", (r, int(cs[0])), (r, int(cs[-1]))))
        for c in range(mask.shape[1]):
            rs = np.flatnonzero(mask[:, c])
            if len(rs) > 1:
                out.append(("B", (int(rs[0]), c), (int(rs[-1]), c)))
        return out
    if not (use.a_along or use.b_along):
        return out
    operand = "A" if use.a_along == "all" else "B"
    first = np.flatnonzero(mask[0])
    if len(first) > 1:
        out.append((operand, (0, 0), (0, int(first[-1]))))
    for c in range(mask.shape[1]):
        rs = np.flatnonzero(mask[:, c])
        if len(rs) > 1:
            out.append((operand, (0, c), (int(rs[-1]), c)))
    return out


def tree_lines(rec: SplitRecord) -> list[tuple[str, tuple[int, int], tuple[int, int]]]:
    """The engine's multicast trees as straight runs, each from the end nearer its sender: per tree, its
    links along one row (or down one column) make one line."""
    out: list[tuple[str, tuple[int, int], tuple[int, int]]] = []
    for tree in rec.traffic.trees:
        runs: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for a, b in tree.edges:
            key = ("row", a[0]) if a[0] == b[0] else ("col", a[1])
            runs.setdefault(key, []).extend((a, b))
        for cells in runs.values():
            near = min(cells, key=lambda rc: abs(rc[0] - tree.src[0]) + abs(rc[1] - tree.src[1]))
            far = max(cells, key=lambda rc: abs(rc[0] - near[0]) + abs(rc[1] - near[1]))
            out.append((tree.operand, near, far))
    return out


def grid_device(component: Component) -> Component | None:
    """The first component at or below ``component`` with a grid of cores (where the run's splits were
    made)."""
    return engine_split.grid_device(component)


def op_uses(project: Project, rows: list[dict[str, Any]]) -> list[tuple[str, CoreUse]]:
    """(chooser text, ``CoreUse``) per row of ``Result.spatial_splits``, each with the engine's reading of
    it (``SplitRecord``: the op's GEMM, the chip, its DRAM and the split's traffic) when it can be read."""
    reader = SplitReader(project)
    out = []
    for row in rows:
        text = str(row.get("split", ""))
        use = parse_split(text, f"{row['op']} ({row['where']})")
        if use is None:
            continue
        out.append((f"{split_label(row)}: {text}", replace(use, record=reader.record(str(row["op"]), text))))
    return out


def core_block_caption(use: CoreUse) -> str:
    """"block per core 16 × 48 tiles = 512 × 1536 elements · 1.5 MB bf16"."""
    rec = use.record
    if rec is None:
        return ""
    s, tile = rec.split, rec.chip.tile
    return (f"block per core {s.per_m} × {s.per_n} tiles = {s.per_m * tile} × {s.per_n * tile} elements · "
            f"{format_traffic(block_bytes(rec))} {rec.problem.fmt_out}")


def traffic_caption(use: CoreUse, grid_rows: int, grid_cols: int) -> list[str]:
    """The op's NoC multicast per link and its DRAM bytes, one line each (empty without the GEMM). The
    grid's size is the record's (the engine lays the trees); the arguments are the canvas's, for its call."""
    rec = use.record
    if rec is None:
        return []
    loads = multicast_loads(rec)
    parts = []
    for operand in ("A", "B"):
        mine = [ld.nbytes for ld in loads if ld.operand == operand]
        if mine:
            parts.append(f"{operand} {format_traffic(max(mine))}/link on {len(mine)} links")
    d = rec.traffic.dram
    dram = (f"DRAM per op: read A {format_traffic(d.read_a)} + B {format_traffic(d.read_b)}, "
            f"write {format_traffic(d.write)}")
    _, busiest = rec.traffic.busiest_link()
    noc = ["NoC multicast per op: " + " · ".join(parts) + f" · busiest link {format_traffic(busiest)}",
           "(bars between cores: bytes per link, red = busiest)"]
    return (noc if parts else []) + [dram]


def core_tooltip(use: CoreUse, row: int, col: int, grid_rows: int, grid_cols: int) -> str:
    """What core (row, col) does in the op: which output block it holds (block and element ranges of C),
    its size in tiles and bytes, and where its operands come from; or that the op leaves it idle."""
    rec = use.record
    head = f"core ({row}, {col})"
    if rec is None:
        return f"{head}: {use.label}"
    s = rec.split
    br, bc, grp = (int(v) for v in core_blocks(grid_rows, grid_cols, rec)[row, col])
    if br < 0:
        return f"{head}: idle in {use.label}"
    lines = [f"{head}: output block ({br}, {bc})" + (f", K group {grp}" if s.k_split > 1 else "") + f" of {use.label}"]
    t = rec.chip.tile
    m0, n0 = br * s.per_m * t, bc * s.per_n * t
    lines.append(f"C rows {m0}–{m0 + s.per_m * t - 1}, columns {n0}–{n0 + s.per_n * t - 1} (elements)")
    lines.append(core_block_caption(use))
    a_reads, b_reads = restreams(s)
    if s.kind == "2d":
        r0, c0 = row - br, col - bc  # the group's top-left core: the senders sit on its first column / row
        lines.append(f"A panel from core ({row}, {c0}) along the row, B panel from core ({r0}, {col}) down "
                     f"the column" + (f"; re-streamed A ×{a_reads}, B ×{b_reads} (L1 block)" if a_reads * b_reads > 1
                                      else ""))
    else:
        lines.append(f"{'A' if s.kind == '1d_in0' else 'B'} from core (0, 0), multicast to every used core")
    return "\n".join(lines)
