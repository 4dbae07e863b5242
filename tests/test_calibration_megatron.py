"""Fidelity: the dgx-a100 preset against Megatron-LM's measured weak scaling (SC'21 Table 1).

Micro-batch 1, no interleaving, full recomputation. Uses the analytic engine, which equals the event
engine with contention off (tested elsewhere); contention moves these rows by well under 1 %.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
from calibrate_megatron import CSV, measured_time, project_for, rows  # noqa: E402
from tilewright.engine.simulate import simulate  # noqa: E402


@pytest.fixture(scope="module")
def errors() -> list[float]:
    assert CSV.is_file(), f"reference data missing: {CSV} (shared/ must sit beside the repository)"
    out = []
    for r in rows():
        result = simulate(project_for(r, "analytic"))
        out.append(result.iteration_time_s / measured_time(r) - 1)
    return out


def test_mean_absolute_error_within_ten_percent(errors):
    assert len(errors) == 10
    assert sum(abs(e) for e in errors) / len(errors) <= 0.10


def test_no_row_off_by_more_than_fifteen_percent(errors):
    assert max(abs(e) for e in errors) <= 0.15
