"""Spatial split of one op over the cores of a grid device: the entry points ``op_cost`` uses.

The mapping's tp/pp/dp count devices (chips); inside each chip, every op is spread over its grid of cores
by the cost model, in closed form (nested mapping). GEMMs take the cheapest split the mapping's
``spatial`` policy allows (``spatial_choice``), costed by ``spatial_cost``; every other op is a 1-D split
of its elements over the cores: its bytes over the device's DRAM bandwidth (and the cores' L1 and per-core
DRAM rates), its FLOPs over the vector units (matrix units for attention), plus the fixed per-op cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from tilewright.engine.perf.device import DeviceModel
from tilewright.engine.perf.spatial_chip import GridChip, grid_chip, sub_block, tile_mac_cycles
from tilewright.engine.perf.spatial_choice import choose
from tilewright.engine.perf.spatial_cost import GemmCost, GemmProblem

__all__ = ["GemmCost", "GemmProblem", "GridChip", "StreamCost", "device_chip", "gemm_on_grid", "stream_on_grid"]


def device_chip(dev: DeviceModel) -> GridChip:
    """The grid record of a device model, built once per model object and kept on it (the model is frozen
    and lives as long as its plan, so the record does too)."""
    store = getattr(dev, "__dict__", None)  # None if the model ever gets slots: then rebuilt (it is cheap)
    chip = store.get("_grid_chip") if store is not None else None
    if chip is None:
        chip = grid_chip(dev.compute, dev.local_dram or dev.remote_dram)
        if store is not None:
            store["_grid_chip"] = chip
    return chip


def limit_grid(chip: GridChip, grid: tuple[int, int] | None) -> GridChip:
    """The chip restricted to ``rows × cols`` of its cores (``mapping.spatial.grid``)."""
    if grid is None or (grid[0] >= chip.rows and grid[1] >= chip.cols):
        return chip
    return chip.with_grid(min(grid[0], chip.rows), min(grid[1], chip.cols))


@lru_cache(maxsize=16384)  # the same GEMMs recur over a search's candidates: skip building their problem
def gemm_on_grid(
    chip: GridChip,
    m: float,
    k: float,
    n: float,
    fmt_a: str,
    fmt_b: str,
    fmt_out: str,
    fidelity: str,
    policy: str = "auto",
    grid: tuple[int, int] | None = None,
    in_dram: tuple[bool, bool, bool] = (True, True, True),
    b_sharded: bool = False,
    a_ring: bool = False,
) -> GemmCost:
    """The chosen split of C[m×n] = A[m×k]·B[k×n] and its cost. Sizes may be fractional (a tensor-parallel
    shard of an odd size): the grid works in whole elements, rounded up. ``in_dram``: whether A, B and C
    live in DRAM (True) or already sit in the cores' L1; ``b_sharded``: B is DRAM-sharded over the banks
    (``mapping.spatial.weights``); ``a_ring``: A's blocks go around a ring of the cores
    (``GemmProblem.a_ring``)."""
    p = GemmProblem(
        math.ceil(m), math.ceil(k), math.ceil(n), fmt_a, fmt_b, fmt_out, fidelity, *in_dram, b_sharded=b_sharded,
        a_ring=a_ring,
    )
    return choose(limit_grid(chip, grid), p, policy)


@dataclass(frozen=True, slots=True)
class StreamCost:
    """A non-GEMM op split 1-D over the cores: what bounds it and its total."""

    seconds: float
    compute_s: float
    movement_s: float
    cores: int

    @property
    def split(self) -> str:
        return f"1-D over {self.cores} cores"


def stream_on_grid(
    chip: GridChip,
    flops: float,
    read_bytes: float,
    write_bytes: float,
    elements: float,
    matrix: tuple[str, str] | None = None,
    on_chip_bytes: float = 0.0,
) -> StreamCost:
    """An elementwise, normalisation or attention op: ``elements`` (its output) spread over the cores in whole
    tiles; reads and writes go to DRAM (pages interleaved over every bank, so the device's interleaved
    bandwidth, but never faster than the cores in use can each move), arithmetic at the vector rate — or, for
    ``matrix = (format, fidelity)`` (attention's batched products: heads × query/key tiles, and in a decode
    step the key range split over the cores as flash-decoding does), at the GEMMs' per-core inner loop. Compute and data
    movement overlap; a DRAM transaction's latency and the fixed per-op cost do not. ``on_chip_bytes`` are
    read or written in L1 only (fused neighbours, SRAM-resident tensors): L1 bandwidth, no DRAM."""
    tiles = max(1.0, math.ceil(elements / (chip.tile * chip.tile)))
    cores = int(min(chip.cores, tiles))
    clock = chip.clock_hz
    if matrix is not None:  # batched tile products: the GEMM inner loop (matrix passes or unpacker feed)
        fmt, fidelity = matrix
        sh, sw = sub_block(chip.dst_tiles, chip.dst_tiles, chip.dst_tiles)
        per_core = 2.0 * chip.tile**3 / tile_mac_cycles(chip, fmt, fmt, fidelity, sh, sw)
        compute = flops / (cores * per_core * clock) if flops else 0.0
    else:
        compute = flops / (cores * chip.vector_flops_per_cycle * clock) if flops else 0.0
    movement = 0.0
    latency = 0.0
    if chip.has_dram and read_bytes + write_bytes > 0:
        read = max(read_bytes / chip.dram_read_Bps(), read_bytes / (cores * chip.dram_read * clock))
        write = max(write_bytes / chip.dram_write_Bps(), write_bytes / (cores * chip.dram_write * clock))
        movement = read + write
        latency = chip.dram_latency / clock
    sram = (read_bytes + write_bytes + on_chip_bytes) / (cores * chip.l1_bytes_per_cycle * clock)
    movement = max(movement, sram)
    return StreamCost(chip.fixed_s + latency + max(compute, movement), compute, movement, cores)
