"""The serving window (Run ▸ Serve…): settings with units, a serving run on a worker with progress and a
Cancel that stops it, and views that show the numbers of the ServingResult the engine answered."""

from __future__ import annotations

import os
import threading
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PySide6.QtCore import QTimer  # noqa: E402
from tilewright.engine.io.presets import load_project_preset  # noqa: E402
from tilewright.engine.serving import GOODPUT_TARGET  # noqa: E402
from tilewright.studio.model.serving_data import PHASE_COLOURS, REQUESTS_PER_S  # noqa: E402
from tilewright.studio.serving_controller import ServingController  # noqa: E402
from tilewright.studio.ui.serving import ServingWindow  # noqa: E402
from tilewright.studio.units import SECONDS, format_value  # noqa: E402

from tests.serving_doubles import FakeServing  # noqa: E402

H100 = "llama2-70b-h100-inference"  # 8 × H100, tp 8: ~0.3 s per 40-request simulation


@pytest.fixture
def serving_window(qtbot):
    def make(fake: FakeServing | None = None) -> ServingWindow:
        project = load_project_preset(H100)
        controller = ServingController(simulate=fake.simulate, sweep=fake.sweep) if fake is not None else None
        w = ServingWindow(lambda: project, controller=controller)
        qtbot.addWidget(w)
        w.resize(1400, 900)
        w.show()
        qtbot.waitExposed(w)
        return w

    return make


def _finish(qtbot, w: ServingWindow, timeout: int = 30_000) -> None:
    qtbot.waitUntil(lambda: not w.controller.running, timeout=timeout)


def test_run_menu_opens_one_serving_window(make_window, qtbot):
    main = make_window(load_project_preset(H100), persist=False)
    run_action = next(a for a in main.menuBar().actions() if a.text() == "&Run")  # held: PySide drops a
    run_menu = run_action.menu()  # menu reached through a temporary
    serve = next(a for a in run_menu.actions() if a.text() == "&Serve…")
    serve.trigger()
    windows = main.findChildren(ServingWindow)
    assert len(windows) == 1 and windows[0].isVisible()
    assert H100 in windows[0].windowTitle()
    assert windows[0].form.prefill_devices.value() + windows[0].form.decode_devices.value() == 8
    serve.trigger()  # raised again, not a second one
    assert len([w for w in main.findChildren(ServingWindow) if not w.released]) == 1


def test_every_setting_shows_its_unit(serving_window):
    w = serving_window(FakeServing())
    f = w.form
    suffixes = {
        f.count: "requests",
        f.prompt: "tokens",
        f.output: "tokens",
        f.max_batch: "sequences",
        f.token_budget: "tokens/iteration",
        f.chunk: "tokens",
        f.prefill_devices: "devices",
        f.decode_devices: "devices",
        f.spec_k: "draft tokens",
        f.spec_accept: "%",
        f.spec_draft_cost: "% of a decode step",
        f.slo_ttft: "ms",
        f.slo_tpot: "ms",
    }
    for box, unit in suffixes.items():
        assert box.suffix().strip() == unit
    assert "requests/s" in f.layout().itemAt(0).widget().layout().labelForField(f.rates).text()


def test_serving_runs_on_a_worker_with_progress_and_a_free_gui(serving_window, qtbot):
    fake = FakeServing(steps=5)
    fake.release = threading.Event()
    w = serving_window(fake)
    w.form.rates.setText("2")
    w.form.slo_ttft.setValue(500)
    w.form.slo_tpot.setValue(50)
    fractions = []
    w.controller.progress.connect(lambda f, _t: fractions.append(f))
    assert w.serve()
    assert not w.serve_button.isEnabled() and not w.form.isEnabled() and w.progress.isVisible()
    qtbot.waitUntil(lambda: fake.progressed.is_set() and fractions and fractions[-1] > 0, timeout=5000)
    ticks = []  # the worker now waits on ``release``; the GUI thread keeps serving its event loop
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start(10)
    qtbot.waitUntil(lambda: len(ticks) >= 5, timeout=2000)
    timer.stop()
    assert w.controller.running and w.view is None
    assert fake.calls[0]["thread"] is not threading.main_thread()
    assert w.progress.bar.value() > 0
    fake.release.set()
    _finish(qtbot, w)
    assert w.view is not None and w.serve_button.isEnabled() and not w.progress.isVisible()
    config = fake.calls[0]["config"]
    assert config.rate == 2.0 and config.slo_ttft_s == pytest.approx(0.5) and config.slo_tpot_s == pytest.approx(0.05)


def test_cancel_stops_the_serving_job(serving_window, qtbot):
    fake = FakeServing(steps=1000, step_s=0.01)
    w = serving_window(fake)
    with qtbot.waitSignal(w.controller.progress, timeout=5000):
        assert w.serve()
    job = w.controller.job
    cancelled_at = time.perf_counter()
    w.progress.cancel_button.click()
    assert not w.controller.running and w.message.text() == "Serving run cancelled."
    assert w.serve_button.isEnabled()
    qtbot.waitUntil(lambda: job.ended_at is not None, timeout=3000)
    assert time.monotonic() - job.ended_at < 5 and time.perf_counter() - cancelled_at < 1.0
    assert w.view is None  # a cancelled run leaves nothing to show
    fake.steps = 2  # and the next run starts cleanly
    assert w.serve()
    _finish(qtbot, w)
    assert w.view is not None


def test_closing_the_window_cancels_its_run(serving_window, qtbot):
    fake = FakeServing(steps=1000, step_s=0.01)
    w = serving_window(fake)
    with qtbot.waitSignal(w.controller.progress, timeout=5000):
        assert w.serve()
    job = w.controller.job
    w.close()
    assert job.cancelled.is_set()
    qtbot.waitUntil(lambda: job.ended_at is not None, timeout=3000)


def test_views_show_the_numbers_of_the_result(serving_window, qtbot):
    fake = FakeServing()
    w = serving_window(fake)
    w.form.rates.setText("1, 2, 4")
    w.form.slo_ttft.setValue(500)
    w.form.slo_tpot.setValue(50)
    assert w.serve()
    _finish(qtbot, w)
    runs = w.view.runs
    results = [r.result for r in runs]
    rates = [r.rate for r in runs]
    assert rates == [1.0, 2.0, 4.0]
    best = max(r for r, res in zip(rates, results, strict=True) if res.goodput_fraction() >= GOODPUT_TARGET)
    # latency against rate: every percentile of every run, the SLO lines, the best rate
    for (key, p), curve in w.latency.curves.items():
        expected = [res.metrics()[key][f"p{p}"] for res in results]
        assert curve.xData.tolist() == rates
        assert curve.yData == pytest.approx(expected)
    assert w.latency.slo_lines["ttft_s"].value() == pytest.approx(0.5)
    assert w.latency.slo_lines["tpot_s"].value() == pytest.approx(0.05)
    assert all(line.isVisible() and line.value() == best for line in w.latency.best_lines)
    assert w.latency.goodput_curve.yData == pytest.approx([100 * r.goodput_fraction() for r in results])
    # the per-run views start on the best rate
    shown = results[rates.index(best)]
    assert w.rate_choice.currentText() == f"{best:g} requests/s (best)"
    _check_run_views(w, shown)
    w.rate_choice.setCurrentIndex(2)  # another rate: the views follow
    _check_run_views(w, results[2])


def _check_run_views(w: ServingWindow, result) -> None:
    m = result.metrics()
    for kind, series in result.kv_series.items():
        curve = w.kv.curves[kind]
        assert curve.xData[::2].tolist() == pytest.approx([t for t, _ in series])  # every sample a corner
        assert curve.yData[::2].tolist() == pytest.approx([100 * f for _, f in series])
        assert curve.yData.max() == pytest.approx(100 * m["kv"][kind]["peak_fraction"])
    decode = [r.finish_s - r.first_token_s - r.transfer_s for r in result.records]
    bars = w.timeline.bars["decode"].opts
    assert sorted(np.asarray(bars["width"]).tolist()) == pytest.approx(sorted(d for d in decode if d > 0))
    queued = [r.scheduled_s - r.arrival_s for r in result.records]
    assert len(w.timeline.bars["queued"].opts["x0"]) == sum(q > 0 for q in queued)
    legend = [label.text for _sample, label in w.timeline.legend.items]
    assert legend == [k for k in PHASE_COLOURS if len(w.timeline.bars[k].opts["x0"])]  # only phases drawn
    rows = dict(w.table.rows())
    assert rows["TTFT p99"] == format_value(m["ttft_s"]["p99"], SECONDS)
    assert rows["TPOT p50"] == format_value(m["tpot_s"]["p50"], SECONDS)
    assert rows["E2E p90"] == format_value(m["e2e_s"]["p90"], SECONDS)
    assert rows["requests"] == f"{len(result.records)} requests"
    assert rows["throughput"] == format_value(m["throughput_requests_per_s"], REQUESTS_PER_S)
    units = (
        "s",
        "requests/s",
        "tokens/s",
        "requests",
        "iterations",
        "preemptions",
        "tokens",
        "% of pages",
        "(meets the target)",
        "(target 90.0 %)",
        "ms",
    )
    for name, value in rows.items():
        if name != "SLO":
            assert value.endswith(units), f"{name}: {value!r} has no unit"


def test_axes_carry_units(serving_window):
    w = serving_window(FakeServing())
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        assert w.latency.plots[key].getAxis("left").labelUnits == "s"
        assert w.latency.plots[key].getAxis("bottom").labelUnits == "requests/s"
    assert w.latency.plots["goodput"].getAxis("left").labelUnits == "%"
    assert w.kv.getPlotItem().getAxis("bottom").labelUnits == "s"
    assert w.kv.getPlotItem().getAxis("left").labelUnits == "%"
    assert w.timeline.getPlotItem().getAxis("bottom").labelUnits == "s"


def test_a_trace_file_is_read_on_the_worker(serving_window, qtbot, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.5,64,4\n0.0,128,8\n1.0,32,2\n", encoding="utf-8")
    fake = FakeServing()
    w = serving_window(fake)
    w.form.trace.setText(str(trace))
    assert not w.form.rates.isEnabled()
    assert w.serve()
    _finish(qtbot, w)
    requests = fake.calls[0]["config"].requests
    assert [r.arrival_s for r in requests] == [0.0, 0.5, 1.0]
    assert w.rate_choice.currentText() == "trace" and dict(w.table.rows())["arrival rate"] == "trace"


def test_a_bad_trace_file_is_a_readable_message(serving_window, qtbot, tmp_path):
    trace = tmp_path / "bad.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\nsoon,64,4\n", encoding="utf-8")
    w = serving_window(FakeServing())
    w.form.trace.setText(str(trace))
    assert w.serve()
    _finish(qtbot, w)
    assert w.message.text().startswith(f"The serving run failed: {trace}: row 2.arrival_s")
    assert "Error" not in w.message.text()


def test_a_bad_rate_is_refused_before_any_run(serving_window):
    fake = FakeServing()
    w = serving_window(fake)
    w.form.rates.setText("fast")
    assert not w.serve()
    assert w.form.error.isVisible() and w.form.error.text().startswith("Arrival rate:")
    assert not w.controller.running and not fake.calls
    w.form.rates.setText("1")
    w.form.speculative.setChecked(True)
    w.form.spec_k.setValue(8)
    w.form.token_budget.setValue(4)
    assert not w.serve()
    assert "Draft length" in w.form.error.text()


def test_real_engine_sweep_and_a_bad_split(serving_window, qtbot):
    """The real simulator end to end: a two-rate sweep on 8 × H100, then a disaggregation split the
    project's devices do not add up to, reported by name."""
    w = serving_window()
    w.form.rates.setText("2, 16")
    w.form.count.setValue(40)
    w.form.slo_ttft.setValue(1000)
    w.form.slo_tpot.setValue(50)
    assert w.serve()
    _finish(qtbot, w, timeout=120_000)
    assert w.view is not None, w.message.text()
    results = [r.result for r in w.view.runs]
    assert [len(r.records) for r in results] == [40, 40]
    ttft = [res.metrics()["ttft_s"]["p99"] for res in results]
    assert w.latency.curves[("ttft_s", 99)].yData == pytest.approx(ttft)
    meeting = [rate for rate, res in zip([2.0, 16.0], results, strict=True) if res.meets_slo()]
    assert all(line.isVisible() == bool(meeting) for line in w.latency.best_lines)
    if meeting:
        assert w.latency.best_lines[0].value() == max(meeting)
    w.form.disaggregate.setChecked(True)
    w.form.prefill_devices.setValue(3)
    w.form.decode_devices.setValue(3)
    assert w.serve()
    _finish(qtbot, w, timeout=120_000)
    text = w.message.text()
    assert text.startswith(f"The serving run failed: {H100}: disaggregate:"), text
    assert "ServingSetupError" not in text


def test_a_project_a_run_would_refuse_is_refused_by_name_and_never_served(qtbot):
    project = load_project_preset(H100)
    bad = project.model_copy(update={"mapping": project.mapping.model_copy(update={"tp": 3})})
    fake = FakeServing()
    w = ServingWindow(lambda: bad, controller=ServingController(simulate=fake.simulate, sweep=fake.sweep))
    qtbot.addWidget(w)
    assert w.serve()
    _finish(qtbot, w)
    assert w.message.text().startswith(f"The serving run failed: {bad.name}: mapping.tp: 3 does not divide heads")
    assert fake.calls == []
