"""What one GEMM split moves: its multicast trees on the core grid (bytes per NoC link) and its DRAM bytes.

The one place these byte counts live: ``spatial_cost`` charges its DRAM reads and writes from
``dram_bytes``; reports (``--json``, the CLI notes) and the studio's link view and heat map draw
``gemm_traffic``. The movement follows the cost model (SUMMA, output-stationary):

- 2-D ``rows × cols``: the sender of each grid row (its first column) reads that row's A panel from DRAM
  and multicasts it along the row; the sender of each column (its first row) does the same with B down the
  column. K-split groups are ``rows × cols`` blocks of their own, side by side, each with its K slice.
- 1-D: one sender, core (0, 0), multicasts the shared operand (A for ``1d_in0``, B for ``1d_in1``) to the
  first cores in row-major order; every core reads its own slice of the other operand, no multicast.

A tree is the union of the dimension-ordered routes from its sender (``hardware.grid.multicast_edges``),
so it carries its bytes once per link. A core that cannot hold its whole output block in L1 re-streams
its A panel once per out-block column step (and B per row step): every re-stream is read from DRAM and
multicast again. So a tree's bytes are exactly what its sender read from DRAM for it, and the trees of
an operand add up to that operand's DRAM reads. Sizes in tiles as the split has them; no Qt here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from tilewright.engine.hardware.grid import multicast_edges

if TYPE_CHECKING:  # spatial_cost imports this module: the types only, for annotations
    from tilewright.engine.perf.spatial_chip import GridChip
    from tilewright.engine.perf.spatial_cost import GemmProblem, Split

Coord = tuple[int, int]
Edge = tuple[Coord, Coord]


@dataclass(frozen=True, slots=True)
class DramBytes:
    """DRAM bytes of one GEMM: each operand read once per re-stream, the output written once."""

    read_a: float
    read_b: float
    write: float

    @property
    def read(self) -> float:
        return self.read_a + self.read_b

    @property
    def total(self) -> float:
        return self.read_a + self.read_b + self.write


def restreams(s: Split) -> tuple[int, int]:
    """(A, B) re-streams: a core holding an ``out_h × out_w`` block of its ``per_m × per_n`` output per
    sweep over K reads its A panel once per block column step and its B panel once per block row step."""
    oh, ow = min(s.out_h, s.per_m), min(s.out_w, s.per_n)
    return math.ceil(s.per_n / ow), math.ceil(s.per_m / oh)


def dram_bytes(
    p: GemmProblem, s: Split, tiles: tuple[int, int, int], tile_bytes: tuple[float, float, float]
) -> DramBytes:
    """DRAM bytes of ``p`` laid as ``s``: ``tiles`` = (M, K, N) in tiles, ``tile_bytes`` = bytes of one tile
    of A, B and C in their formats. Operands that live in L1 (``p.a_in_dram`` …) cost no DRAM."""
    mt, kt, nt = tiles
    ta, tb, to = tile_bytes
    a_reads, b_reads = restreams(s)
    return DramBytes(
        mt * kt * ta * a_reads if p.a_in_dram else 0.0,
        kt * nt * tb * b_reads if p.b_in_dram else 0.0,
        mt * nt * to if p.out_in_dram else 0.0,
    )


@dataclass(frozen=True, slots=True)
class Tree:
    """One sender's multicast of an operand over the whole op: the tree's links (core to neighbouring
    core), its depth in hops, and the bytes it carries — once on every one of its links."""

    operand: str  # "A" | "B"
    src: Coord
    edges: tuple[Edge, ...]
    depth: int
    nbytes: float

    @property
    def link_bytes(self) -> float:
        return self.nbytes * len(self.edges)


@dataclass(frozen=True, slots=True)
class SplitTraffic:
    """Everything one GEMM split moves on its grid device: multicast trees, DRAM bytes and their spread
    over the DRAM's ports (pages interleaved over every port: an even share each)."""

    trees: tuple[Tree, ...]
    dram: DramBytes
    dram_ports: int = 1
    overlapping: bool = False  # K-split groups that do not tile the grid: laid wrapped, trees overlap

    def link_loads(self, operand: str | None = None) -> dict[Edge, float]:
        """Bytes per NoC link over the op (of ``operand``'s trees only, or of all), summed over trees."""
        out: dict[Edge, float] = {}
        for t in self.trees:
            if operand is None or t.operand == operand:
                for e in t.edges:
                    out[e] = out.get(e, 0.0) + t.nbytes
        return out

    def busiest_link(self) -> tuple[Edge | None, float]:
        loads = self.link_loads()
        if not loads:
            return None, 0.0
        edge = max(loads, key=loads.__getitem__)
        return edge, loads[edge]

    def multicast_link_bytes(self, operand: str | None = None) -> float:
        """Σ over links of the bytes each carries (a tree's bytes × its links)."""
        return sum(t.link_bytes for t in self.trees if operand is None or t.operand == operand)

    def port_bytes(self) -> list[float]:
        """DRAM bytes per port, read and written (interleaved pages: the same share on every port)."""
        return [self.dram.total / self.dram_ports] * self.dram_ports

    def summary(self) -> dict[str, object]:
        """The numbers a report carries, in bytes (``--json``: per split row, ``traffic``)."""
        edge, busiest = self.busiest_link()
        ports = self.port_bytes()
        return {
            "busiest_link_bytes": busiest,
            "busiest_link": [list(edge[0]), list(edge[1])] if edge is not None else None,
            "multicast_link_bytes": self.multicast_link_bytes(),
            "multicast_links": len(self.link_loads()),
            "multicast_link_bytes_by_operand": {o: self.multicast_link_bytes(o) for o in ("A", "B")},
            "dram_read_bytes": {"A": self.dram.read_a, "B": self.dram.read_b},
            "dram_write_bytes": self.dram.write,
            "dram_bytes": self.dram.total,
            "dram_ports": self.dram_ports,
            "busiest_port_share": max(ports) / sum(ports) if sum(ports) > 0 else 0.0,
        }


def group_origins(grid: Coord, s: Split) -> tuple[list[Coord], bool]:
    """Top-left core of each K-split group's ``rows × cols`` block: side by side along the grid's rows,
    then in the next band of rows; if that does not fit, stacked down the columns first. ``True`` with
    the origins when neither fits (the cost model only counts cores) and blocks are laid wrapped round
    the grid, overlapping."""
    gr, gc = grid
    ks = max(1, s.k_split)
    across = max(1, gc // s.cols)
    if math.ceil(ks / across) * s.rows <= gr:
        return [((g // across) * s.rows, (g % across) * s.cols) for g in range(ks)], False
    down = max(1, gr // s.rows)
    if math.ceil(ks / down) * s.cols <= gc:
        return [((g % down) * s.rows, (g // down) * s.cols) for g in range(ks)], False
    return [(((g // across) * s.rows) % gr, (g % across) * s.cols) for g in range(ks)], True


def first_cores(grid: Coord, n: int) -> list[Coord]:
    """The first ``n`` cores in row-major order (where a 1-D split sits)."""
    gr, gc = grid
    return [divmod(i, gc) for i in range(min(n, gr * gc))]


@lru_cache(maxsize=1024)
def gemm_traffic(chip: GridChip, p: GemmProblem, s: Split, dram_ports: int = 1) -> SplitTraffic:
    """The multicast trees and DRAM bytes of ``p`` laid as ``s`` on ``chip``'s core grid. Memoised on all
    four (records, all frozen): a search reports the same few splits for each of its candidates."""
    mt, kt, nt = p.tiles(chip.tile)
    ta, tb, to = chip.tile_bytes(p.fmt_a), chip.tile_bytes(p.fmt_b), chip.tile_bytes(p.fmt_out)
    dram = dram_bytes(p, s, (mt, kt, nt), (ta, tb, to))
    grid = (chip.rows, chip.cols)
    a_reads, b_reads = restreams(s)
    trees: list[Tree] = []
    if s.kind == "2d":
        origins, overlapping = group_origins(grid, s)
        k_slices = _slices(kt, len(origins))
        for (r0, c0), k in zip(origins, k_slices, strict=True):
            for r, m in enumerate(_slices_of(mt, s.per_m, s.rows)):  # row r's A panel along the row
                src = ((r0 + r) % grid[0], c0)
                dsts = (((r0 + r) % grid[0], c0 + c) for c in range(1, s.cols))
                trees.append(_tree("A", src, dsts, grid, m * k * ta * a_reads))
            for c, n in enumerate(_slices_of(nt, s.per_n, s.cols)):  # column c's B panel down the column
                src = (r0, c0 + c)
                dsts = (((r0 + r) % grid[0], c0 + c) for r in range(1, s.rows))
                trees.append(_tree("B", src, dsts, grid, k * n * tb * b_reads))
        return SplitTraffic(tuple(t for t in trees if t.edges), dram, dram_ports, overlapping)
    cores = first_cores(grid, s.rows * s.cols)
    if s.kind == "1d_in0":
        tree = _tree("A", (0, 0), cores[1:], grid, mt * kt * ta * a_reads)
    elif s.kind == "1d_in1":
        tree = _tree("B", (0, 0), cores[1:], grid, kt * nt * tb * b_reads)
    else:
        raise ValueError(f"split kind {s.kind!r}")
    return SplitTraffic((tree,) if tree.edges else (), dram, dram_ports)


def _tree(operand: str, src: Coord, dsts: Iterable[Coord], grid: Coord, nbytes: float) -> Tree:
    edges, depth = multicast_edges(src, dsts, grid, (False, False))
    return Tree(operand, src, tuple(edges), depth, nbytes)  # type: ignore[arg-type]


def _slices(total: int, parts: int) -> list[int]:
    """``total`` tiles cut into ``parts`` slices of ⌈total / parts⌉ (the last ones shorter or empty)."""
    return _slices_of(total, math.ceil(total / parts), parts)


def _slices_of(total: int, per: int, parts: int) -> list[int]:
    """Tiles of each of ``parts`` blocks of ``per`` tiles over ``total``: full blocks, the last part-filled."""
    return [max(0, min(per, total - i * per)) for i in range(parts)]
