"""The Summary tab in a 1280 × 720 window (what a projector shows in a design review): the metric tables
wrap into lines instead of running 1,800 px wide, so there is no sideways scrolling; every number carries
its unit; a run that offloads to the node's host memory shows that memory in a table of its own, labelled
"host", apart from the device's peak (and a run that does not shows no such table); context parallelism's
communication appears wherever the other communication categories do."""

from __future__ import annotations

import os
import re

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtWidgets import QScrollArea  # noqa: E402
from tilewright.engine.io.presets import load_project_preset, load_system  # noqa: E402
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings  # noqa: E402
from tilewright.engine.simulate import simulate  # noqa: E402
from tilewright.studio.model.palette import category_label  # noqa: E402
from tilewright.studio.model.run_record import prepare_record  # noqa: E402
from tilewright.studio.ui.canvas import CanvasWidget  # noqa: E402, F401 - the package first (demo imports it)
from tilewright.studio.ui.results.compare import compare_rows  # noqa: E402
from tilewright.studio.ui.results.summary import (  # noqa: E402
    HOST_TITLE,
    UNKNOWN_ENERGY,
    headline,
    in_columns,
    result_tables,
)
from tilewright.studio.units import format_bytes  # noqa: E402

PRESETS = ("gpt3-dgx-a100", "mixtral-8x7b-dgx-h100", "wormhole-galaxy-llama3-70b-inference",
           "llama2-70b-h100-inference")
SMALL = GPTSpec(name="gpt", layers=4, hidden=1024, heads=16, seq_len=2048, vocab=32000)
WORDS = {"event", "analytic", "train", "infer", UNKNOWN_ENERGY, "—"}
# a number, then something that is not a number: "2.82 s", "48.6 %", "64 devices", "7,995 events", "0 J"
WITH_UNIT = re.compile(r"[−+-]?\d[\d,]*(\.\d+)? ?[^\d\s.,].*")


def _small(name: str, **mapping) -> Project:
    return Project(name=name, hardware=load_system("dgx-a100"), workload=SMALL,
                   mapping=Mapping(micro_batch=1, global_batch=16, **mapping),
                   run=RunSettings(dtype="bf16", engine="event"))


def _shown(make_window, qtbot, project, result):
    """The main window at 1280 × 720 with ``result`` delivered as the run controller does, on the Summary."""
    window = make_window(project, size=(1280, 720), persist=False)
    window.results.show_record(prepare_record(project, result, 0.1))
    window.results.show_result(result, 0.1)
    window.results.flush()
    tabs = window.results.tabs
    tabs.setCurrentIndex(next(i for i in range(tabs.count()) if tabs.tabText(i) == "Summary"))
    qtbot.wait(50)
    return window, tabs.currentWidget()


@pytest.fixture(scope="module", params=PRESETS)
def preset_run(request):
    project = load_project_preset(request.param)
    return project, simulate(project)


def test_the_summary_never_scrolls_sideways_at_1280_by_720(preset_run, make_window, qtbot):
    project, result = preset_run
    window, scroll = _shown(make_window, qtbot, project, result)
    assert isinstance(scroll, QScrollArea)
    panel = window.results
    assert len(panel.labels) > 3  # the metric tables are there, several of them
    bar = scroll.horizontalScrollBar()
    assert bar.maximum() == 0 and not bar.isVisible(), (project.name, scroll.widget().width())
    right = scroll.viewport().width()
    for label in panel.labels:  # each table whole (never cut) and inside the viewport
        assert label.width() >= label.sizeHint().width(), label.text()[:60]
        corner = label.mapTo(scroll.viewport(), label.rect().topRight())
        assert corner.x() < right, (label.text()[:60], corner.x(), right)
    tops = {label.mapTo(scroll.viewport(), label.rect().topLeft()).y() for label in panel.labels}
    assert len(tops) > 1  # they wrapped onto more than one line: the reason it fits


def test_every_number_in_the_summary_has_its_unit(preset_run):
    _project, result = preset_run
    for title, rows in result_tables(result):
        for name, value in rows:
            if value in WORDS:
                continue
            assert WITH_UNIT.fullmatch(value), (title, name, value)


def test_a_tables_later_columns_say_whose_they_are():
    rows = [(f"row {i}", f"{i} s") for i in range(8)]
    columns = in_columns([("Run", rows)], rows=6)
    assert [len(body) for _title, body in columns] == [4, 4]  # balanced, not 6 and 2
    assert columns[0][0] == "Run" and "Run" in columns[1][0] and columns[1][0] != "Run"
    assert [r for _title, body in columns for r in body] == rows  # nothing lost, nothing reordered


@pytest.fixture(scope="module")
def offload_runs():
    plain = _small("plain", dp=8)
    offload = _small("offload", dp=8, memory_levels={"activations": "host", "optimizer": "host"})
    return (plain, simulate(plain)), (offload, simulate(offload))


def _host_peak(result) -> float:
    """The fullest host-memory share at its peak, from the memory tracks themselves."""
    host = [t for t in result.memory if t.host]
    return max(max(sum(vals[i] for vals in t.by_category.values()) for i in range(len(t.times))) for t in host)


def test_host_memory_is_shown_apart_exactly_when_the_run_has_some(offload_runs, make_window, qtbot):
    (plain, plain_result), (offload, offload_result) = offload_runs
    assert not any(t.host for t in plain_result.memory) and any(t.host for t in offload_result.memory)
    for project, result, has_host in ((plain, plain_result, False), (offload, offload_result, True)):
        tables = dict(result_tables(result))
        assert (HOST_TITLE in tables) == has_host
        window, _scroll = _shown(make_window, qtbot, project, result)
        text = window.results.text()
        assert ("host peak" in text) == has_host and ("host memory" in headline(result)) == has_host
        run = dict(tables["Run"])
        assert not any("host" in name and "memory" in name for name in run)  # not mixed into the device's
        assert run["peak memory"] == format_bytes(result.peak_memory_bytes)
    host = dict(dict(result_tables(offload_result))[HOST_TITLE])
    assert all(name.startswith("host ") for name in host)  # no row reads as the device's memory
    assert host["host peak"] == format_bytes(_host_peak(offload_result))
    device = dict(dict(result_tables(offload_result))["Memory (peak device)"])
    # the offloaded layers' activations left the device for the host; the last layer's stay (plan.activation_offload)
    assert "activations" in device and "host activations" in host
    assert "host optimizer" in host


def test_the_runs_table_compares_host_memory(offload_runs):
    (_plain, plain_result), (_offload, offload_result) = offload_runs
    rows = {r.label: r for r in compare_rows(plain_result.metrics_json(), offload_result.metrics_json())}
    assert rows["host memory (offloaded)"].a == "—"
    assert rows["host memory (offloaded)"].b == format_bytes(_host_peak(offload_result))
    assert "host memory: activations" in rows and "device memory: weights" in rows


def test_context_parallel_communication_shows_with_the_others(make_window, qtbot):
    project = _small("cp", dp=4, cp=2)
    result = simulate(project)
    assert result.time_breakdown_s["cp_comm"] > 0
    ring = category_label("cp_comm")
    times = dict(dict(result_tables(result))["Time per iteration"])
    assert ring in times and times[ring].endswith("s")
    window, _scroll = _shown(make_window, qtbot, project, result)
    assert ring in window.results.text()
    assert any(name == "cp_comm" for name, _s, _colour in window.results.breakdown.segments)
    rows = {r.label for r in compare_rows(result.metrics_json(), result.metrics_json())}
    assert f"time: {ring}" in rows and "time: dp comm" in rows


def test_a_long_check_message_does_not_widen_the_window(preset_run, make_window, qtbot):
    """A project check's warning can run to 300 characters; the status bar once widened a 1280 × 720 window
    to 2,111 px with one, pushing the results dock off the projector."""
    project, result = preset_run
    window, scroll = _shown(make_window, qtbot, project, result)
    window.status.validation.setText("⚠ " + "a check's long explanation, " * 20)
    qtbot.wait(50)
    assert window.width() == 1280
    assert scroll.horizontalScrollBar().maximum() == 0
