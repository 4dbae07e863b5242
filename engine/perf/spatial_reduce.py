"""The steps of a cross-core reduction inside one grid program, in cycles: what a norm's statistics and a
decode attention's partial softmax results cost on their way between the cores that share one row.

A Tenstorrent program that splits a row over several cores has to bring the cores' partial results together
before any core can finish: a core signals another by a semaphore increment over the NoC, reads a partner's
L1 (a round trip) or writes into it, and multicasts a result to a rectangle of cores. Each of these waits a
full NoC transaction latency (``movement.noc_latency_cycles``: tt-metal's noc_latencies.yaml, one L1-to-L1
transaction of 64-2,048 B takes 293-366 cycles on Wormhole) plus its bytes at the per-core rate
(``unicast``, ``multicast``); the table's 16 reads of 2,048 B each (1,459-1,468 cycles) are what
``read_cycles`` gives from the preset's figures (300 + 16 · 2,048 / 29 = 1,430). Steps of one chain are
dependent, so they add up on the program's critical path; unlike streamed data they never overlap compute.

Inside a core, every step of a norm or of a softmax combine is one LLK pass over a few tiles: unpack, math,
pack, pipelined, paced by its slowest stage (``tile_pass_cycles``). Transcendentals run on the SFPU, 32 lanes
(tiled_hardware.md: 'vector unit (SFPU) 32 lanes x 32-bit'), one instruction per cycle over 32 elements, so a
function of n instructions takes n · 1,024 / 32 cycles a tile (``sfpu_cycles``).
"""

from __future__ import annotations

from tilewright.engine.perf.spatial_chip import GridChip

SFPU_LANES = 32  # S1 VectorUnit.md (tiled_hardware.md): the SFPU works on 32 lanes of 32 bits per instruction
# SFPU instructions per 32-lane row of ``rsqrt``: tt-metal's ckernel_sfpu_rsqrt.h (llk_api/llk_sfpu, Wormhole and
# Blackhole): a load, two lane-predicate compares, the reciprocal's Newton iterations (sfpu_reciprocal) and two
# Newton iterations of y·(1.5 - 0.5·x·y²), a store: ~20, counted from the source, one cycle each (an estimate,
# no published per-instruction timing).
RSQRT_SFPU_INSTRUCTIONS = 20.0
STATS_FORMAT = "bf16"  # the statistics' circular buffers (tt-metal: Float16_b unless fp32 accumulation is asked)


def tile_pass_cycles(chip: GridChip, tiles: float, tile_bytes: float) -> float:
    """One LLK pass (unpack → math → pack) over ``tiles`` tiles: the slowest of unpacking a tile, packing one
    and the vector math on its 1,024 elements paces the pipeline."""
    t2 = chip.tile * chip.tile
    return tiles * max(tile_bytes / chip.unpack, tile_bytes / chip.pack, t2 / chip.vector_flops_per_cycle)


def sfpu_cycles(chip: GridChip, tiles: float, instructions: float) -> float:
    """A transcendental of ``instructions`` SFPU instructions per 32-lane row over ``tiles`` tiles."""
    return tiles * chip.tile * chip.tile / SFPU_LANES * instructions


def signal_cycles(chip: GridChip) -> float:
    """A semaphore increment (or a flag multicast) reaching another core: one NoC transaction."""
    return chip.noc_latency


def read_cycles(chip: GridChip, transfers: int, nbytes: float) -> float:
    """``transfers`` reads of ``nbytes`` each from other cores' L1, issued together and waited on once."""
    return chip.noc_latency + transfers * nbytes / chip.unicast


def write_cycles(chip: GridChip, nbytes: float) -> float:
    """One write of ``nbytes`` into another core's L1 and the semaphore after it (posted, same path)."""
    return chip.noc_latency + nbytes / chip.unicast


def multicast_cycles(chip: GridChip, nbytes: float) -> float:
    """One multicast of ``nbytes`` to a rectangle of cores, waited on (its flag follows on the same path)."""
    return chip.noc_latency + nbytes / chip.multicast
