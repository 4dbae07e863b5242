"""The serving window in a 1280 × 720 window after a real sweep on a Wormhole n150: the SLO and target
labels sit whole inside their plots (they were cut in half at the plot's edge: "LO 100 ms",
"target 90.0 9") and the KV plot's legend no longer pushes the plot's right part out of view."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.io.presets import load_project_preset  # noqa: E402
from tilewright.studio.ui.serving import ServingWindow  # noqa: E402

N150 = "wormhole-n150-llama2-7b-inference"


@pytest.fixture
def served(qtbot):
    project = load_project_preset(N150)
    w = ServingWindow(lambda: project)
    qtbot.addWidget(w)
    w.resize(1280, 720)
    w.show()
    qtbot.waitExposed(w)
    w.form.rates.setText("1, 4")
    w.form.count.setValue(30)
    w.form.slo_ttft.setValue(1000)  # ms
    w.form.slo_tpot.setValue(100)  # ms
    assert w.serve()
    qtbot.waitUntil(lambda: not w.controller.running, timeout=120_000)
    assert w.view is not None, w.message.text()
    qtbot.wait(50)
    return w


def test_slo_and_target_labels_are_inside_their_plots(served):
    w = served
    lines = [(name, line) for name, line in w.latency.slo_lines.items()]
    lines.append(("goodput", w.latency.target_line))
    for name, line in lines:
        assert line.isVisible(), name
        label = line.label.sceneBoundingRect()
        box = w.latency.plots[name].vb.sceneBoundingRect()
        assert label.width() > 0 and box.contains(label), (name, box, label)
    assert w.latency.target_line.label.toPlainText().startswith("target ")
    assert w.latency.slo_lines["tpot_s"].label.toPlainText() == "SLO 100 ms"


def test_the_kv_plot_fits_its_widget(served):
    w = served
    item = w.kv.getPlotItem()
    assert item.sceneBoundingRect().width() <= w.kv.viewport().width() + 1  # nothing drawn past the edge
    (entry,) = [label.text for _sample, label in w.kv.legend.items]
    assert "peak" in entry and "pages ×" in entry and "tokens" in entry  # the legend still says it all
