"""What an architect sees of a grid-chip run (Wormhole n150) in a 1280 × 720 window: the scrubber next to
the op chooser stays usable, a chosen op's caption stays inside its level's frame, the summary's
metric columns are never cut (the long per-op splits get a block of their own), energy the hardware
IR cannot price reads "not known" rather than 0 J, and the time cursor's label is inside its plot.
Each of these was broken once in exactly this window."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import QRectF  # noqa: E402
from tilewright.engine.io.presets import load_project_preset  # noqa: E402
from tilewright.engine.simulate import simulate  # noqa: E402
from tilewright.studio.model.run_record import prepare_record  # noqa: E402
from tilewright.studio.ui.canvas import CanvasWidget  # noqa: E402, F401 - the package first (demo imports it)
from tilewright.studio.ui.demo import SLIDER_MIN_PX  # noqa: E402
from tilewright.studio.ui.results.summary import (  # noqa: E402
    UNKNOWN_ENERGY,
    energy_known,
    format_metric,
    result_tables,
    split_rows,
)

N150 = "wormhole-n150-llama2-7b-inference"  # one Wormhole chip, 8 × 8 cores, no energy figures in its IR


@pytest.fixture(scope="module")
def n150_run():
    project = load_project_preset(N150)
    return project, simulate(project)


@pytest.fixture
def shown(make_window, qtbot, n150_run):
    """The main window at 1280 × 720 after the n150 run arrived, as the run controller delivers it."""
    project, result = n150_run
    window = make_window(project, size=(1280, 720), persist=False)
    window.results.show_record(prepare_record(project, result, 0.1))
    window.results.show_result(result, 0.1)
    window.results.flush()
    window.canvas.show_result(result)
    qtbot.wait(20)
    return window, result


def _choose(window, qtbot, text: str) -> None:
    box = window.canvas.demo.op_box
    box.setCurrentIndex(next(i for i in range(box.count()) if text in box.itemText(i)))
    qtbot.wait(20)


def test_the_scrubber_keeps_its_room_next_to_the_op_chooser(shown, qtbot):
    window, _result = shown
    demo = window.canvas.demo
    assert demo.op_box.isVisible() and demo.op_box.count() > 1  # a grid chip: the chooser is shown
    _choose(window, qtbot, "prefill · 32 × mlp_up")
    assert demo.slider.isVisible() and demo.slider.width() >= SLIDER_MIN_PX  # it was 15 px: a bare handle
    assert demo.time_label.width() >= demo.time_label.sizeHint().width()  # "t = 0 s of 4.87 s", whole
    chosen = demo.op_box.currentText()
    assert demo.op_box.toolTip() == chosen and "mlp_up" in chosen  # the cut text is whole in the tooltip


def test_a_chosen_ops_caption_stays_inside_the_frame(shown, qtbot):
    window, _result = shown
    _choose(window, qtbot, "prefill · 32 × mlp_up")
    scene, view = window.canvas.scene, window.canvas.view
    (chip,) = [g for g in scene.grids.values() if g.cores is not None]
    assert any(line.startswith("DRAM per op") for line in chip.label.lines)  # the op's lines were added
    # the label ignores the view's zoom: its scene extent is its pixel size over the zoom
    label = QRectF(chip.label.scenePos(), chip.label.boundingRect().size() / view.zoom)
    frame = scene.frame.mapRectToScene(scene.frame.boundingRect())
    assert frame.contains(label), (frame, label)
    _choose(window, qtbot, "none")
    assert not any(line.startswith("DRAM per op") for line in chip.label.lines)


def test_summary_columns_are_whole_and_splits_have_their_own_block(shown, qtbot):
    window, result = shown
    panel = window.results
    panel.tabs.setCurrentIndex(next(i for i in range(panel.tabs.count()) if panel.tabs.tabText(i) == "Summary"))
    qtbot.wait(20)
    assert len(panel.labels) > 1
    for label in panel.labels:  # one label per metric column, laid out side by side
        assert label.width() >= label.sizeHint().width(), label.text()[:60]
    rows = split_rows(result)
    assert len(rows) == len(result.spatial_splits) > 0
    assert panel.splits.isVisibleTo(panel)
    for where, split in rows:
        assert where in panel.splits.text() and split in panel.splits.text()
    assert all("Split" not in title for title, _rows in result_tables(result))  # not squeezed into a column
    assert "mlp_up" in panel.text()  # exports and copies of the summary still carry the splits


def test_energy_the_hardware_cannot_price_is_not_known(n150_run):
    _project, result = n150_run
    m = result.metrics_json()
    assert m["energy_breakdown_j"] and not any(m["energy_breakdown_j"].values())  # no pJ figures in its IR
    assert not energy_known(m)
    tables = dict(result_tables(result))
    run = dict(tables["Run"])
    energy_rows = {k: v for k, v in run.items() if k.startswith(("energy", "average power"))}
    assert {"average power", "energy per output token"} <= set(energy_rows)  # an inference run's names
    assert any(k.startswith("energy (batch of") or k == "energy" for k in energy_rows)
    assert set(energy_rows.values()) == {UNKNOWN_ENERGY}
    assert not any(title.startswith("Energy per") for title in tables)  # no table of zeros


def test_every_run_metric_carries_its_unit(n150_run):
    _project, result = n150_run
    run = dict(dict(result_tables(result))["Run"])
    m = result.metrics_json()
    assert run["devices"] == "1 device"  # not "1 devices"
    assert run["output tokens/s per user"] == format_metric("tokens_per_s", m["tokens_per_s_per_user"])
    assert run["output tokens/s per user"].endswith("tokens/s")
    assert run["output tokens/s per device"].endswith("tokens/s")


def test_the_time_cursor_label_is_inside_its_plot(shown, qtbot):
    window, _result = shown
    panel = window.results
    assert not panel.links.curves_part.isVisibleTo(panel.links)  # one chip: no link curves, no empty plot
    assert "no link data: one device has no links to other devices" in panel.links.heading.text()
    for view in (panel.gantt, panel.memory):
        panel.tabs.setCurrentWidget(view)
        qtbot.wait(20)
        line = view.cursor_line.line
        label, box = line.label.sceneBoundingRect(), line.getViewBox().sceneBoundingRect()
        assert label.height() > 0 and box.contains(label), (type(view).__name__, box, label)  # "0 s" was cut in half


def test_port_spread_says_when_no_port_carried_a_byte():
    """Ports that carried nothing (a host memory nothing offloads to, say) are "no bytes recorded", not
    "0 B … 0 B each, some ports unused"."""
    from tilewright.studio.model.traffic_rows import port_spread

    idle = [{"port": f"chip[{i}]/hbm", "interleave": "local", "read_bytes": 0.0, "write_bytes": 0.0} for i in range(3)]
    assert port_spread(idle) == "3 DRAM ports (local): the run recorded no bytes through any of them"
    busy = [dict(idle[0], read_bytes=2e6), dict(idle[1], write_bytes=1e6), idle[2]]
    assert port_spread(busy).endswith("each, some ports unused")
    both = [dict(idle[0], read_bytes=2e6), dict(idle[1], write_bytes=1e6)]
    assert port_spread(both).endswith("busiest 2× the least busy")


def test_one_device_is_singular_in_the_workload_panel(shown):
    """The mapping's device count under the degrees: "1 of 1 device", never "1 devices"."""
    window, _result = shown
    assert window.workload.devices_label.text() == "tp·pp·dp = 1 of 1 device"
