"""DRAM-sharded decode matmuls on a Wormhole n150: the op model against tt-metal's published device times.

A decode matmul (32 rows of activations) is DRAM-bound: its time is the weight bytes over the achievable
bank-adjacent bandwidth plus a short fill and drain. tt-metal publishes the device time of a few such matmuls
(``benchmarks/calibrate_tiled_llm.py`` ``SHARDED_MATMULS``); the op model must land near them, from the small
(2 MB, 58 % of the DRAM peak) to the large (20 MB, 75 %). Large ones run at the preset's bank-adjacent
efficiency (S3's 239-260 GB/s for Llama3-70B / Mixtral decode matmuls), which Llama 3.1 8B's matmuls inherit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.perf.spatial import gemm_on_grid
from tilewright.engine.perf.spatial_chip import grid_chip

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from calibrate_tiled_llm import SHARDED_MATMULS, ShardedMatmul  # noqa: E402

BFP8_TILE = 1088  # bytes of a 32 × 32 bfloat8_b tile: 1024 mantissas + 64 shared exponents
PEAK = 12 * 24e9  # 12 GDDR6 channels × 24 GB/s (tt-isa-documentation DRAMTile)


def n150_chip():
    chip = load_system("wormhole-n150").children[0]
    return grid_chip(chip.compute, chip.memories[0])


def decode_matmul(chip, k: int, n: int, weights: str, fidelity: str):
    """The op model's decode matmul: A (32 × k, bf16) in L1, B DRAM-sharded, C in L1."""
    return gemm_on_grid(chip, 32, k, n, "bf16", weights, "bf16", fidelity, "auto", None, (False, True, False), True)


@pytest.mark.parametrize("mm", SHARDED_MATMULS, ids=lambda mm: mm.label)
def test_a_dram_sharded_decode_matmul_takes_about_its_published_device_time(mm: ShardedMatmul):
    """Within 20 % of tt-metal's measurement (its kernel pads N to 32 × 12 banks, reads the padded bytes
    and runs one reader-and-compute core per bank, as the op model's DRAM-sharded program does)."""
    t = decode_matmul(n150_chip(), mm.k, mm.n, mm.weights, mm.fidelity).seconds
    assert abs(t / (mm.us * 1e-6) - 1) < 0.20


def test_published_small_decode_matmuls_reach_a_lower_share_of_the_dram_peak():
    """The published figures themselves: a 2 MB matmul reaches a smaller share of the 288 GB/s than a 5 MB
    one, since its fill, drain and fixed cost are a larger part of it (a check of the table the model is
    compared with: bytes as tt-metal reads them, N padded to 32 × 12)."""
    by_label = {mm.label: mm for mm in SHARDED_MATMULS}
    small, mid = by_label["DeepSeek-V3 qkv_a"], by_label["DeepSeek-V3 wq_b"]
    share = {}
    for mm in (small, mid):
        n_pad = -(-mm.n // (32 * 12)) * 32 * 12
        share[mm.label] = mm.k * n_pad * BFP8_TILE / 1024 / (mm.us * 1e-6) / PEAK
    assert share[small.label] == pytest.approx(2193408 / 13.2e-6 / PEAK)  # 896 × 2304 × 1088 / 1024 B
    assert share[small.label] < share[mid.label] < 0.8


def test_llama_8b_mlp_down_runs_at_the_bank_adjacent_rate():
    """Llama 3.1 8B's largest decode matmul on an n150 (FF2: k 14336, n 4096, bfp8), DRAM-bound. By hand: N
    padded to 32 × 12 banks (4224: 11 tiles per bank's worker), 14336 × 4224 × 1088 / 1024 B over 288 GB/s ×
    0.866 (the preset's efficiency, S3's 239-260 GB/s midpoint) is 258.1 µs — the op model's time is that
    plus a few µs of fill, drain and fixed cost."""
    chip = n150_chip()
    n_pad = -(-4096 // (32 * 12)) * 32 * 12
    floor = 14336 * n_pad * BFP8_TILE / 1024 / (PEAK * 0.866)
    assert n_pad == 4224 and floor == pytest.approx(258.1e-6, rel=1e-3)
    t = decode_matmul(chip, 14336, 4096, "bfp8", "HiFi2").seconds
    assert floor <= t < floor + 10e-6
