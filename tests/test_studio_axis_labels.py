"""Labels that were cut at 1280 × 720: plot axis titles (they shorten to their unit when the axis is too
short, and return in full when it grows), the memory plot's capacity line label (on the roomier side of
the line, inside the plot), the Pareto axes (no SI prefix on GiB: "mGiB"), y tick labels that overlapped
on a short plot, the memory device chooser (its share of capacity cut), and the hierarchy outline (names
whole, Kind given up first when the dock is narrow, then long names elided so the counts stay whole)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pyqtgraph as pg  # noqa: E402
import pytest  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QFontMetricsF  # noqa: E402
from tilewright.engine.io.presets import load_project_preset  # noqa: E402
from tilewright.studio.ui.explore.pareto_plot import ParetoPlot  # noqa: E402
from tilewright.studio.ui.results.plot_style import PLOT_MIN_PX  # noqa: E402

from tests.result_panels import filled_panel  # noqa: E402


def label_fits(plot: pg.PlotItem, side: str) -> bool:
    """The axis title, as drawn in the label's font, is no longer than the axis."""
    axis = plot.getAxis(side)
    length = QFontMetricsF(axis.label.font()).horizontalAdvance(axis.labelText)
    box = plot.getViewBox().sceneBoundingRect()
    return length <= (box.height() if side in ("left", "right") else box.width())


@pytest.fixture
def panel(qtbot):
    p = filled_panel(qtbot)
    yield p
    p.release()


@pytest.mark.parametrize(("view", "full", "short"), [("links", "utilisation (%)", "%"),
                                                     ("memory", "occupancy (GiB)", "GiB")])
def test_a_y_title_shortens_on_a_short_plot_and_comes_back(panel, qtbot, view, full, short):
    widget = getattr(panel, view)
    panel.tabs.setCurrentWidget(widget)
    plot = widget.plot
    panel.resize(1400, 900)
    qtbot.waitUntil(lambda: plot.getAxis("left").labelText == full)
    assert label_fits(plot, "left")
    widget.plot_widget.setFixedHeight(PLOT_MIN_PX)  # the plots' floor: a ~60 px y axis
    qtbot.waitUntil(lambda: plot.getAxis("left").labelText != full)
    assert label_fits(plot, "left") and plot.getAxis("left").labelText.endswith(short)
    widget.plot_widget.setMinimumHeight(PLOT_MIN_PX)
    widget.plot_widget.setMaximumHeight(16_777_215)
    qtbot.waitUntil(lambda: plot.getAxis("left").labelText == full)


@pytest.mark.parametrize("device", [0, 1])  # fullest first: 22 of 16 GiB (overflow), 70 of 80 GiB (line on top)
def test_the_capacity_label_is_inside_the_memory_plot(panel, qtbot, device):
    memory = panel.memory
    panel.tabs.setCurrentWidget(memory)
    panel.resize(1280, 430)
    memory.device.setCurrentIndex(device)
    qtbot.wait(20)
    (line,) = [item for item in memory.items if isinstance(item, pg.InfiniteLine)]
    assert line.label.toPlainText().startswith("capacity ")
    box = memory.plot.getViewBox().sceneBoundingRect()
    label = line.label.sceneBoundingRect()
    assert label.height() > 0 and box.contains(label), (box, label)


def test_pareto_axes_carry_their_unit_unprefixed_and_fit(qtbot):
    plot = ParetoPlot()
    qtbot.addWidget(plot)
    plot.resize(700, 400)
    plot.show()
    qtbot.waitExposed(plot)
    plot.show_points([0.51, 0.56, 0.66], [16.1, 15.7, 15.3], [0], ("peak memory", "GiB"), ("throughput", "samples/s"))
    item = plot.getPlotItem()
    assert item.getAxis("bottom").labelText == "peak memory (GiB)" and item.getAxis("bottom").labelUnits == ""
    assert "mGiB" not in item.getAxis("bottom").labelString()  # pyqtgraph's prefix made half a GiB "510 mGiB"
    assert item.getAxis("left").labelText == "throughput (samples/s)"
    plot.resize(700, PLOT_MIN_PX)
    qtbot.waitUntil(lambda: item.getAxis("left").labelText == "samples/s")
    assert label_fits(item, "left")


N150 = "wormhole-n150-llama2-7b-inference"  # a grid chip: after a run the canvas widens for its op chooser


def test_the_outline_keeps_names_whole_in_a_small_window(make_window, qtbot):
    from tilewright.engine.simulate import simulate

    project = load_project_preset(N150)
    window = make_window(project, size=(1280, 720), persist=False)
    window.canvas.show_result(simulate(project))
    qtbot.wait(50)
    outline, header = window.outline, window.outline.header()
    visible = [c for c in range(outline.columnCount()) if not outline.isColumnHidden(c)]
    assert {0, 2, 3} <= set(visible)  # names, instances and devices; Kind may give way
    assert header.sectionSize(0) >= outline.sizeHintForColumn(0)  # it was 57 px: icons and no names
    assert all(header.sectionSize(c) >= header.sectionSizeHint(c) for c in visible)  # titles whole
    assert sum(header.sectionSize(c) for c in visible) <= outline.viewport().width()  # nothing scrolled off
    assert not window.inspector.scroll.horizontalScrollBar().isVisible()  # not at the inspector's expense


def test_the_outline_shows_kind_when_there_is_room(make_window, qtbot):
    window = make_window(load_project_preset(N150), size=(1600, 1000), persist=False)
    outline = window.outline
    window.resizeDocks([window.docks["outline"]], [300], Qt.Orientation.Horizontal)
    qtbot.waitUntil(lambda: outline.isColumnHidden(1))  # "wormhole-n150" and the counts take it all
    window.resizeDocks([window.docks["outline"]], [420], Qt.Orientation.Horizontal)
    qtbot.waitUntil(lambda: not outline.isColumnHidden(1))
    header = outline.header()
    assert outline.items["wormhole-n150"].text(1) == "system"
    assert sum(header.sectionSize(c) for c in range(4)) == outline.viewport().width()  # names take the rest


def test_a_long_name_is_elided_so_the_counts_stay_whole(make_window, qtbot):
    """ "cerebras-wse2-waferllm" needs more than the outline's widest dock: the counts used to scroll off
    (the Devices column half cut, under a horizontal scroll bar); now the name ends in "…" and its tooltip
    keeps it whole."""
    window = make_window(load_project_preset("cerebras-wse2-llama2-7b-inference"), size=(1280, 720), persist=False)
    qtbot.wait(50)
    outline, header = window.outline, window.outline.header()
    visible = [c for c in range(outline.columnCount()) if not outline.isColumnHidden(c)]
    assert {0, 2, 3} <= set(visible)
    assert all(header.sectionSize(c) >= header.sectionSizeHint(c) for c in visible if c != 0)  # counts whole
    assert all(header.sectionSize(c) >= outline.sizeHintForColumn(c) for c in visible if c != 0)
    assert sum(header.sectionSize(c) for c in visible) <= outline.viewport().width()  # nothing off the panel
    assert not outline.horizontalScrollBar().isVisible()
    assert header.sectionSize(0) < outline.sizeHintForColumn(0)  # this name does not fit whole: it is cut ...
    assert outline.textElideMode() != Qt.TextElideMode.ElideNone  # ... with "…"
    for path, item in outline.items.items():
        assert item.toolTip(0).startswith(path.rpartition("/")[2] + " · ")  # the full name in its tooltip


def test_the_memory_device_chooser_shows_each_entry_whole(panel, qtbot):
    """Each entry ends in its share of capacity: at a fixed 30 characters the chooser showed
    "node[0]/gpu[0] · peak 59.9 GiB (74.9 % of c"."""
    from PySide6.QtWidgets import QStyle, QStyleOptionComboBox

    memory = panel.memory
    panel.tabs.setCurrentWidget(memory)
    panel.resize(1280, 430)
    chooser = memory.device
    assert chooser.count() > 1
    metrics = chooser.fontMetrics()
    for i in range(chooser.count()):
        chooser.setCurrentIndex(i)
        qtbot.wait(5)
        text = chooser.currentText()
        assert text.endswith("capacity)")  # the unit of the share is part of what must show
        option = QStyleOptionComboBox()
        chooser.initStyleOption(option)
        field = chooser.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, option,
                                               QStyle.SubControl.SC_ComboBoxEditField, chooser)
        assert metrics.horizontalAdvance(text) <= field.width(), (text, field.width())
        device = memory.tracks[i].device
        assert chooser.itemData(i, Qt.ItemDataRole.ToolTipRole).startswith(device)  # the whole node id


@pytest.mark.parametrize("view", ["links", "memory"])
def test_y_tick_labels_never_overlap_on_a_short_plot(panel, qtbot, view):
    """pyqtgraph labels at least three major ticks however short the axis: on the links plot at its minimum
    height "80 60 40 20" were drawn over one another. Labelled ticks are now a label's height apart or more,
    and a tall plot keeps pyqtgraph's own (denser) spacing."""
    widget = getattr(panel, view)
    panel.tabs.setCurrentWidget(widget)
    plot = widget.plot
    axis = plot.getAxis("left")
    line = QFontMetricsF(axis.style.get("tickFont") or axis.font()).height()

    def label_gap() -> float:
        box = plot.getViewBox()
        low, high = box.viewRange()[1]
        height = box.sceneBoundingRect().height()
        major = axis.tickValues(low, high, height)[0]
        assert len(major[1]) >= 1  # the axis still says where it is
        return major[0] * height / (high - low)  # pixels between two labelled ticks

    widget.plot_widget.setFixedHeight(PLOT_MIN_PX)
    qtbot.wait(30)
    assert label_gap() >= line
    widget.plot_widget.setMinimumHeight(PLOT_MIN_PX)
    widget.plot_widget.setMaximumHeight(16_777_215)
    panel.resize(1400, 900)
    qtbot.wait(30)
    box = plot.getViewBox()
    low, high = box.viewRange()[1]
    assert axis.tickSpacing(low, high, box.sceneBoundingRect().height()) is not None
    assert pg.AxisItem.tickSpacing(pg.AxisItem("left"), low, high, box.sceneBoundingRect().height()) == \
        axis.tickSpacing(low, high, box.sceneBoundingRect().height())  # pyqtgraph's own spacing when tall
