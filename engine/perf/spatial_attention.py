"""A prefill attention op on a grid device, split the way a fused flash-attention kernel splits it.

tt-metal's ``scaled_dot_product_attention`` (FlashAttention-2 on Wormhole, tt-metal
``tech_reports/FlashAttention/FlashAttention.md`` §3) parallelises the output over batch × heads × query
chunks: every core takes whole (sequence, head, q-chunk) units, reads its Q chunk once and then streams
the K and V chunks that chunk attends to from DRAM, double-buffered, keeping the running output and
softmax statistics in L1. Causal work is load-balanced (a core takes a low and a high chunk), and K/V are
not shared between the cores that read the same head: sharing them by multicast is the report's future
work, so every q chunk of every query head re-reads its K/V head from DRAM (GQA included). The matrix
engine does QKᵀ and P·V (2 · head_dim/32 tile multiply-accumulates per 32 × 32 score tile) at the op's
format and fidelity; the online softmax (row max, subtract, exp on the SFPU, row sum, rescale) runs on
the same compute pipeline after each QKᵀ, not overlapped with the matrix work (overlapping it is also
future work there), at ``SOFTMAX_CYCLES_PER_SCORE``.

Chunk sizes follow tt-transformers' ``SDPA_PROGCFG`` (models/tt_transformers/tt/model_config.py):
q_chunk = k_chunk = 256 for sequences of 2,048 tokens or more, else 64.

A decode step (one query per sequence) runs ``scaled_dot_product_attention_decode`` (FlashDecode, tt-metal
``tech_reports/FlashAttention/FlashDecode.md`` §2.2-3.1): the q heads that share a K/V head sit in the rows of
one 32-row tile (padded to 32), work is split over sequences × K/V heads, ``cores // work`` cores (at most
``MAX_CORES_PER_HEAD_BATCH``) share one unit by splitting its keys, each reads its part of the cache once, and
their partial outputs and softmax statistics are combined over the NoC in a tree (``tree_reduction_cycles``)
after a prologue of dependent reads (position, Q: ``prologue_s``). The NoC and LLK steps are costed as the
norms' (``spatial_reduce``).
"""

from __future__ import annotations

import math

from tilewright.engine.ir.ops import AttentionShape
from tilewright.engine.perf.spatial import StreamCost, stream_on_grid
from tilewright.engine.perf.spatial_chip import GridChip, sub_block, tile_mac_cycles
from tilewright.engine.perf.spatial_reduce import STATS_FORMAT, tile_pass_cycles, write_cycles

# Non-matrix cycles per score element per core: tt-metal SDPAPrecisionRecipes.md ("Accuracy and
# throughput") measures the legacy streaming kernel (the one Wormhole runs: HiFi2 QKᵀ and PV, approximate
# exp, BF16 scores) at 1.99 TFLOP/s on one Blackhole core (1.35 GHz) with K/V resident in L1, D128,
# Q256/K512: 4·128 FLOP per score element take 512 / (1.99e12 / 1.35e9) = 0.347 cycles, of which the
# HiFi2 matrix work is 512 / 2048 = 0.250 cycles; the rest, 0.097 cycles (~100 cycles a 32 × 32 score
# tile), is the softmax. Same Tensix compute pipeline and SFPU width on Wormhole.
SOFTMAX_CYCLES_PER_SCORE = 512.0 / (1.99e12 / 1.35e9) - 512.0 / 2048.0

MAX_CORES_PER_HEAD_BATCH = 16  # FlashDecode.md §3.1 "Extreme Cases": the op's limit on cores per unit
LONG_SEQUENCE = 2048  # tokens from which tt-transformers uses 256-token chunks
LONG_CHUNK, SHORT_CHUNK = 256, 64


def chunk_size(keys: int) -> int:
    """q_chunk_size = k_chunk_size of tt-transformers' SDPA program config for a sequence of ``keys``."""
    return LONG_CHUNK if keys >= LONG_SEQUENCE else SHORT_CHUNK


def keys_read(shape: AttentionShape, causal: bool, q_chunk: int, k_chunk: int) -> tuple[int, int]:
    """(q chunks, keys all q chunks of one head read in total): each chunk reads every K chunk up to its
    last query's position (all of them when not causal), in whole K chunks. The new queries come last."""
    chunks = math.ceil(shape.queries / q_chunk)
    prefix = shape.keys - shape.queries
    total = 0
    for i in range(chunks):
        visible = min(shape.keys, prefix + min((i + 1) * q_chunk, shape.queries)) if causal else shape.keys
        total += math.ceil(visible / k_chunk) * k_chunk
    return chunks, total


def prefill_on_grid(
    chip: GridChip,
    shape: AttentionShape,
    head_batches: float,
    causal: bool,
    matrix: tuple[str, str],
    elem_bytes: tuple[float, float],
    in_dram: tuple[bool, bool],
    chunks: tuple[int, int] | None = None,
) -> tuple[StreamCost, float]:
    """Fused attention of ``head_batches`` (sequences × query heads on this device) over the cores.
    ``matrix``: (format, fidelity) of the products; ``elem_bytes``: (activations, K/V) bytes per element
    (K/V of cached tokens in the cache's format, new ones in the activations'); ``in_dram``: whether the
    inputs (Q, K, V) and the output live in DRAM (False: a fused neighbour or SRAM holds them in L1).
    ``chunks``: (q_chunk, k_chunk) of the program config (None: tt-transformers' choice, ``chunk_size``).
    Returns the cost and the bytes moved in DRAM."""
    t = chip.tile
    q_chunk, k_chunk = chunks or (chunk_size(shape.keys), chunk_size(shape.keys))
    q_chunk = min(q_chunk, math.ceil(shape.queries / t) * t)
    n_chunks, keys_total = keys_read(shape, causal, q_chunk, k_chunk)
    bh = math.ceil(head_batches - 1e-9)
    units = bh * n_chunks
    cores = min(chip.cores, units)
    waves = math.ceil(units / chip.cores)
    d_tiles = math.ceil(shape.head_dim / t)
    score_tiles = math.ceil(q_chunk / t) * keys_total / t  # per head, over all its chunks
    fmt, fidelity = matrix
    sh, sw = sub_block(chip.dst_tiles, chip.dst_tiles, chip.dst_tiles)
    mac = tile_mac_cycles(chip, fmt, fmt, fidelity, sh, sw)
    cycles_per_head = score_tiles * (2 * d_tiles * mac + t * t * SOFTMAX_CYCLES_PER_SCORE)
    compute = waves * cycles_per_head / n_chunks / chip.clock_hz  # balanced units: the mean unit per wave
    act, kv = elem_bytes
    d = shape.head_dim
    q_bytes = bh * shape.queries * d * act
    kv_bytes = bh * keys_total * d * 2 * kv
    out_bytes = bh * shape.queries * d * act
    inputs, output = in_dram
    read = (q_bytes + kv_bytes) if inputs else 0.0
    write = out_bytes if output else 0.0
    l1_only = (0.0 if inputs else q_bytes + kv_bytes) + (0.0 if output else out_bytes)
    s = stream_on_grid(chip, 0.0, read, write, cores * t * t, None, l1_only)
    cost = StreamCost(s.seconds - s.movement_s + max(compute, s.movement_s), compute, s.movement_s, cores)
    return cost, read + write


def decode_on_grid(
    chip: GridChip,
    shape: AttentionShape,
    head_batches: float,
    keys: float,
    matrix: tuple[str, str],
    elem_bytes: tuple[float, float],
    in_dram: tuple[bool, bool],
) -> tuple[StreamCost, float]:
    """FlashDecode of ``head_batches`` (sequences × query heads on this device), one query each, over ``keys``
    keys (the context, or a sliding window). Arguments as ``prefill_on_grid``; returns the cost and the DRAM
    bytes (the cache read once per K/V head)."""
    t = chip.tile
    group = shape.heads // shape.kv_heads  # query heads per K/V head: rows of one padded Q tile
    units = math.ceil(head_batches / group - 1e-9)  # sequences × K/V heads
    per_unit = max(1, min(MAX_CORES_PER_HEAD_BATCH, chip.cores // units)) if units < chip.cores else 1
    cores = min(chip.cores, units * per_unit)
    waves = math.ceil(units / chip.cores)
    keys_per_core = math.ceil(math.ceil(keys / per_unit) / t) * t
    d_tiles = math.ceil(shape.head_dim / t)
    score_tiles = math.ceil(group / t) * keys_per_core / t
    fmt, fidelity = matrix
    sh, sw = sub_block(1, d_tiles, chip.dst_tiles)
    mac = tile_mac_cycles(chip, fmt, fmt, fidelity, sh, sw)
    cycles = waves * score_tiles * (2 * d_tiles * mac + t * t * SOFTMAX_CYCLES_PER_SCORE)
    act, kv = elem_bytes
    d = shape.head_dim
    cycles += tree_reduction_cycles(chip, per_unit, math.ceil(group / t), d_tiles)
    compute = cycles / chip.clock_hz
    bh = math.ceil(head_batches - 1e-9)
    cache_bytes = units * keys * d * 2 * kv
    q_bytes = out_bytes = bh * d * act
    inputs, output = in_dram
    read = (q_bytes + cache_bytes) if inputs else 0.0
    write = out_bytes if output else 0.0
    l1_only = (0.0 if inputs else q_bytes + cache_bytes) + (0.0 if output else out_bytes)
    s = stream_on_grid(chip, 0.0, read, write, cores * t * t, None, l1_only)
    cost = StreamCost(s.seconds - s.movement_s + max(compute, s.movement_s) + prologue_s(chip), compute, s.movement_s,
                      cores)
    return cost, read + write


def prologue_s(chip: GridChip) -> float:
    """What a FlashDecode reader waits for before its first key read (tt-metal reader_decode_all.cpp): the
    sequence's position, read from the position tensor in DRAM and waited on (its key range depends on it),
    copied L1 to L1 for the compute kernel and waited on, then its Q tile rows read and waited on. Three
    dependent transactions; the key read's own latency is the stream's. (A paged cache's page-table read would
    be a fourth: paging is not modelled.)"""
    position = chip.dram_latency if chip.has_dram else chip.noc_latency
    return (position + 2 * chip.noc_latency) / chip.clock_hz


def tree_reduction_cycles(chip: GridChip, per_unit: int, q_tiles: int, d_tiles: int) -> float:
    """The cross-core combine of FlashDecode's partial results when ``per_unit`` cores share one unit (its
    keys split): tt-metal's sdpa_decode reduces them in a tree (``MAX_TREE_REDUCTION_ROUNDS``, ceil(log2 cores)
    rounds, sdpa_flash_decode.cpp). Each round a core writes its partial output (``q_tiles × d_tiles``) and its
    row max and row sum (a tile each per q tile) into its partner's L1 and signals it (``write_cycles``); the
    partner takes the new max (one pass), the two correction factors exp(m_i - m) (SFPU, at the softmax's
    cycles per score), rescales both outputs and adds them (3 · d_tiles passes) and both sums (3 passes). The
    root then divides its output by the sum (d_tiles passes). Statistics and partials in bf16 buffers."""
    if per_unit <= 1:
        return 0.0
    tb = chip.tile_bytes(STATS_FORMAT)
    rounds = math.ceil(math.log2(per_unit))
    send = write_cycles(chip, q_tiles * (d_tiles + 2) * tb)
    combine = q_tiles * (tile_pass_cycles(chip, 1 + 3 * d_tiles + 3, tb)
                         + 2 * chip.tile * chip.tile * SOFTMAX_CYCLES_PER_SCORE)
    return rounds * (send + combine) + tile_pass_cycles(chip, q_tiles * d_tiles, tb)
