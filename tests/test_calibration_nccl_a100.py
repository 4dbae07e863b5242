"""Fidelity: the dgx-a100 preset's NVSwitch all-reduce against published nccl-tests runs on A100-SXM4
nodes (benchmarks/calibrate_nccl_a100.py keeps the rows and their sources)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
from calibrate_nccl_a100 import (  # noqa: E402
    HGX,
    MIB,
    ROWS,
    TARGET_MEAN_ERROR,
    TARGET_ROW_ERROR,
    bus_factor,
    evaluate,
    group_size_ratio,
    is_target,
    launch_overhead,
)


@pytest.fixture(scope="module")
def results() -> list[dict]:
    return evaluate()


def test_rows_agree_with_their_printed_bus_bandwidth():
    """A transcription error in size or time shows: nccl-tests prints busbw = size / time x 2 (n-1) / n,
    rounded to 0.01 GB/s from a time rounded to 4 significant digits."""
    for r in ROWS:
        busbw = r.size_bytes / (r.time_us * 1e-6) * bus_factor(r.gpus) / 1e9
        assert busbw == pytest.approx(r.busbw_gbs, rel=2e-3, abs=0.02), r


def test_rows_are_well_formed():
    assert {r.launch for r in ROWS} == {"per-gpu", "g-n", "unknown"}
    assert {r.gpus for r in ROWS} == {2, 4, 8}
    series: dict[tuple[str, str, int], list[int]] = {}
    for r in ROWS:
        assert r.source and r.time_us > 0 and r.size_bytes > 0
        series.setdefault((r.source, r.launch, r.gpus), []).append(r.size_bytes)
    for sizes in series.values():
        assert sizes == sorted(set(sizes)), "one row per size, in increasing order"


def test_target_rows_come_from_two_sources_over_the_whole_range():
    target = [r for r in ROWS if is_target(r)]
    assert len({r.source for r in target}) >= 2
    assert min(r.size_bytes for r in target) == MIB
    assert max(r.size_bytes for r in target) == 256 * MIB


def test_every_target_row_within_tolerance(results):
    for x in results:
        if is_target(x["row"]):
            assert x["err"] <= TARGET_ROW_ERROR, (x["row"], x["pred"])


def test_mean_target_error_within_tolerance(results):
    assert statistics.fmean(x["err"] for x in results if is_target(x["row"])) <= TARGET_MEAN_ERROR


def test_prediction_grows_with_size_and_group(results):
    """The engine's all-reduce costs more for more bytes and, at equal bytes, for more GPUs."""
    pred = {(x["row"].gpus, x["row"].size_bytes): x["pred"] for x in results}
    for (gpus, size), t in pred.items():
        if (gpus, 2 * size) in pred:
            assert pred[(gpus, 2 * size)] > t
        if (2 * gpus, size) in pred:
            assert pred[(2 * gpus, size)] > t


def test_one_process_for_all_gpus_is_slower_on_the_same_node():
    """Why the -g N rows are not a target: on the node measured both ways, the -g 8 run is slower at every
    size up to 256 MiB, most at the smallest ones."""
    ratios = launch_overhead()
    assert len(ratios) >= 9 and all(v > 1 for v in ratios.values())
    assert ratios[MIB] > ratios[256 * MIB]


def test_per_gpu_rate_does_not_depend_on_group_size_on_one_switch(results):
    """On the node measured with 2 and with 4 GPUs (same launch mode, 24 NCCL channels both times), the bus
    bandwidth of large all-reduces is the same within 1 %, as NCCL's tuning model has it (busBw = nChannels x
    bwIntra, whatever the group). The engine agrees: its bus bandwidth for 4 GPUs over that for 2 matches the
    measured ratio within 3 % at those sizes (a per-group-size factor would break this)."""
    measured = {size: ratio for size, ratio in group_size_ratio(2, 4, HGX).items() if size >= 256 * MIB}
    assert len(measured) >= 2
    assert all(abs(ratio - 1) < 0.01 for ratio in measured.values()), measured
    pred = {(x["row"].gpus, x["row"].size_bytes): x["pred"] for x in results if x["row"].source in
            (HGX.format(n=2), HGX.format(n=4))}
    for size, ratio in measured.items():
        busbw = {n: size / pred[(n, size)] * bus_factor(n) for n in (2, 4)}
        assert busbw[4] / busbw[2] == pytest.approx(ratio, rel=0.03), (size, busbw)
