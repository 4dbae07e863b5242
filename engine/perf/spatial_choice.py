"""Which split of a GEMM over a grid of cores: chosen by cost, within what the mapping's policy allows.

- ``auto``: every 2-D rectangle of the grid that leaves no row or column of cores idle and uses at least
  half the cores (or every output tile, for small outputs), K-blocks of 1, 2, 4, 8 tiles or the whole
  per-core K (and its halvings), a K-split over 2–8 groups when the output has fewer tiles than the grid has
  cores, and the 1-D splits of skinny shapes — the cheapest wins, as a planner (or a tuning engineer) would.
- ``2d``: the whole grid, 2-D, K-blocks of K / grid columns halved down, the depth chosen by cost (the
  hand-tuned benchmark configurations of tt-metal's GEMM report).
- ``1d``: the cheapest 1-D split.
- ``runtime-default``: what ttnn picks for interleaved operands without a program config.

Decode rows (one tile of M) times a weight DRAM-sharded over a chip's stated banks run, under ``auto`` and
``1d``, as tt-metal's DRAM-sharded program only (``dram_sharded_decode``): tt-transformers gives every such
matmul that program config (model_config.py ``dram_matmul_config``, ``num_workers_per_dram_bank`` 1 by
default), whatever a 2-D split of the whole grid would cost.

Choices are memoised per (chip, problem, policy): a model has about ten distinct GEMM shapes, but a search
asks for hundreds (every micro-batch, shard and residency), each with ~200 candidate splits; ``choose``
skips the layouts a lower bound rules out, with the same pick as costing all of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import lru_cache

from tilewright.engine.perf.spatial_chip import GridChip, buffer_bytes, fit_blocks, sub_block
from tilewright.engine.perf.spatial_cost import (
    GemmCost,
    GemmProblem,
    GemmTerms,
    Split,
    dram_sharded_sub_w,
    floor_seconds,
    gemm_cost,
    pipeline,
    split_cost,
)

K_SPLITS = (1, 2, 4, 8)
BLOCK_KS = (1, 2, 4, 8)
SLACK = 1e-9  # a layout is skipped only when its bound is above the best time by more than rounding

# A split as the tuple of ``Split``'s fields, and a layout: (kind, rows, cols, per_m, per_n, k_split) with the
# K-block depths to try on it. The choice costs ~200 splits per problem: tuples, not objects, until it picks.
Fields = tuple[str, int, int, int, int, int, int, int, int, int, int]
Layout = tuple[str, int, int, int, int, int, tuple[int, ...]]


@lru_cache(maxsize=8192)
def choose(chip: GridChip, p: GemmProblem, policy: str = "auto") -> GemmCost:
    """The cheapest split of ``p`` on ``chip`` that ``policy`` allows: the first, in the order the
    generators below list them, of those with the least time. The full-grid splits (``auto`` tries them
    anyway) are costed first, and a layout whose ``floor_seconds`` is above the best time so far is skipped
    without sizing its blocks — it cannot win, so the pick is the same as costing every split."""
    if policy == "runtime-default":
        return gemm_cost(chip, p, runtime_default(chip, p))
    g = GemmTerms(chip, p)
    if dram_sharded_decode(g, policy):
        policy, layouts = "dram-sharded", list(_dram_sharded_layouts(chip, g))
    elif policy == "2d":
        layouts = list(_full_grid_layouts(chip, g))
    elif policy == "1d":
        layouts = list(_one_d_layouts(chip, g, skinny_only=False))
    elif policy == "auto":
        layouts = [*_two_d_layouts(chip, g), *_one_d_layouts(chip, g), *_full_grid_layouts(chip, g)]
    else:
        raise ValueError(f"spatial policy {policy!r}: auto, 2d, 1d or runtime-default")
    known: dict[Fields, float] = {}
    if policy == "auto":
        for layout in _full_grid_layouts(chip, g):
            for f in _layout_splits(chip, g, layout):
                known[f] = pipeline(g, *f)[0]
    bound = min(known.values(), default=math.inf) * (1.0 + SLACK)
    best: Fields | None = None
    best_s = math.inf
    for layout in layouts:
        kind, rows, cols, pm, pn, ks, _ = layout
        if floor_seconds(g, kind, rows, cols, pm, pn, ks) > bound:
            continue
        for f in _layout_splits(chip, g, layout):
            seconds = known.get(f)
            if seconds is None:
                seconds = pipeline(g, *f)[0]
            if best is None or seconds < best_s:
                best, best_s = f, seconds
                bound = min(bound, seconds * (1.0 + SLACK))
    assert best is not None, f"no {policy} split of {p} on a {chip.rows}×{chip.cols} grid"
    return split_cost(g, Split(*best))


def dram_sharded_decode(g: GemmTerms, policy: str) -> bool:
    """Whether ``policy`` runs this GEMM as tt-metal's DRAM-sharded program and nothing else: decode rows
    (one tile of M) times a weight DRAM-sharded over the banks of a chip that states them. tt-transformers
    gives every such decode matmul a ``MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig``
    (model_config.py ``dram_matmul_config``); a sharded weight is not re-laid for a cheaper 2-D split."""
    return g.ds and g.mt == 1 and policy in ("auto", "1d")


def dram_sharded(chip: GridChip, p: GemmProblem) -> Iterator[Split]:
    """The DRAM-sharded program's splits (one per K-block depth): ``choose``'s candidates when
    ``dram_sharded_decode`` holds."""
    return _splits(chip, p, _dram_sharded_layouts(chip, GemmTerms(chip, p)))


def _layout_splits(chip: GridChip, g: GemmTerms, layout: Layout) -> Iterator[Fields]:
    kind, rows, cols, pm, pn, ks, block_ks = layout
    for bk in block_ks:
        yield _split(chip, g, kind, rows, cols, pm, pn, bk, ks)


def _split(
    chip: GridChip, g: GemmTerms, kind: str, rows: int, cols: int, pm: int, pn: int, bk: int, ks: int = 1
) -> Fields:
    """A split with the largest output block and K-block that fit L1 (at most ``bk``)."""
    oh, ow, bk2 = fit_blocks(chip, pm, pn, bk, g.ta, g.tb, g.to)
    sh, sw = sub_block(oh, ow, chip.dst_tiles)
    if g.ds and kind == "1d_in0" and sh == 1:  # the DRAM-sharded program widens a narrow sub-block (padding)
        sw = dram_sharded_sub_w(ow, chip.dst_tiles)
    return (kind, rows, cols, pm, pn, bk2, oh, ow, sh, sw, ks)


def _splits(chip: GridChip, p: GemmProblem, layouts: Iterator[Layout]) -> Iterator[Split]:
    g = GemmTerms(chip, p)
    for layout in layouts:
        for f in _layout_splits(chip, g, layout):
            yield Split(*f)


@lru_cache(maxsize=4096)
def _block_ks(kt_local: int, cols: int, small: bool = True) -> tuple[int, ...]:
    """K-block depths worth trying: the per-core share of K (K / grid columns) halved down to one tile, and
    with ``small`` also the fixed depths 1, 2, 4, 8."""
    whole = max(1, math.ceil(kt_local / cols))
    out = set(BLOCK_KS) if small else set()
    while whole >= 1:
        out.add(whole)
        whole //= 2
    return tuple(sorted(b for b in out if b <= kt_local)) or (1,)


def two_d(chip: GridChip, p: GemmProblem) -> Iterator[Split]:
    """Every 2-D rectangle (and K-split) ``auto`` tries, with each K-block depth."""
    return _splits(chip, p, _two_d_layouts(chip, GemmTerms(chip, p)))


def full_grid_2d(chip: GridChip, p: GemmProblem) -> Iterator[Split]:
    """The whole grid, 2-D, K-blocks of K / grid columns halved down."""
    return _splits(chip, p, _full_grid_layouts(chip, GemmTerms(chip, p)))


def one_d(chip: GridChip, p: GemmProblem, skinny_only: bool = True) -> Iterator[Split]:
    """A line of cores: for few rows of A (decode), A goes to every core and each owns N/cores columns;
    the mirror for few columns. With ``skinny_only``, only in a direction that is skinny (≤ 8 tiles per
    grid row), where a 1-D split can pay."""
    return _splits(chip, p, _one_d_layouts(chip, GemmTerms(chip, p), skinny_only))


def _two_d_layouts(chip: GridChip, g: GemmTerms) -> Iterator[Layout]:
    mt, kt, nt = g.mt, g.kt, g.nt
    skinny = mt < chip.rows or nt < chip.cols
    half = min(chip.cores, min(chip.rows, mt) * min(chip.cols, nt)) // 2  # of the cores the output can use
    for ks in K_SPLITS:
        if ks > kt or (ks > 1 and not skinny):
            break
        for r in range(1, min(chip.rows, mt) + 1):
            for c in range(1, min(chip.cols, nt) + 1):
                used = r * c * ks
                if used > chip.cores or (used < half and r * c < mt * nt):
                    continue
                pm, pn = math.ceil(mt / r), math.ceil(nt / c)
                if (pm - 1) * r >= mt or (pn - 1) * c >= nt:  # a row/column of cores would idle: use fewer
                    continue
                yield "2d", r, c, pm, pn, ks, _block_ks(math.ceil(kt / ks), c)


def _full_grid_layouts(chip: GridChip, g: GemmTerms) -> Iterator[Layout]:
    mt, kt, nt = g.mt, g.kt, g.nt
    r, c = min(chip.rows, mt), min(chip.cols, nt)
    yield "2d", r, c, math.ceil(mt / r), math.ceil(nt / c), 1, _block_ks(kt, c, small=False)


def _one_d_layouts(chip: GridChip, g: GemmTerms, skinny_only: bool = True) -> Iterator[Layout]:
    mt, nt = g.mt, g.nt
    for kind, thin, wide in (("1d_in0", mt, nt), ("1d_in1", nt, mt)):
        if skinny_only and thin > 8 * chip.rows:
            continue
        if kind == "1d_in0" and g.ds:  # a 1-D split of a DRAM-sharded B is the DRAM-sharded program
            yield from _dram_sharded_layouts(chip, g)
            continue
        per = math.ceil(wide / chip.cores)
        used = math.ceil(wide / per)
        pm, pn = (thin, per) if kind == "1d_in0" else (per, thin)
        rows, cols = (1, used) if kind == "1d_in0" else (used, 1)
        yield kind, rows, cols, pm, pn, 1, BLOCK_KS


def _dram_sharded_layouts(chip: GridChip, g: GemmTerms) -> Iterator[Layout]:
    """tt-metal's DRAM-sharded matmul (``matmul_multicore_reuse_mcast_dram_sharded_program_factory.cpp``):
    ``readers_per_bank`` worker cores next to each DRAM bank, each reading its share of the bank's slice of
    B and computing those output columns, A multicast to all of them. The weight is padded to whole tiles
    per worker (N / workers rounded up), so every worker runs, however narrow N is; never more workers
    than the grid has cores."""
    line = min(chip.cores, chip.dram_banks * max(1, chip.readers_per_bank))
    per = math.ceil(g.nt / line)
    yield "1d_in0", 1, line, g.mt, per, 1, _block_ks(g.kt, 1)


# ttnn's sub-block preference order (matmul_program_config.cpp, SUBBLOCK_HW_CHOICES)
_TTNN_SUBBLOCKS = (
    (4, 2),
    (2, 4),
    (8, 1),
    (1, 8),
    (7, 1),
    (1, 7),
    (3, 2),
    (2, 3),
    (6, 1),
    (1, 6),
    (5, 1),
    (1, 5),
    (2, 2),
    (4, 1),
    (1, 4),
    (3, 1),
    (1, 3),
    (2, 1),
    (1, 2),
    (1, 1),
)


def runtime_default(chip: GridChip, p: GemmProblem) -> Split:
    """The split ttnn makes for DRAM-interleaved operands without a program config
    (``create_simple_matmul_program_config``): narrow shapes (aspect > 8 or a side ≤ one tile) or a single
    row/column of 16-tile blocks go 1-D — one sender multicasts the whole narrow operand to every core;
    otherwise 2-D over the whole grid with per-core = ⌈tiles / grid⌉ and K-block = K / grid columns, shrunk
    to fit L1. Reproducing it lets a user compare a default deployment with a tuned one."""
    mt, kt, nt = p.tiles(chip.tile)
    ta, tb, to = chip.tile_bytes(p.fmt_a), chip.tile_bytes(p.fmt_b), chip.tile_bytes(p.fmt_out)
    gx, gy, cores = chip.cols, chip.rows, chip.cores
    factor = next((f for f in (16, 8, 4, 2) if buffer_bytes(f, f, 2, ta, tb, to) < chip.l1_usable), 1)
    blocks_y, blocks_x = (mt - 1) // factor + 1, (nt - 1) // factor + 1
    m, n = p.m, p.n
    narrow = max(m, n) / max(1, min(m, n)) > 8 or m <= chip.tile or n <= chip.tile
    fits = not (blocks_y == 1 and blocks_x == 1) and blocks_y <= gy and blocks_x <= gx
    range_y = blocks_y if fits else 0
    range_x = blocks_x if range_y else 0
    bk_1d = 2 if kt % 2 == 0 else 1
    if (narrow and n > m) or range_y == 1:
        pn = max(1, math.ceil(math.ceil(n / cores) / chip.tile))
        oh, ow, bk = fit_blocks(chip, mt, pn, bk_1d, ta, tb, to)
        sh, sw = sub_block(oh, ow, chip.dst_tiles)
        return Split("1d_in0", 1, min(math.ceil(nt / pn), cores), mt, pn, bk, oh, ow, sh, sw)
    if (narrow and m >= n) or range_x == 1:
        pm = max(1, math.ceil(math.ceil(m / cores) / chip.tile))
        oh, ow, bk = fit_blocks(chip, pm, nt, bk_1d, ta, tb, to)
        sh, sw = sub_block(oh, ow, chip.dst_tiles)
        return Split("1d_in1", min(math.ceil(mt / pm), cores), 1, pm, nt, bk, oh, ow, sh, sw)
    bk = kt // gx if kt % gx == 0 else 1
    pm, pn = math.ceil(mt / gy), math.ceil(nt / gx)
    oh, ow, bk = fit_blocks(chip, pm, pn, bk, ta, tb, to)
    sh, sw = next(((h, w) for h, w in _TTNN_SUBBLOCKS if oh % h == 0 and ow % w == 0), (1, 1))
    return Split("2d", gy, gx, pm, pn, bk, oh, ow, sh, sw)
