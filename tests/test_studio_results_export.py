"""File ▸ Export after a real run: each file is written, then read back (PNG size, SVG as XML, CSV rows,
trace events, project JSON)."""

from __future__ import annotations

import csv
import json
import os
import xml.etree.ElementTree as ET

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PySide6.QtGui import QImage  # noqa: E402
from tilewright.engine.io import load_project  # noqa: E402
from tilewright.studio import exporting  # noqa: E402

PRESET = "presets/projects/chiplet-bert-large.json"


@pytest.fixture
def window(make_window):
    return make_window(load_project(PRESET), size=(1600, 1000), persist=False)


@pytest.fixture
def ran(window, qtbot):
    with qtbot.waitSignal(window.runner.done, timeout=30_000):
        window.run_simulation()
    assert window.runner.last_record is not None, window.runner.last_message
    return window


def test_export_menu_lists_every_format_and_waits_for_a_run(window):
    exports = window.actions_.exports
    texts = [a.text().replace("&", "") for a in exports.menu.actions() if a.text()]
    assert texts == ["Canvas image or system JSON…", "Project JSON…", "Plots as PNG…", "Plots as SVG…",
                     "Metrics and timelines as CSV…", "Chrome trace (Perfetto)…"]
    file_action = window.menuBar().actions()[0]  # held: PySide drops a menu reached through a temporary
    assert file_action.text() == "&File"
    assert exports.menu.menuAction() in file_action.menu().actions()
    assert exports.project.isEnabled()
    assert not any(a.isEnabled() for a in exports.result_actions)
    assert exports.export_trace("/nonexistent/never.json") is None  # nothing to export yet


def test_project_json_round_trips_without_touching_the_document(window, tmp_path):
    target = tmp_path / "copy"
    written = window.actions_.exports.export_project(target)
    assert written == tmp_path / "copy.json"
    again = load_project(written)
    assert again.model_dump() == window.doc.project.model_dump()
    assert window.doc.file_path is None and not window.doc.is_dirty  # a copy, not a Save As


def test_plots_as_png_have_the_export_size(ran, tmp_path):
    files = ran.actions_.exports.export_plots("png", tmp_path / "png")
    assert [f.name for f in files] == ["timeline.png", "links.png", "memory.png", "time-breakdown.png"]
    for f in files[:3]:
        image = QImage(str(f))
        assert (image.width(), image.height()) == exporting.PLOT_SIZE
        colours = {image.pixel(x, y) for x in range(0, image.width(), 23) for y in range(0, image.height(), 19)}
        assert len(colours) > 5, f"{f.name} looks blank"
    breakdown = QImage(str(files[3]))
    assert breakdown.width() == 1200 and breakdown.height() > 40
    assert ran.results.tabs.currentWidget() is ran.results.gantt  # exporting hidden tabs moved nothing


def test_plots_as_svg_parse_as_xml(ran, tmp_path):
    files = ran.actions_.exports.export_plots("svg", tmp_path / "svg")
    assert [f.suffix for f in files] == [".svg"] * 4
    for f in files:
        root = ET.parse(f).getroot()
        assert root.tag.endswith("svg")
        assert len(list(root.iter())) > 20, f"{f.name} is nearly empty"
        assert root.get("width") and root.get("height") and root.get("viewBox")  # a size renderers accept
    timeline = ET.parse(files[0]).getroot()
    texts = " ".join(t.text or "" for t in timeline.iter() if t.tag.endswith("text"))
    assert "stage 0" in texts and "time" in texts  # lane labels and the axis title survive


def _rgb(png: bytes) -> np.ndarray:
    image = QImage.fromData(png).convertToFormat(QImage.Format.Format_RGB888)
    w, h = image.width(), image.height()
    rows = np.frombuffer(image.constBits(), np.uint8, count=image.bytesPerLine() * h).reshape(h, -1)
    return rows[:, : w * 3].reshape(h, w, 3).astype(int)


def _coloured(rgb: np.ndarray) -> np.ndarray:
    """Pixels of the data (saturated colours), not of text, axes or grid (greys)."""
    return (rgb.max(axis=2) - rgb.min(axis=2)) > 60


def test_svgs_render_like_the_pngs(ran, tmp_path):
    """Rendered by a real SVG renderer (resvg), each SVG shows what its PNG shows: the data's coloured
    pixels cover the same box, the same share of the picture, in the same places (a 16 × 9 grid). The
    SVGs are written first, before any PNG export has painted the plots at the export size: that is
    when pyqtgraph's SVG exporter drew the data at the on-screen tab's scale."""
    import resvg_py

    svgs = ran.actions_.exports.export_plots("svg", tmp_path / "svg")
    pngs = ran.actions_.exports.export_plots("png", tmp_path / "png")
    for svg, png in zip(svgs, pngs, strict=True):
        want = _rgb(png.read_bytes())
        h, w = want.shape[:2]
        got = _rgb(bytes(resvg_py.svg_to_bytes(svg_path=str(svg), background="#ffffff", width=w, height=h,
                                               dpi=96)))
        assert got.shape == want.shape, svg.name
        a, b = _coloured(want), _coloured(got)
        assert a.mean() > 0.005, f"{png.name} shows no data"
        assert abs(b.mean() - a.mean()) <= 0.1 * a.mean() + 0.002, (svg.name, a.mean(), b.mean())
        for axis, size in ((1, w), (0, h)):
            span_a, span_b = np.flatnonzero(a.any(axis=1 - axis)), np.flatnonzero(b.any(axis=1 - axis))
            assert abs(span_a[0] - span_b[0]) <= 0.015 * size and abs(span_a[-1] - span_b[-1]) <= 0.015 * size, (
                svg.name, axis, (span_a[0], span_a[-1]), (span_b[0], span_b[-1]))
        cells = (9, 16) if h >= 90 else (1, 16)
        grid = [m[: h // cells[0] * cells[0], : w // cells[1] * cells[1]]
                .reshape(cells[0], h // cells[0], cells[1], w // cells[1]).mean(axis=(1, 3)) for m in (a, b)]
        assert np.abs(grid[0] - grid[1]).mean() < 0.02, svg.name


def test_csv_of_metrics_and_timelines(ran, tmp_path):
    files = ran.actions_.exports.export_csv(tmp_path / "csv")
    assert [f.name for f in files] == ["metrics.csv", "timeline.csv", "links.csv", "memory.csv"]
    metrics = {row["metric"]: row for row in csv.DictReader(files[0].open())}
    result = ran.runner.last_result
    assert float(metrics["iteration_time_s"]["value"]) == pytest.approx(result.iteration_time_s)
    assert metrics["iteration_time_s"]["unit"] == "s"
    timeline = list(csv.DictReader(files[1].open()))
    assert len(timeline) == len(result.timeline)
    assert {"lane", "category", "start_s", "duration_s"} <= set(timeline[0])


def test_chrome_trace_has_trace_events(ran, tmp_path):
    path = ran.actions_.exports.export_trace(tmp_path / "trace")
    assert path.name == "trace.json"
    doc = json.loads(path.read_text())
    complete = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(ran.runner.last_result.timeline)
    assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in doc["traceEvents"])


def test_export_failure_is_reported(ran, tmp_path):
    errors = []
    ran.show_error = lambda title, text: errors.append(text)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert ran.actions_.exports.export_csv(blocker / "sub") is None  # a folder inside a file
    assert errors and "sub" in errors[0]
