"""Fidelity: the engine's collective costs on the Tenstorrent mesh presets against the measured CCLs
(tenstorrent_ccl.csv: all-gather, reduce-scatter, all-reduce on 2-8 Wormhole and Blackhole chips)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
from calibrate_ccl import CSV, by_topology, evaluate  # noqa: E402

pytestmark = pytest.mark.skipif(not CSV.is_file(), reason=f"reference data missing: {CSV}")


@pytest.fixture(scope="module")
def results() -> list[dict]:
    return evaluate()


def test_every_reduction_row_is_predicted(results):
    assert len(results) == 108
    assert {x["algorithm"] for x in results} == {"line", "ring"}


def test_median_error_within_twenty_percent(results):
    assert statistics.median(x["err"] for x in results) <= 0.20


def test_no_row_off_by_two_times(results):
    assert max(x["err"] for x in results) < 1.0


def test_per_topology_groups_partition_the_rows(results):
    """The per-topology table covers every row once: 2- and 4-chip lines and the 8-chip ring per machine,
    each with six sizes of three collectives."""
    groups = by_topology(results)
    assert sum(n for n, _, _ in groups.values()) == len(results)
    assert sorted(k.split(" ", 1)[1] for k in groups) == ["2-chip line", "2-chip line", "4-chip line",
                                                           "4-chip line", "8-chip ring", "8-chip ring"]
    assert {n for n, _, _ in groups.values()} == {6 * 3}
