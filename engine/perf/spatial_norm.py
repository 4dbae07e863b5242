"""A decode-step norm on a grid device: the rows fit one tile row, so the row's width is split over cores and
the cores must agree on the row's statistics before any can scale its part.

tt-transformers runs a decode norm (RMSNorm, LayerNorm) as tt-metal's sharded multi-core layernorm
(``ttnn/cpp/ttnn/operations/normalization/layernorm/device``: layernorm_op_multi_core_sharded.cpp,
sharded_layernorm_factory_helpers.cpp, kernels/dataflow/reader_mcast_sender_unary_sharded_ln.cpp) on the input
width-sharded over a grid of ``cores`` (tt-transformers model_config.py ``find_grid``: the divisor of the width
in tiles closest to 32 cores, rows of at most the grid's columns; ``create_sharded_norm_config``: block_h = one
tile row at decode). Its critical path, per statistic (E[x²] for RMSNorm; E[x], then E[(x-E[x])²] for
LayerNorm without Welford):

1. every core reduces its block to a partial tile (x² and a row reduce: LLK passes over its tiles);
2. the cores signal the sender core (semaphore increment), which releases them (a flag multicast);
3. one core per grid row reads its row's partials (first stage, a read of ``cols`` tiles) and combines them;
   on a grid of several rows (the two-stage reduce, ``should_use_two_stage_reduce``) the row reducers signal
   the sender, which reads their ``rows - 1`` results and combines those;
4. the last statistic gets ε and an rsqrt on the SFPU;
5. the sender gathers the combined result and multicasts it to every core of the grid (data, then its flag);

and then every core scales its block (x · 1/rms, · γ, LayerNorm also - E[x] and + β). The streamed bytes are
costed as every other stream (``spatial.stream_on_grid``); this adds the dependent chain above, which no
bandwidth hides. Rows beyond one tile row are split over the cores by rows instead (the interleaved
multi-core layernorm): no cross-core step, the plain stream cost.
"""

from __future__ import annotations

import math

from tilewright.engine.perf.spatial import StreamCost, stream_on_grid
from tilewright.engine.perf.spatial_chip import GridChip
from tilewright.engine.perf.spatial_reduce import (
    RSQRT_SFPU_INSTRUCTIONS,
    STATS_FORMAT,
    multicast_cycles,
    read_cycles,
    sfpu_cycles,
    signal_cycles,
    tile_pass_cycles,
)

TARGET_CORES = 32  # tt-transformers model_config.py find_grid: cores closest to 32 that divide the width's tiles
# LLK passes over a core's block (each writes its tiles) and row reduces (each reads them), per statistic chain:
# RMSNorm x², then x · 1/rms and · γ, one reduce; LayerNorm x - E[x], (x - E[x])², · 1/σ, · γ, + β, two reduces
RMS_PASSES, LAYERNORM_PASSES = 3, 5


def norm_grid(chip: GridChip, width_tiles: int) -> tuple[int, int]:
    """(grid rows, cols) of the width-sharded norm: tt-transformers' ``find_grid`` on this chip's grid."""
    divisors = (c for c in range(1, chip.cores + 1) if width_tiles % c == 0)
    for cores in sorted(divisors, key=lambda c: abs(c - TARGET_CORES)):
        for rows in range(1, chip.rows + 1):
            if cores % rows == 0 and cores // rows <= chip.cols:
                return rows, cores // rows
    return 1, 1


def statistic_cycles(chip: GridChip, rows: int, cols: int) -> float:
    """Steps 2-5 for one statistic on a ``rows × cols`` grid (no rsqrt): the NoC chain and the combines."""
    if rows * cols == 1:
        return 0.0
    tb = chip.tile_bytes(STATS_FORMAT)
    two_stage = rows > 1 and cols > 1
    first = cols if two_stage else rows * cols
    cycles = 2 * signal_cycles(chip) + read_cycles(chip, first, tb) + tile_pass_cycles(chip, first, tb)
    if two_stage:
        cycles += signal_cycles(chip) + read_cycles(chip, rows - 1, tb) + tile_pass_cycles(chip, rows - 1, tb)
    return cycles + read_cycles(chip, 1, tb) + multicast_cycles(chip, tb)


def critical_path_cycles(chip: GridChip, width: int, layernorm: bool, act_tile_bytes: float) -> tuple[float, int]:
    """(cycles of the chain, cores) of one tile row of ``width`` elements."""
    width_tiles = max(1, math.ceil(width / chip.tile))
    rows, cols = norm_grid(chip, width_tiles)
    block = width_tiles / (rows * cols)
    stats = 2 if layernorm else 1
    passes = LAYERNORM_PASSES if layernorm else RMS_PASSES
    local = tile_pass_cycles(chip, block * (passes + stats), act_tile_bytes)  # a reduce reads the block once
    tb = chip.tile_bytes(STATS_FORMAT)
    finish = tile_pass_cycles(chip, 1, tb) + sfpu_cycles(chip, 1, RSQRT_SFPU_INSTRUCTIONS)  # + ε, rsqrt
    return local + stats * statistic_cycles(chip, rows, cols) + finish, rows * cols


def norm_width(params: float, elements: float, per_sample: float | None = None) -> tuple[int, bool] | None:
    """(row width, LayerNorm?) of a norm op: its parameters are γ (RMSNorm) or γ and β (LayerNorm). A decode
    step's op holds one row per sample (``per_sample``, the op's ``in_elems``): the width γ alone or γ and β
    span. Otherwise ``elements`` is a whole number of rows: an RMSNorm's width divides them, a LayerNorm's may
    not be read from the op when it does (even rows), then taken as an RMSNorm of twice the width. None: no
    parameters."""
    if params <= 0:
        return None
    if per_sample == params:
        return int(params), False
    if per_sample is not None and 2 * per_sample == params:
        return int(per_sample), True
    rows = elements / params
    if abs(rows - round(rows)) < 1e-9 and rows >= 1:
        return int(params), False
    return int(params // 2), True


def norm_on_grid(
    chip: GridChip,
    params: float,
    read_bytes: float,
    write_bytes: float,
    elements: float,
    on_chip_bytes: float,
    act_bytes: float,
    per_sample: float | None = None,
) -> StreamCost | None:
    """A norm of ``elements`` (rows × width) with ``params`` parameters, as the sharded program when its rows
    fit one tile row; None otherwise (a plain stream, ``spatial.stream_on_grid``)."""
    shape = norm_width(params, elements, per_sample)
    if shape is None:
        return None
    width, layernorm = shape
    if elements / width > chip.tile:
        return None
    path, cores = critical_path_cycles(chip, width, layernorm, act_bytes * chip.tile * chip.tile)
    s = stream_on_grid(chip, 0.0, read_bytes, write_bytes, elements, None, on_chip_bytes)
    path_s = path / chip.clock_hz
    return StreamCost(s.seconds + path_s, path_s, s.movement_s, cores)
