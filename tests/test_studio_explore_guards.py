"""Explore tabs say what they work on and refuse what cannot work: the sweep names its base project and
which power it plots; the parallelism search is off on inference projects, with the reason, and studio
messages carry no "command line:" prefix (nothing in the studio came from one)."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.errors import InputError, Problem
from tilewright.engine.io import load_project
from tilewright.engine.io.presets import preset_path
from tilewright.studio.document import ProjectDocument
from tilewright.studio.ui.explore import ExplorePanel
from tilewright.studio.workers import readable


def _panel(qtbot, preset: str) -> tuple[ProjectDocument, ExplorePanel]:
    doc = ProjectDocument(load_project(preset_path("projects", preset)))
    widget = ExplorePanel(doc)
    qtbot.addWidget(widget)
    return doc, widget


def test_search_is_off_for_inference_projects_with_the_reason(qtbot):
    _doc, widget = _panel(qtbot, "wormhole-n150-llama2-7b-inference")
    button = widget.search.bar.run_button
    assert not button.isEnabled()
    assert "training mappings" in button.toolTip() and "'infer'" in button.toolTip()
    assert "training mappings" in widget.search.bar.status.text()


def test_search_is_on_for_training_and_follows_a_replaced_project(qtbot):
    doc, widget = _panel(qtbot, "megatron-18b-dgx-a100")
    button = widget.search.bar.run_button
    assert button.isEnabled() and "training" in button.toolTip()
    doc.replace(load_project(preset_path("projects", "wormhole-n150-llama2-7b-inference")))
    assert not button.isEnabled()
    doc.replace(load_project(preset_path("projects", "megatron-18b-dgx-a100")))
    assert button.isEnabled() and widget.search.bar.status.text() == ""


def test_search_refusal_reads_without_a_command_line_prefix(qtbot):
    """The engine's search names its source "command line" (shared with the CLI); the studio drops it."""
    from tilewright.engine.search.parallel.search import search

    project = load_project(preset_path("projects", "wormhole-n150-llama2-7b-inference"))
    with pytest.raises(InputError) as caught:
        search(project, project.mapping.devices, project.mapping.global_batch, top=1)
    message = readable(caught.value)
    assert "command line" not in message and "run.mode" in message
    # other sources (a file) keep their name: it tells the user where to look
    assert readable(InputError("spec.json", Problem("base", "missing"))).startswith("spec.json: ")


def test_sweep_names_its_base_project_and_says_it_is_not_the_open_one(qtbot, tmp_path):
    _doc, widget = _panel(qtbot, "gpt3-dgx-a100")
    tab = widget.sweep
    text = tab.base_label.text()
    spec = json.loads(open(tab.spec_path.text()).read())
    assert f"<b>{spec['base']}</b>" in text and "not the open project, gpt3-dgx-a100" in text
    own = tmp_path / "own.json"
    own.write_text(json.dumps({"base": "gpt3-dgx-a100", "method": "grid",
                               "parameters": [{"path": "mapping.dp", "values": [8]}]}))
    tab.spec_path.setText(str(own))
    assert "<b>gpt3-dgx-a100</b>" in tab.base_label.text() and "not the open" not in tab.base_label.text()
    tab.spec_path.setText(str(tmp_path / "missing.json"))
    assert "does not load" in tab.base_label.text()


def _row(rated: float, simulated: float | None, samples: float) -> dict[str, str]:
    row = {"key": str(rated), "status": "ok", "power_w": str(rated), "samples_per_s": str(samples)}
    if simulated is not None:
        row["average_power_w"] = str(simulated)
    return row


def test_sweep_power_axes_say_rated_or_simulated_and_scale_to_kw(qtbot):
    _doc, widget = _panel(qtbot, "megatron-18b-dgx-a100")
    tab = widget.sweep
    tab.rows = [_row(26_000.0, 8_330.0, 18.4), _row(416_000.0, 120_000.0, 200.0)]
    tab.axis.setCurrentText("rated power")
    axis = tab.plot.getPlotItem().getAxis("bottom")
    assert axis.labelText == "rated power (kW)"
    assert sorted(p["x"] for p in tab.points) == [26.0, 416.0]
    tab.axis.setCurrentText("simulated power")
    assert axis.labelText == "simulated power (kW)"
    assert sorted(p["x"] for p in tab.points) == [8.33, 120.0]
    # rows written before the sweep recorded simulated power: said, not plotted as zeros
    tab.rows = [_row(900.0, None, 1.0), _row(700.0, None, 2.0)]
    tab.replot()
    assert tab.points == [] and "no simulated power" in tab.bar.status.text()
    tab.axis.setCurrentText("rated power")
    assert axis.labelText == "rated power (W)" and sorted(p["x"] for p in tab.points) == [700.0, 900.0]


def test_search_figures_are_on_screen_in_a_1280_px_dock(qtbot):
    """At 1280 × 720 the table showed about nine columns and "memory (GiB)", the last, was off screen."""
    _doc, widget = _panel(qtbot, "megatron-18b-dgx-a100")
    widget.resize(1280, 320)
    widget.show()
    qtbot.waitExposed(widget)
    tab = widget.search
    widget.setCurrentWidget(tab)
    tab.devices.setValue(64)
    tab.batch.setValue(128)
    tab.resimulate.setChecked(False)
    with qtbot.waitSignal(tab.runner.finished, timeout=120_000):
        tab.start()
    table, header = tab.table, tab.table.horizontalHeader()
    names = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    room = table.viewport().width()
    for name in ("iteration (s)", "samples/s", "memory (GiB)"):
        col = names.index(name)
        assert 0 <= header.sectionViewportPosition(col) and header.sectionViewportPosition(col) + header.sectionSize(
            col) <= room, (name, room)
    best = tab.result.ranked[0]
    assert table.item(0, names.index("memory (GiB)")).text() == f"{best.peak_memory_bytes / 2**30:.1f}"
    assert table.item(0, names.index("tp")).text() == str(best.candidate.tp)
