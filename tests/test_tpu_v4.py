"""TPU v4 costs derived by hand from the chip's public component facts, against what the engine charges.

Every expected number here is rebuilt from the facts the preset cites, not read back from the preset: 2
TensorCores × 4 MXUs of 128 × 128 at 1.05 GHz; an MXU streams activations 8 rows at a time against a 128 × 128
weight block (so M pads to 8, N and K to 128); a systolic bubble of 3 × 128 cycles per GEMM; a VPU of
8 × 128 × 2 ALUs per TensorCore; HBM 1.2 TB/s at 0.9; ICI 45 GB/s usable per link and direction, 1 µs per hop.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import DType
from tilewright.engine.ir.hardware import Compute
from tilewright.engine.ir.ops import Op, OpKind, TensorSplit
from tilewright.engine.perf.collectives import collective
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.op_cost import op_time

CLOCK = 1.05e9
PEAK = 275e12  # documented; 2 × 4 × 128 × 128 × 2 × 1.05 GHz = 275.25e12
T0 = 3 * 128 / CLOCK  # weight shift-in + fill + drain of a 128 × 128 array
VECTOR = 2 * 8 * 128 * 2 * CLOCK
HBM = 1.2e12
HBM_ACHIEVED = 0.9 * HBM
ICI = 45e9
HOP = 1e-6


def _dev():
    system = load_system("tpu-v4-torus")
    chip = next(c for _, c in system.walk() if c.compute is not None)
    return device_model(chip.compute, chip.memories, None, DType.bf16)


def _gemm(m: int, n: int, k: int) -> Op:
    return Op(name="gemm", kind=OpKind.matmul, layer=0, flops=2.0 * m * n * k, params=float(n * k),
              gemm=(m, n, k), in_elems=float(m * k), out_elems=float(m * n), split=TensorSplit.none)


def _padded(x: int, g: int) -> int:
    return -(-x // g) * g


def test_the_peak_is_the_mxus_at_their_clock():
    dev = _dev()
    assert 2 * 4 * 128 * 128 * 2 * CLOCK == pytest.approx(dev.peak_flops, rel=1e-3)


def test_the_fill_curve_is_the_systolic_bubble_at_every_sampled_size():
    curve = _dev().compute.efficiency
    assert curve is not None
    for flops, eff in curve.points:
        assert eff == pytest.approx(flops / (flops + PEAK * T0), rel=1e-3)


@pytest.mark.parametrize(("m", "n", "k"),
                         [(1000, 1000, 1000), (4096, 4100, 4096), (2048, 2048, 2049), (4000, 1000, 3000)])
def test_a_gemm_that_pads_costs_the_padded_work_at_peak_plus_the_bubble(m, n, k):
    dev = _dev()
    t = op_time(_gemm(m, n, k), dev, 1, 1, False, False, 2.0)
    padded = 2.0 * _padded(m, 8) * _padded(n, 128) * _padded(k, 128)
    blocks = (_padded(m, 8) // 8) * (_padded(n, 128) // 128) * (_padded(k, 128) // 128)
    waves = math.ceil(blocks / 8)
    expected = padded * waves * 8 / blocks / PEAK
    assert t.compute_s > t.memory_s  # compute-bound shapes
    assert t.compute_s == pytest.approx(expected, rel=1e-3)
    # the bubble is paid once, on top (the curve is sampled four times a decade: within 10 % of t0)
    assert t.overhead_s == pytest.approx(T0, rel=0.1)
    assert t.busy_s == pytest.approx(expected + T0, rel=0.01)


def test_a_shape_that_does_not_pad_runs_at_peak():
    dev = _dev()
    m, n, k = 4096, 4096, 4096
    t = op_time(_gemm(m, n, k), dev, 1, 1, False, False, 2.0)
    assert t.compute_s == pytest.approx(2.0 * m * n * k / PEAK, rel=1e-3)


def test_small_shapes_pad_and_leave_mxus_idle():
    c = _dev().compute
    assert c.shape_efficiency(8, 128, 128) == pytest.approx(1 / 8)  # one 8×128×128 block for 8 MXUs
    assert c.shape_efficiency(8, 128, 1024) == pytest.approx(1.0)  # eight blocks (K split over the MXUs)
    assert c.shape_efficiency(1, 4096, 4096) == pytest.approx(1 / 8)  # one token pads to 8 rows
    assert c.shape_efficiency(9, 128, 1024) == pytest.approx(9 / 16)  # 16 rows, 16 blocks: two full waves
    assert c.shape_efficiency(8, 100, 128) == pytest.approx(100 / 128 / 8)


def test_a_depth_left_out_pads_only_the_output():
    c = Compute(peak_flops={"bf16": PEAK}, tensor_cores=8, gemm_granule=(8, 128, 128))
    assert c.shape_efficiency(64, 256) == pytest.approx(1.0)
    assert c.shape_efficiency(64, 200) == pytest.approx(200 / 256)


def test_without_a_granule_the_output_tiling_is_unchanged():
    """The granule is the systolic model; a device without it (every GPU preset) keeps the tile and wave model."""
    tiled = Compute(peak_flops={"bf16": PEAK}, tensor_cores=8, pe_array=(128, 128))
    assert tiled.shape_efficiency(1000, 1000, 1000) == pytest.approx(1000 * 1000 / (1024 * 1024) * 64 / 64)


@pytest.mark.parametrize(("m", "n", "k"), [(1, 4096, 4096), (8, 12288, 4096), (64, 11008, 4096), (512, 512, 512),
                                          (128, 128, 128), (8192, 8192, 8192), (333, 777, 555)])
def test_no_gemm_beats_the_roofline(m, n, k):
    t = op_time(_gemm(m, n, k), _dev(), 1, 1, False, False, 2.0)
    moved = 2.0 * (m * k + k * n + m * n)
    assert t.busy_s >= 2.0 * m * n * k / PEAK
    assert t.busy_s >= moved / HBM
    assert t.busy_s >= moved / HBM_ACHIEVED + 0.5 * T0  # the achievable rate, and the bubble is never hidden


def test_a_decode_gemv_streams_its_weights_at_the_achievable_hbm_rate():
    t = op_time(_gemm(1, 4096, 4096), _dev(), 1, 1, False, False, 2.0)
    moved = 2.0 * (4096 + 4096 * 4096 + 4096)
    assert t.memory_s == pytest.approx(moved / HBM_ACHIEVED, rel=1e-6)
    assert t.busy_s == pytest.approx(moved / HBM_ACHIEVED + T0, rel=0.01)


def test_elementwise_ops_run_on_the_vector_units():
    dev = _dev()
    elems = 4096 * 4096
    op = Op(name="norm", kind=OpKind.norm, layer=0, flops=5.0 * elems, in_elems=elems, out_elems=elems)
    t = op_time(op, dev, 1, 1, False, False, 2.0)
    assert t.compute_s == pytest.approx(5.0 * elems / VECTOR, rel=1e-6)
    assert t.memory_s == pytest.approx(2 * 2.0 * elems / HBM_ACHIEVED, rel=1e-6)


def test_a_large_all_reduce_around_a_cube_axis_moves_at_the_usable_ici_rate():
    hw = elaborate(load_system("tpu-v4-torus"))
    line = [d.index for d in hw.devices if d.coord[1] == 0 and d.coord[2] == 0]  # one wrapped axis of 4
    size = 1e9
    coll = collective(hw, "all-reduce", line, size)
    # bidirectional ring: each member sends 2(p-1)/p of the data, half each way, over its two links
    bandwidth = 2 * (len(line) - 1) / len(line) * size / 2 / ICI
    assert coll.time(hw) == pytest.approx(bandwidth, rel=0.01)
    assert coll.time(hw) >= bandwidth + 2 * (len(line) - 1) * HOP * 0.999


def test_a_small_all_reduce_is_bound_by_hop_latency():
    hw = elaborate(load_system("tpu-v4-torus"))
    line = [d.index for d in hw.devices if d.coord[1] == 0 and d.coord[2] == 0]
    t = collective(hw, "all-reduce", line, 1024).time(hw)
    assert t >= 2 * HOP  # at least a round trip to the far member of the ring of 4 (two hops each way)
    assert t < 20 * HOP


def test_decode_on_a_v4_8_is_no_faster_than_streaming_its_weight_shard():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from calibrate_tpu import Serving, serving_project
    from tilewright.engine.simulate import simulate

    p = serving_project(Serving("llama2-7b", (2, 2, 1), 1, 128, 16))
    r = simulate(p, series=False)
    weights_per_chip = 6_738_415_616 * 2.0 / 4
    assert r.tpot_s is not None
    assert r.tpot_s >= weights_per_chip / HBM_ACHIEVED
    assert r.tpot_s < 2 * weights_per_chip / HBM_ACHIEVED  # batch 1: the weights, not the ICI, set the pace
