"""Per-kernel GEMM times against public measurements (``benchmarks/calibrate_gemm_gpu.py``): the engine's price
of one cuBLAS-class GEMM kernel at small and medium shapes on A100 and H100 stays within the stated distance of
what public benchmarks measured. Predictions come from the engine (``op_cost.op_time`` on the presets), the
expectations from the measured rows; the limits are the benchmark's own, derived from the comparison."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import calibrate_gemm_gpu as cg  # noqa: E402

ROWS = cg.load_rows()
ERRORS = cg.errors(ROWS)


def test_rows_load_with_sources():
    """Both GPUs, single and batched GEMMs, every row with its source, positive sizes and a rate below the
    datasheet peak (a transcription error shows up as an impossible rate)."""
    assert {r.gpu for r in ROWS} == {"a100", "h100"}
    assert sum(r.gpu == "a100" for r in ROWS) >= 50 and sum(r.gpu == "h100" for r in ROWS) >= 100
    assert any(r.batch > 1 for r in ROWS) and any(r.batch == 1 for r in ROWS)
    for r in ROWS:
        assert r.url and r.source and r.library and r.timing
        assert min(r.batch, r.m, r.n, r.k) >= 1
        assert 0.0 < r.tflops < cg.PEAK_TFLOPS[r.gpu]
    shapes = [(r.gpu, r.batch, r.m, r.n, r.k, r.url) for r in ROWS]
    assert len(shapes) == len(set(shapes)), "a shape listed twice for the same source"


def test_kernel_only_rows_leave_out_the_floor():
    """A row timed as the kernel's own duration is compared without the launch-to-launch floor: its prediction
    is the event-timed one less ``fixed_op_s``."""
    row = next(r for r in ROWS if r.timing in cg.KERNEL_ONLY)
    dev = cg.device(row.gpu, row.dtype)
    as_events = cg.Row(**{**row.__dict__, "timing": "events_l2_flushed"})
    assert cg.predicted_s(as_events, dev) - cg.predicted_s(row, dev) == pytest.approx(dev.compute.fixed_op_s)


@pytest.mark.parametrize("group", sorted(cg.ROW_LIMITS))
def test_every_row_within_its_limit(group):
    gpu, batched = group
    sel = [(r, e) for r, e in zip(ROWS, ERRORS, strict=True) if r.gpu == gpu and (r.batch > 1) == batched]
    assert sel
    worst = max(sel, key=lambda p: abs(p[1]))
    assert abs(worst[1]) <= cg.ROW_LIMITS[group], f"{gpu} {worst[0].label}: {worst[1]:+.1%} ({worst[0].url})"


@pytest.mark.parametrize("group", sorted(cg.ROW_LIMITS))
def test_group_median_close(group):
    """No systematic bias per group: half the rows predicted faster, half slower, within MEDIAN_LIMIT."""
    gpu, batched = group
    sel = [e for r, e in zip(ROWS, ERRORS, strict=True) if r.gpu == gpu and (r.batch > 1) == batched]
    assert abs(statistics.median(sel)) <= cg.MEDIAN_LIMIT


def test_every_group_has_a_limit():
    groups = {(r.gpu, r.batch > 1) for r in ROWS}
    assert groups == set(cg.ROW_LIMITS)
