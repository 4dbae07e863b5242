"""The serving window at 1280 × 720 after the audit's sweep (H100, 1–8 requests/s): the SLO and target labels
cover no data point ("SLO 1 s" sat on the first rate's TTFT points, "target 90.0 %" on the goodput curve),
counts carry thousands separators ("104602 pages") and the trace field shows its whole placeholder."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PySide6.QtCore import QPointF  # noqa: E402
from tilewright.engine.io.presets import load_project_preset  # noqa: E402
from tilewright.studio.ui.serving import ServingWindow  # noqa: E402

H100 = "llama2-70b-h100-inference"
SYMBOL_PX = 3.0  # half a data point's symbol


@pytest.fixture(scope="module")
def served(qapp):
    project = load_project_preset(H100)
    w = ServingWindow(lambda: project)
    w.resize(1280, 720)
    w.show()
    w.form.rates.setText("1, 2, 4, 8")
    w.form.count.setValue(100)
    w.form.slo_ttft.setValue(1000)  # ms
    w.form.slo_tpot.setValue(50)  # ms
    assert w.serve()
    from pytestqt.qtbot import QtBot

    QtBot(None).waitUntil(lambda: not w.controller.running, timeout=120_000)
    assert w.view is not None, w.message.text()
    for _ in range(5):
        qapp.processEvents()
    yield w
    w.close()
    w.deleteLater()


def _points(w, name):
    """Scene positions of every data point drawn in plot ``name``."""
    plot = w.latency.plots[name]
    curves = [w.latency.goodput_curve] if name == "goodput" else [
        c for (n, _p), c in w.latency.curves.items() if n == name]
    out = []
    for curve in curves:
        xs, ys = curve.getData()
        for x, y in zip(xs if xs is not None else [], ys if ys is not None else [], strict=True):
            if np.isfinite(x) and np.isfinite(y):
                out.append(plot.vb.mapViewToScene(QPointF(float(x), float(y))))
    return out


@pytest.mark.parametrize("name", ["ttft_s", "tpot_s", "goodput"])
def test_line_labels_cover_no_data_point(served, name):
    w = served
    line = w.latency.target_line if name == "goodput" else w.latency.slo_lines[name]
    assert line.isVisible()
    label = line.label.sceneBoundingRect().adjusted(-SYMBOL_PX, -SYMBOL_PX, SYMBOL_PX, SYMBOL_PX)
    points = _points(w, name)
    assert points  # the case at hand: the plot has points to cover
    covered = [p for p in points if label.contains(p)]
    assert covered == [], (name, line.label.toPlainText(), label, covered)
    assert w.latency.plots[name].vb.sceneBoundingRect().contains(line.label.sceneBoundingRect())  # and whole


def test_line_labels_stay_clear_of_the_best_label(served):
    w = served
    for name, line in [*w.latency.slo_lines.items(), ("goodput", w.latency.target_line)]:
        best = w.latency.best_lines[list(w.latency.plots).index(name)]
        if best.isVisible():
            assert not line.label.sceneBoundingRect().intersects(best.label.sceneBoundingRect()), name


def test_page_counts_have_thousands_separators(served):
    w = served
    (entry,) = [label.text for _sample, label in w.kv.legend.items]
    rows = dict(w.table.rows())
    (kv_row,) = [v for k, v in rows.items() if k.startswith("KV cache")]
    pages = int(kv_row.split(" pages")[0].replace(",", ""))
    assert pages >= 1000  # the case at hand
    assert f"{pages:,} pages" in entry and kv_row.startswith(f"{pages:,} pages")


def test_the_trace_placeholder_is_shown_whole(served):
    field = served.form.trace
    text = field.placeholderText()
    assert field.fontMetrics().horizontalAdvance(text) <= field.contentsRect().width() - 8
    assert "Poisson" in field.toolTip()
