"""What one op's spatial split puts on each core and moves over the NoC and DRAM, for the core-grid view.

A run reports each matmul's split as ``Split.describe`` text (``Result.spatial_splits``); the per-core block
in tiles, the K-block, the L1 out-block and the K-split are all in it. The reduction depth K is not: it
comes from the workload's op of that name (tensor-parallel shard as the engine cuts it, ``_sharded_gemm``),
and so does N. M (tokens: it depends on the phase) is taken from the split itself — whole blocks, exact
when the token count fills whole tiles per core row, else an upper bound by less than one block row.

The traffic follows the cost model (SUMMA, output-stationary): on a 2-D split the sender of grid row r
(column 0) reads row r's A panel from DRAM and multicasts it east along the row, the sender of column c
(row 0) does the same with B southwards; a multicast tree carries its bytes once per link. A core that
cannot hold its whole output block in L1 re-streams its A panel once per out-block column step (and B per
row step), as ``gemm_cost`` counts its DRAM reads. A 1-D split has one sender multicasting the shared
operand along row 0, down column 0 and along every used row. No Qt here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
from tilewright.engine.ir.common import dtype_bytes
from tilewright.engine.ir.ops import Op
from tilewright.engine.ir.project import Project
from tilewright.engine.perf.formats import resolve_formats
from tilewright.engine.perf.op_cost import _sharded_gemm  # the engine's one tensor-parallel cut of a GEMM
from tilewright.engine.workloads import build_workload
from tilewright.studio.units import format_number

_HEAD = re.compile(r"^\s*(?:2-D\s+(\d+)\s*[×x]\s*(\d+)|1-D\s+(\d+))")
_PER = re.compile(r"(\d+)\s*[×x]\s*(\d+)\s+tiles/core")
_BK = re.compile(r"K-block\s+(\d+)")
_L1 = re.compile(r"L1 block\s+(\d+)\s*[×x]\s*(\d+)")
_KS = re.compile(r"K-split\s+(\d+)")


@dataclass(frozen=True)
class SplitShape:
    """``Split`` as read back from its description. ``kind``: "2d", "1d_in0" (A to all) or "1d_in1"."""

    kind: str
    rows: int
    cols: int
    per_m: int  # output block of one core, tiles
    per_n: int
    block_k: int
    out_h: int  # what one core holds in L1 per sweep over K, tiles
    out_w: int
    k_split: int = 1
    b_sharded: bool = False  # ", B DRAM-sharded": each core reads its columns of B from the bank beside it

    @property
    def a_reads(self) -> int:
        """Times a core's A panel is streamed (once per out-block column step)."""
        return math.ceil(self.per_n / self.out_w)

    @property
    def b_reads(self) -> int:
        return math.ceil(self.per_m / self.out_h)


def parse_shape(text: str) -> SplitShape | None:
    """The split of "2-D 8×7, 16×50 tiles/core, K-block 8, L1 block 4×25, A mcast rows, B mcast cols"; None
    if ``text`` is not a GEMM split (or a backward pair, which has two)."""
    head, per, bk = _HEAD.match(text), _PER.search(text), _BK.search(text)
    if head is None or per is None or bk is None or ";" in text:
        return None
    pm, pn = int(per.group(1)), int(per.group(2))
    l1 = _L1.search(text)
    oh, ow = (int(l1.group(1)), int(l1.group(2))) if l1 else (pm, pn)
    ks = int(_KS.search(text).group(1)) if _KS.search(text) else 1
    sharded = "B DRAM-sharded" in text
    if head.group(1):
        return SplitShape("2d", int(head.group(1)), int(head.group(2)), pm, pn, int(bk.group(1)), oh, ow, ks, sharded)
    kind = "1d_in1" if "B mcast to all" in text else "1d_in0"
    return SplitShape(kind, 1, int(head.group(3)), pm, pn, int(bk.group(1)), oh, ow, ks, sharded)


@dataclass(frozen=True)
class OpGemm:
    """One device's GEMM of the op in tiles (K and N from the workload; M from the split's whole blocks, as
    the token count depends on the phase) and the bytes of one tile of each operand in its format."""

    m_tiles: int
    k_tiles: int
    n_tiles: int
    tile: int  # elements per tile side
    a_tile_bytes: float  # activations
    b_tile_bytes: float  # weights
    out_tile_bytes: float
    fmt_a: str
    fmt_b: str


def workload_gemms(project: Project) -> dict[str, Op]:
    """The workload's matmuls by their name within a layer ("qkv", "mlp_up"), the first of each."""
    out: dict[str, Op] = {}
    for o in build_workload(project.workload).ops():
        if o.gemm is not None:
            out.setdefault(o.name.split(".", 1)[-1], o)
    return out


def op_gemm(
    project: Project, op_name: str, shape: SplitShape, tile: int, ops: dict[str, Op] | None = None
) -> OpGemm | None:
    """The op's GEMM as ``shape`` lays it, or None if the workload has no matmul of that name."""
    op = (ops if ops is not None else workload_gemms(project)).get(op_name)
    if op is None:
        return None
    _m, n, k = _sharded_gemm(op, 1, project.mapping.tp)
    fmt = resolve_formats(project.run.dtype, project.mapping.formats, project.mapping.fidelity).for_op(op_name)
    a, b = fmt.activations.value, fmt.weights.value
    if shape.kind == "2d":
        mt, nt = shape.rows * shape.per_m, shape.cols * shape.per_n
    elif shape.kind == "1d_in0":  # every core gets all of A's rows, owns columns of B
        mt, nt = shape.per_m, shape.cols * shape.per_n
    else:
        mt, nt = shape.cols * shape.per_m, shape.per_n
    nt = min(nt, max(1, math.ceil(n / tile)))  # N is known exactly: the last blocks may be part-filled
    per_tile = tile * tile
    return OpGemm(
        mt,
        max(1, math.ceil(k / tile)),
        nt,
        tile,
        dtype_bytes(a) * per_tile,
        dtype_bytes(b) * per_tile,
        dtype_bytes(a) * per_tile,
        a,
        b,
    )


def core_blocks(grid_rows: int, grid_cols: int, shape: SplitShape) -> np.ndarray:
    """``grid_rows × grid_cols × 3``: each core's output block (block row, block column, K group), -1 where
    the core is unused. 2-D: the top-left ``rows × cols`` sub-grid, K groups side by side along the columns;
    1-D: the first cores in row-major order, block i of the shared operand's partner."""
    out = np.full((grid_rows, grid_cols, 3), -1, dtype=int)
    if shape.kind == "2d":
        for g in range(shape.k_split):
            for r in range(min(shape.rows, grid_rows)):
                for c in range(shape.cols):
                    col = g * shape.cols + c
                    if col < grid_cols:
                        out[r, col] = (r, c, g)
        return out
    flat = out.reshape(-1, 3)
    n = min(flat.shape[0], shape.cols * shape.k_split)
    for i in range(n):
        g, j = divmod(i, shape.cols)
        flat[i] = (0, j, g) if shape.kind == "1d_in0" else (j, 0, g)
    return out


@dataclass(frozen=True)
class LinkLoad:
    """Bytes one operand's multicast puts on one NoC link between neighbouring cores (row, col)."""

    operand: str  # "A" | "B"
    src: tuple[int, int]
    dst: tuple[int, int]
    nbytes: float


def multicast_loads(grid_rows: int, grid_cols: int, shape: SplitShape, g: OpGemm) -> list[LinkLoad]:
    """Every NoC link the op's multicast trees use, with the bytes each carries over the whole op (each
    tree's bytes once per link)."""
    kt = math.ceil(g.k_tiles / max(1, shape.k_split))
    out: list[LinkLoad] = []
    if shape.kind == "2d":
        a_bytes = shape.per_m * kt * g.a_tile_bytes * shape.a_reads  # one row's A panel
        b_bytes = kt * shape.per_n * g.b_tile_bytes * shape.b_reads  # one column's B panel
        for grp in range(shape.k_split):
            c0 = grp * shape.cols
            for r in range(min(shape.rows, grid_rows)):
                for c in range(c0, min(c0 + shape.cols, grid_cols) - 1):
                    out.append(LinkLoad("A", (r, c), (r, c + 1), a_bytes))
            for c in range(c0, min(c0 + shape.cols, grid_cols)):
                for r in range(min(shape.rows, grid_rows) - 1):
                    out.append(LinkLoad("B", (r, c), (r + 1, c), b_bytes))
        return out
    operand = "A" if shape.kind == "1d_in0" else "B"
    if operand == "A":
        nbytes = g.m_tiles * kt * g.a_tile_bytes * shape.a_reads
    else:
        nbytes = kt * g.n_tiles * g.b_tile_bytes * shape.b_reads
    used = min(grid_rows * grid_cols, shape.cols * shape.k_split)
    full_rows, rest = divmod(used, grid_cols)
    row_len = [grid_cols] * full_rows + ([rest] if rest else [])
    for r in range(len(row_len) - 1):  # down column 0 to reach every used row
        out.append(LinkLoad(operand, (r, 0), (r + 1, 0), nbytes))
    for r, n in enumerate(row_len):  # then along each used row
        for c in range(n - 1):
            out.append(LinkLoad(operand, (r, c), (r, c + 1), nbytes))
    return out


@dataclass(frozen=True)
class OpDram:
    """DRAM bytes of one op (as ``gemm_cost`` counts them: each operand read once per re-stream, the
    output written once)."""

    read_a: float
    read_b: float
    write: float

    @property
    def total(self) -> float:
        return self.read_a + self.read_b + self.write


def op_dram(shape: SplitShape, g: OpGemm) -> OpDram:
    return OpDram(
        g.m_tiles * g.k_tiles * g.a_tile_bytes * shape.a_reads,
        g.k_tiles * g.n_tiles * g.b_tile_bytes * shape.b_reads,
        g.m_tiles * g.n_tiles * g.out_tile_bytes,
    )


def format_traffic(nbytes: float) -> str:
    """Bytes moved, always in decimal prefixes ("12.6 MB", "262 kB"), so amounts in one line compare."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(nbytes) >= scale:
            return f"{format_number(nbytes / scale)} {prefix}B"
    return f"{format_number(nbytes)} B"


def block_bytes(shape: SplitShape, g: OpGemm) -> float:
    """Bytes of one core's output block."""
    return shape.per_m * shape.per_n * g.out_tile_bytes
