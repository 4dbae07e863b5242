"""Physical invariants of the spatial split of GEMMs over a grid device (perf.spatial*).

Every split the model can choose reads each operand from DRAM at least once and writes the output at least
once; no split beats the roofline of its format and fidelity, the DRAM bandwidth or the fixed per-op cost;
block floats move their bytes per element; more mantissa passes are slower when compute-bound.
"""

from __future__ import annotations

import itertools
import math
import time

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir.common import dtype_bytes
from tilewright.engine.perf.spatial import gemm_on_grid
from tilewright.engine.perf.spatial_chip import GridChip, grid_chip
from tilewright.engine.perf.spatial_choice import full_grid_2d, one_d, runtime_default, two_d
from tilewright.engine.perf.spatial_cost import GemmProblem, gemm_cost

SHAPES = [(512, 512, 512), (4096, 4096, 4096), (32, 8192, 8192), (8192, 1024, 256), (96, 4096, 11008),
          (4096, 4096, 32), (1, 4096, 4096)]
FORMATS = [("bf16", "HiFi4"), ("bf16", "HiFi2"), ("bfp8", "LoFi"), ("bfp4", "LoFi")]


def chip(name: str) -> GridChip:
    c = load_system(name).children[0]
    return grid_chip(c.compute, c.memories[0])


CHIPS = {name: chip(name) for name in ("wormhole-n150", "blackhole-p150")}


def every_split(ch: GridChip, p: GemmProblem):
    yield from two_d(ch, p)
    yield from one_d(ch, p)
    yield from full_grid_2d(ch, p)
    yield runtime_default(ch, p)


@pytest.mark.parametrize("name", sorted(CHIPS))
@pytest.mark.parametrize("shape", SHAPES)
def test_dram_traffic_never_below_each_operand_once(name, shape):
    ch = CHIPS[name]
    m, k, n = shape
    for fmt, fid in FORMATS:
        p = GemmProblem(m, k, n, fmt, fmt, fmt, fid)
        b = dtype_bytes(fmt)
        for s in every_split(ch, p):
            c = gemm_cost(ch, p, s)
            assert c.dram_read_bytes >= (m * k + k * n) * b, s
            assert c.dram_write_bytes >= m * n * b, s


@pytest.mark.parametrize("name", sorted(CHIPS))
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("policy", ["auto", "2d", "1d", "runtime-default"])
def test_time_never_beats_a_roofline_bound(name, shape, policy):
    ch = CHIPS[name]
    m, k, n = shape
    for fmt, fid in FORMATS:
        c = gemm_on_grid(ch, m, k, n, fmt, fmt, fmt, fid, policy)
        bounds = {
            "compute": 2.0 * m * n * k / ch.peak(fmt, fid),
            "DRAM": (c.dram_read_bytes + c.dram_write_bytes) / ch.dram_peak,
            "operands once": (m * k + k * n + m * n) * dtype_bytes(fmt) / ch.dram_peak,
            "fixed": ch.fixed_s,
        }
        for what, t in bounds.items():
            assert c.seconds >= t * (1 - 1e-12), (what, c.split.describe())
        assert c.seconds >= c.fixed_s + max(c.compute_s, c.movement_s) * (1 - 1e-12)


def test_operands_in_l1_skip_dram():
    ch = CHIPS["wormhole-n150"]
    c = gemm_on_grid(ch, 512, 1024, 1024, "bf16", "bf16", "bf16", "HiFi2", "2d", None, (False, True, False))
    assert c.dram_read_bytes == pytest.approx(1024 * 1024 * 2) and c.dram_write_bytes == 0


def test_bfp8_weights_move_their_bytes_per_element():
    """A decode GEMM (one tile of rows) reads its weights once: bfp8 moves 1.0625/2 of bf16's bytes."""
    ch = CHIPS["wormhole-n150"]
    m, k, n = 32, 4096, 4096
    act = m * k * 2
    bf16 = gemm_on_grid(ch, m, k, n, "bf16", "bf16", "bf16", "HiFi2").dram_read_bytes - act
    bfp8 = gemm_on_grid(ch, m, k, n, "bf16", "bfp8", "bf16", "HiFi2").dram_read_bytes - act
    assert bf16 == pytest.approx(k * n * 2)
    assert bfp8 / bf16 == pytest.approx(1.0625 / 2)


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_lofi_faster_than_hifi4_when_compute_bound(name):
    """Fewer mantissa passes are faster; how much depends on the unpackers' feed: bfp4 (576 B a tile) gains
    nearly the full 4×, bf16 (2,048 B) is feed-bound at LoFi on Wormhole and gains less."""
    ch = CHIPS[name]
    for fmt in ("bf16", "bfp8", "bfp4"):
        lofi = gemm_on_grid(ch, 8192, 8192, 8192, fmt, fmt, fmt, "LoFi")
        hifi4 = gemm_on_grid(ch, 8192, 8192, 8192, fmt, fmt, fmt, "HiFi4")
        assert hifi4.bound == "compute"
        assert lofi.seconds < 0.8 * hifi4.seconds
        if fmt == "bfp4":
            assert lofi.seconds < 0.4 * hifi4.seconds


def test_split_choice_is_by_cost_and_reported():
    ch = CHIPS["wormhole-n150"]
    square = gemm_on_grid(ch, 4096, 4096, 4096, "bf16", "bf16", "bf16", "HiFi2")
    assert square.split.kind == "2d" and square.split.cores == 64
    assert square.split.describe().startswith("2-D 8×8")
    p = GemmProblem(4096, 4096, 4096, "bf16", "bf16", "bf16", "HiFi2")
    assert all(gemm_cost(ch, p, s).seconds >= square.seconds for s in every_split(ch, p))
    skinny = gemm_on_grid(ch, 32, 8192, 8192, "bf16", "bfp8", "bf16", "HiFi2")
    assert skinny.split.kind != "2d" or skinny.split.k_split > 1 or skinny.split.rows == 1


def test_more_cores_are_not_slower_on_large_gemms():
    small = CHIPS["blackhole-p150"]
    large = small.with_grid(10, 13)
    for fmt, fid in FORMATS:
        a = gemm_on_grid(small, 8192, 8192, 8192, fmt, fmt, fmt, fid)
        b = gemm_on_grid(large, 8192, 8192, 8192, fmt, fmt, fmt, fid)
        assert b.seconds <= a.seconds


def test_choice_is_memoised_and_fast():
    ch = CHIPS["blackhole-p150"]
    shapes = [(s, h, f) for s in (128, 2048) for h, f in itertools.product((4096, 5120), (11008, 13824))]
    t0 = time.perf_counter()
    for m, k, n in shapes:
        gemm_on_grid(ch, m + 1, k, n, "bf16", "bfp8", "bf16", "HiFi2")
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for m, k, n in shapes:
        gemm_on_grid(ch, m + 1, k, n, "bf16", "bfp8", "bf16", "HiFi2")
    again = time.perf_counter() - t0
    assert first < 2.0 and again < first / 10


def test_fractional_shard_sizes_round_up_to_whole_elements():
    ch = CHIPS["wormhole-n150"]
    c = gemm_on_grid(ch, 100.5, 64, 64, "bf16", "bf16", "bf16", "HiFi2")
    assert c.dram_write_bytes >= math.ceil(100.5) * 64 * 2
