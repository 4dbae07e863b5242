"""Cross-core reductions of decode norms and FlashDecode (perf.spatial_reduce, spatial_norm, spatial_attention).

Every expected number is rebuilt here from the n150 preset's own figures (NoC latency, unicast and multicast
rates, pack/unpack rates, the SFPU width) by the step lists of tt-metal's programs, not from the functions
under test; the structure is checked by what must move: a larger grid costs more NoC steps, LayerNorm two
statistic rounds, a prefill norm none, a unit served by one core no reduction.
"""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir.ops import AttentionShape, Op, OpKind
from tilewright.engine.perf.formats import OpFormats
from tilewright.engine.perf.spatial import stream_on_grid
from tilewright.engine.perf.spatial_attention import decode_on_grid, tree_reduction_cycles
from tilewright.engine.perf.spatial_chip import GridChip, grid_chip
from tilewright.engine.perf.spatial_norm import critical_path_cycles, norm_grid, norm_on_grid, norm_width
from tilewright.engine.perf.spatial_op import OpTensors, stream_op


def chip(name: str) -> GridChip:
    c = load_system(name).children[0]
    return grid_chip(c.compute, c.memories[0])


N150 = chip("wormhole-n150")


def _raw(name: str) -> dict:
    c = load_system(name).children[0].compute
    g = c.grid
    return {"lat": g.movement.noc_latency_cycles, "uni": g.movement.unicast, "mc": g.movement.multicast,
            "pack": g.pack_bytes_per_cycle, "unpack": g.unpack_bytes_per_cycle, "clock": g.clock_hz,
            "fixed": c.fixed_op_s}


RAW = _raw("wormhole-n150")
TILE_BF16 = 32 * 32 * 2.0


def test_tt_transformers_grid_for_llama_widths():
    """find_grid: the divisor of the width's tiles closest to 32, fewest rows with at most 8 columns."""
    assert norm_grid(N150, 4096 // 32) == (4, 8)  # Llama 3.1 8B: 128 tiles → 32 cores
    assert norm_grid(N150, 3072 // 32) == (4, 8)  # 3B: 96 tiles → 32
    assert norm_grid(N150, 40) == (5, 8)  # 40 tiles: 40 cores (|40-32| = 8 beats 20's 12)
    assert norm_grid(N150, 7) == (1, 7)


def test_rms_decode_norm_chain_by_hand():
    """RMSNorm of one 4,096-wide row on 4 × 8 cores, 4 tiles each. Pack-bound passes (2,048 B at 32 B/cycle =
    64 cycles; unpack 51 B/cycle and the FPU's 8 cycles are faster): 4 tiles × (3 passes + 1 reduce). The
    statistic: signal + release, read the row's 8 partials, combine 8; signal, read the other 3 rows, combine 3;
    gather 1 tile, multicast it. Then ε (1 pass) and rsqrt on one tile: 1,024 / 32 rows × 20 instructions."""
    lat, uni, mc = RAW["lat"], RAW["uni"], RAW["mc"]
    per_tile = TILE_BF16 / RAW["pack"]
    assert per_tile > TILE_BF16 / RAW["unpack"]
    local = 4 * 4 * per_tile
    stat = (2 * lat + (lat + 8 * TILE_BF16 / uni) + 8 * per_tile
            + lat + (lat + 3 * TILE_BF16 / uni) + 3 * per_tile
            + (lat + TILE_BF16 / uni) + (lat + TILE_BF16 / mc))
    finish = per_tile + 1024 / 32 * 20
    cycles, cores = critical_path_cycles(N150, 4096, False, TILE_BF16)
    assert cores == 32
    assert cycles == pytest.approx(local + stat + finish)


def test_layernorm_pays_two_statistics_and_more_passes():
    """LayerNorm: E[x] then E[(x - E[x])²], each a full NoC chain, and 5 passes + 2 reduces over the block
    instead of 3 + 1: the difference is exactly one chain and 3 block passes."""
    rms, _ = critical_path_cycles(N150, 4096, False, TILE_BF16)
    ln, _ = critical_path_cycles(N150, 4096, True, TILE_BF16)
    lat, uni, mc = RAW["lat"], RAW["uni"], RAW["mc"]
    per_tile = TILE_BF16 / RAW["pack"]
    stat = (7 * lat + 8 * TILE_BF16 / uni + 3 * TILE_BF16 / uni + 11 * per_tile
            + TILE_BF16 / uni + TILE_BF16 / mc)
    assert ln - rms == pytest.approx(stat + 3 * 4 * per_tile)


def test_single_core_norm_has_no_noc_chain():
    """A row of one tile sits on one core: only its passes, ε and the rsqrt."""
    cycles, cores = critical_path_cycles(N150, 32, False, TILE_BF16)
    per_tile = TILE_BF16 / RAW["pack"]
    assert cores == 1
    assert cycles == pytest.approx(4 * per_tile + per_tile + 32 * 20)


def test_norm_width_reads_rms_and_layernorm_from_params():
    assert norm_width(4096, 4096) == (4096, False)  # RMSNorm, one token
    assert norm_width(4096, 8 * 4096) == (4096, False)  # RMSNorm, 8 tokens
    assert norm_width(2 * 2048, 2048) == (2048, True)  # LayerNorm (γ, β), one token
    assert norm_width(0, 2048) is None


def test_decode_norm_op_adds_the_chain_to_the_stream_and_prefill_does_not():
    """Through stream_op: the decode norm costs the plain stream plus the chain (fixed cost and DRAM latency
    paid once); a 128-token prefill norm (4 tile rows) is the plain stream."""
    fmt = OpFormats("bf16", "bf16", "bf16", "HiFi2")
    h = 4096
    op = Op(name="block1.norm1", kind=OpKind.norm, layer=1, flops=0, params=h, in_elems=h, out_elems=h)
    decode = stream_op(N150, op, 0.0, OpTensors(h, h, h), False, fmt)
    plain = stream_on_grid(N150, 0.0, 2 * h * 2.0, h * 2.0, h)
    chain, _ = critical_path_cycles(N150, h, False, TILE_BF16)
    assert decode.seconds == pytest.approx(plain.seconds + chain / RAW["clock"])
    assert decode.seconds - decode.compute_s == pytest.approx(plain.seconds)
    s = 128
    pre = stream_op(N150, op, 0.0, OpTensors(h, s * h, s * h), False, fmt)
    assert pre.seconds == pytest.approx(stream_on_grid(N150, 0.0, (h + s * h) * 2.0, s * h * 2.0, s * h).seconds)
    assert norm_on_grid(N150, h, 0.0, 0.0, 64 * h, 0.0, 2.0) is None  # 64 rows: two tile rows
    back = stream_op(N150, op, 0.0, OpTensors(h, h, h), True, fmt)
    assert back.compute_s == 0.0  # the backward keeps the stream model


def test_flash_decode_tree_reduction_by_hand():
    """8 cores per K/V head: log2 8 = 3 rounds; each writes 4 output tiles + max + sum (6 bf16 tiles) to the
    partner and the partner does 1 + 12 + 3 passes and two exps at the softmax's per-score cycles; the root
    then scales 4 tiles by 1/sum."""
    from tilewright.engine.perf.spatial_attention import SOFTMAX_CYCLES_PER_SCORE

    lat, uni = RAW["lat"], RAW["uni"]
    per_tile = TILE_BF16 / RAW["pack"]
    round_ = (lat + 6 * TILE_BF16 / uni) + 16 * per_tile + 2 * 1024 * SOFTMAX_CYCLES_PER_SCORE
    assert tree_reduction_cycles(N150, 8, 1, 4) == pytest.approx(3 * round_ + 4 * per_tile)
    assert tree_reduction_cycles(N150, 1, 1, 4) == 0.0
    assert tree_reduction_cycles(N150, 5, 1, 4) == pytest.approx(3 * round_ + 4 * per_tile)  # ceil(log2 5)


def test_flash_decode_pays_the_position_read_and_the_tree():
    """Llama 3.1 8B decode on an n150 (8 K/V heads, 8 cores each, 32 keys a core): the kernel is one core's
    attention (one score tile: QKᵀ and PV over 4 head tiles, the softmax) plus the tree, after the fixed cost
    and the reader's dependent chain (the position from DRAM, its L1 copy, the Q read: one DRAM latency and two
    NoC transactions) and the keys' DRAM latency; with as many units as cores (no split, 8 score tiles a core)
    there is no tree and the chain remains."""
    from tilewright.engine.perf.spatial_attention import SOFTMAX_CYCLES_PER_SCORE
    from tilewright.engine.perf.spatial_chip import sub_block, tile_mac_cycles

    keys = 256
    mac = tile_mac_cycles(N150, "bf16", "bf16", "HiFi2", *sub_block(1, 4, N150.dst_tiles))
    per_score_tile = 2 * 4 * mac + 1024 * SOFTMAX_CYCLES_PER_SCORE
    lat2 = (2 * N150.dram_latency + 2 * RAW["lat"]) / RAW["clock"]
    shape = AttentionShape(heads=32, kv_heads=8, head_dim=128, queries=1, keys=keys)
    c, _ = decode_on_grid(N150, shape, 32, float(keys), ("bf16", "HiFi2"), (2.0, 1.0625), (True, True))
    assert c.cores == 64
    assert c.compute_s * RAW["clock"] == pytest.approx(per_score_tile + tree_reduction_cycles(N150, 8, 1, 4))
    assert c.seconds == pytest.approx(RAW["fixed"] + lat2 + max(c.compute_s, c.movement_s))
    full = AttentionShape(heads=64, kv_heads=64, head_dim=128, queries=1, keys=keys)
    one, _ = decode_on_grid(N150, full, 64, float(keys), ("bf16", "HiFi2"), (2.0, 1.0625), (True, True))
    assert one.cores == 64
    assert one.compute_s * RAW["clock"] == pytest.approx(8 * per_score_tile)
    assert one.seconds == pytest.approx(RAW["fixed"] + lat2 + max(one.compute_s, one.movement_s))


def test_a_decode_steps_layernorm_at_even_rows_is_read_from_its_row():
    """A decode step's norm holds one row per sample (the op's in_elems): at 8 rows of 2048 a LayerNorm (γ and β,
    4096 parameters) is a LayerNorm of width 2048, not an RMSNorm of 4096 as its element count alone suggests."""
    assert norm_width(2 * 2048, 8 * 2048) == (4096, False)  # the element count alone cannot tell
    assert norm_width(2 * 2048, 8 * 2048, 2048) == (2048, True)
    assert norm_width(2048, 8 * 2048, 2048) == (2048, False)
    ln = norm_on_grid(N150, 2 * 2048, 0.0, 0.0, 8 * 2048, 0.0, 2.0, 2048)
    rms_twice = norm_on_grid(N150, 2 * 2048, 0.0, 0.0, 8 * 2048, 0.0, 2.0)
    assert ln is not None and rms_twice is not None and ln.seconds != rms_twice.seconds
