"""The serving view's Qt-free data shaping (studio.model.serving_data): what the plots and the table get
from the engine's ServingResult — checked against the records and the result's own metrics."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from tilewright.engine.serving import GOODPUT_TARGET, ServingConfig
from tilewright.studio.model.serving_data import (
    PERCENTILES,
    kv_curves,
    metric_rows,
    read_rates,
    serving_view,
    step_xy,
    timeline_bars,
)
from tilewright.studio.units import SECONDS, format_value

from tests.serving_doubles import small_result


@pytest.mark.parametrize(
    ("text", "rates"),
    [
        ("2", [2.0]),
        ("1, 2,4", [1.0, 2.0, 4.0]),
        ("0.5:2:0.5", [0.5, 1.0, 1.5, 2.0]),
        ("3 requests/s", [3.0]),
        ("0.25 /s", [0.25]),
    ],
)
def test_rates_read_like_the_cli(text, rates):
    assert read_rates(text) == pytest.approx(rates)


@pytest.mark.parametrize("text", ["abc", "0", "-1", "2:1:0.5", ""])
def test_bad_rates_say_why(text):
    with pytest.raises(ValueError, match=r"\S"):
        read_rates(text)


def test_timeline_phases_follow_the_records():
    result = small_result()
    bars = timeline_bars(result)
    by_arrival = sorted(result.records, key=lambda r: r.arrival_s)
    assert bars.ids.tolist() == [r.id for r in by_arrival]
    rows = {
        name: dict(zip(y.astype(int).tolist(), zip(x0, w, strict=True), strict=True))
        for name, (y, x0, w) in bars.phases.items()
    }
    for row, r in enumerate(by_arrival):
        queued = r.scheduled_s - r.arrival_s
        assert (row in rows["queued"]) == (queued > 0)
        if queued > 0:
            assert rows["queued"][row] == pytest.approx((r.arrival_s, queued))
        assert rows["prefill"][row] == pytest.approx((r.scheduled_s, r.first_token_s - r.scheduled_s))
        if r.transfer_s > 0:
            assert rows["KV transfer"][row] == pytest.approx((r.first_token_s, r.transfer_s))
        decode = r.finish_s - r.first_token_s - r.transfer_s
        if decode > 0:
            start, width = rows["decode"][row]
            assert start + width == pytest.approx(r.finish_s) and width == pytest.approx(decode)
        else:
            assert row not in rows["decode"]  # a one-token answer has no decode bar
    assert bars.start_s == min(r.arrival_s for r in result.records)
    assert bars.end_s == max(r.finish_s for r in result.records)


def test_kv_curves_are_percent_of_pages():
    result = small_result()
    m = result.metrics()
    curves = {c.kind: c for c in kv_curves(result, m)}
    assert set(curves) == set(result.kv_series)
    for kind, series in result.kv_series.items():
        c = curves[kind]
        assert c.times.tolist() == [t for t, _ in series]
        assert c.percent == pytest.approx([100 * f for _, f in series])
        assert c.peak_percent == pytest.approx(100 * m["kv"][kind]["peak_fraction"])
        assert c.mean_percent == pytest.approx(100 * m["kv"][kind]["mean_fraction"])
        assert c.pages == result.kv_pages[kind]


def test_metric_rows_carry_the_results_numbers_with_units():
    result = small_result()
    m = result.metrics()
    rows = dict(metric_rows(result, m, 2.0))
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")):
        for p in PERCENTILES:
            assert rows[f"{label} p{p}"] == format_value(m[key][f"p{p}"], SECONDS)
            assert rows[f"{label} p{p}"].endswith("s")
    assert rows["arrival rate"] == "2 requests/s"
    assert rows["throughput"].endswith("requests/s")
    assert rows["output throughput"].endswith("tokens/s")
    assert rows["goodput"].endswith("requests/s")
    assert rows["requests meeting the SLO"].startswith(f"{100 * m['goodput']['fraction_meeting_slo']:.1f} %")
    assert rows["requests"] == f"{len(result.records)} requests"
    assert rows["KV cache (decode)"] == f"{result.kv_pages['decode']:,} pages × {result.kv_page_tokens:,} tokens"
    assert rows["KV peak (prefill)"].endswith("% of pages")
    assert "TTFT ≤ 500 ms" in rows["SLO"] and "TPOT ≤ 50 ms" in rows["SLO"]


def test_metric_rows_show_time_between_tokens_and_the_kv_transfer_only_when_there_are_some():
    result = dataclasses.replace(small_result(), tbt_s=np.array([0.01, 0.02, 0.03, 0.2]))
    m = result.metrics()
    rows = dict(metric_rows(result, m, 2.0))
    for p in PERCENTILES:
        assert rows[f"time between tokens p{p}"] == format_value(float(np.percentile(result.tbt_s, p)), SECONDS)
    moved = [r.transfer_s for r in result.records if r.transfer_s > 0]
    assert moved and rows["KV transfer mean"] == format_value(float(np.mean(moved)), SECONDS)
    for r in result.records:
        r.transfer_s = 0.0
    rows = dict(metric_rows(result, result.metrics(), 2.0))
    assert not any(k.startswith("KV transfer") for k in rows)
    assert rows["time between tokens p99"].endswith("s")


def test_sweep_view_curves_and_best_rate():
    config = ServingConfig(slo_ttft_s=0.5, slo_tpot_s=0.05)
    rates = [1.0, 2.0, 4.0]
    results = [small_result(config, scale=r) for r in rates]
    best = max(r for r, res in zip(rates, results, strict=True) if res.goodput_fraction() >= GOODPUT_TARGET)
    view = serving_view("p", rates, results, best)
    assert view.is_sweep and view.runs[view.chosen].rate == best
    assert view.latency.rates.tolist() == rates
    for i, res in enumerate(results):
        m = res.metrics()
        for key in ("ttft_s", "tpot_s", "e2e_s"):
            for p in PERCENTILES:
                assert view.latency.values[key][p][i] == pytest.approx(m[key][f"p{p}"])
        assert view.latency.goodput_fraction[i] == pytest.approx(res.goodput_fraction())
    assert view.latency.slo == {"ttft_s": 0.5, "tpot_s": 0.05}
    assert view.notes == ["a note"]


def test_a_trace_run_has_no_rate():
    result = small_result()
    view = serving_view("p", [None], [result], None)
    assert view.runs[0].label == "trace" and not view.is_sweep
    assert dict(view.runs[0].rows)["arrival rate"] == "trace"
    assert not math.isnan(view.latency.values["ttft_s"][50][0])
    assert np.isfinite(view.latency.rates).all()


def test_step_polyline_holds_each_value_until_the_next_sample():
    x, y = step_xy(np.array([0.0, 1.0, 3.0]), np.array([10.0, 20.0, 5.0]))
    assert x.tolist() == [0.0, 1.0, 1.0, 3.0, 3.0]
    assert y.tolist() == [10.0, 10.0, 20.0, 20.0, 5.0]


def test_without_an_slo_no_rate_is_best():
    config = ServingConfig()
    results = [small_result(config, scale=r) for r in (1.0, 2.0)]
    view = serving_view("p", [1.0, 2.0], results, 2.0)
    assert view.latency.best_rate is None and view.chosen == 0
