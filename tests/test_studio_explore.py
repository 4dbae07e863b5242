"""The Explore panel: search, sweep and HyPar run off the GUI thread, show results with units and a
Pareto front, and change the project only through undoable commands."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.io import load_project
from tilewright.engine.io.presets import preset_path
from tilewright.studio.document import ProjectDocument
from tilewright.studio.ui.explore import ExplorePanel


@pytest.fixture
def panel(qtbot):
    doc = ProjectDocument(load_project(preset_path("projects", "megatron-18b-dgx-a100")))
    widget = ExplorePanel(doc)
    qtbot.addWidget(widget)
    return doc, widget


def test_search_ranks_mappings_and_adopting_one_is_undoable(qtbot, panel):
    doc, widget = panel
    tab = widget.search
    tab.devices.setValue(64)
    tab.batch.setValue(128)
    tab.resimulate.setChecked(False)
    with qtbot.waitSignal(tab.runner.finished, timeout=60_000):
        tab.start()
    assert tab.table.rowCount() > 0
    header = [tab.table.horizontalHeaderItem(c).text() for c in range(tab.table.columnCount())]
    assert "iteration (s)" in header and "memory (GiB)" in header
    before = doc.project.mapping
    tab.table.selectRow(0)
    tab.adopt_selected()
    best = tab.result.ranked[0].candidate
    assert (doc.project.mapping.tp, doc.project.mapping.pp, doc.project.mapping.dp) == (best.tp, best.pp, best.dp)
    doc.undo_stack.undo()
    assert doc.project.mapping == before


def test_search_cancel_stops_the_worker(qtbot, panel):
    _doc, widget = panel
    tab = widget.search
    tab.devices.setValue(4096)
    tab.batch.setValue(4096)
    with qtbot.waitSignal(tab.runner.progress, timeout=30_000, check_params_cb=lambda f, _text: f >= 0.01):
        tab.start()
    assert not tab.bar.bar.isHidden() and tab.bar.bar.value() > 0  # a real fraction, not a busy bar
    with qtbot.waitSignal(tab.runner.stopped, timeout=10_000):  # the search polled the flag and stopped
        tab.bar.cancel_button.click()
    assert not tab.runner.running and tab.result is None
    assert tab.bar.status.text() == "cancelled" and tab.bar.bar.isHidden()


def test_sweep_plots_a_front_and_opens_a_design(qtbot, panel, tmp_path):
    doc, widget = panel
    tab = widget.sweep
    spec = {
        "base": "chiplet-bert-large",
        "method": "grid",
        "set": {"run.engine": "analytic"},
        "parameters": [{"path": "mapping.micro_batch", "values": [1, 2, 4]}],
        "objectives": [{"metric": "iteration_time_s", "sense": "min"}],
    }
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    tab.spec_path.setText(str(spec_file))
    tab.out_path.setText(str(tmp_path / "out.csv"))
    tab.axis.setCurrentText("memory")
    with qtbot.waitSignal(tab.runner.finished, timeout=120_000):
        tab.start()
    assert len(tab.points) == 3
    xs, _ = tab.plot.scatter.getData()
    assert len(xs) == 3
    assert tab.plot.getPlotItem().getAxis("bottom").labelText == "peak memory (GiB)"  # no SI prefix: "mGiB" was shown
    target = next(i for i, p in enumerate(tab.points) if p["row"]["mapping.micro_batch"] == "4")
    tab.open_point(target)
    assert doc.project.hardware.name == "chiplet-mesh" and doc.project.mapping.micro_batch == 4
    doc.undo_stack.undo()
    assert doc.project.hardware.name == "dgx-a100"


def test_hypar_shows_choices_and_applies_them(qtbot):
    doc = ProjectDocument(load_project(preset_path("projects", "hypar-vgg-a")))
    widget = ExplorePanel(doc)
    qtbot.addWidget(widget)
    tab = widget.hypar
    tab.accelerators.setCurrentText("16")
    tab.batch.setValue(128)
    tab.dtype.setCurrentText("fp32")
    tab.run()
    assert "all data-parallel 15.944 GB" in tab.summary.text()
    assert tab.table.rowCount() == 11 and tab.table.columnCount() == 5  # 11 weighted layers, 4 levels
    tab.apply_partition()
    choices = {lp.parallelism for lp in doc.project.mapping.layer_parallelism}
    assert choices == {"dp", "mp"}  # convolutions data-parallel, fully connected model-parallel
    doc.undo_stack.undo()
    assert doc.project.mapping.layer_parallelism == []
