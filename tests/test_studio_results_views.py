"""The result views as a user meets them: Gantt (zoom, hover, colour toggle, a million slices), links,
memory with overflow, one time cursor shared by every plot, the summary bar, and comparing two runs."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PySide6.QtGui import QColor, QImage  # noqa: E402
from tilewright.engine.results import CATEGORIES  # noqa: E402
from tilewright.studio.model.gantt_data import GanttData  # noqa: E402
from tilewright.studio.model.palette import CATEGORY_COLOURS  # noqa: E402
from tilewright.studio.model.run_record import prepare_record  # noqa: E402
from tilewright.studio.samples import dgx_project  # noqa: E402
from tilewright.studio.ui.results.gantt import GanttView  # noqa: E402
from tilewright.studio.ui.results.synthetic import synthetic_timeline, tiny_result  # noqa: E402
from tilewright.studio.ui.results.time_cursor import TimeCursor  # noqa: E402
from tilewright.studio.ui.results_panel import ResultsPanel  # noqa: E402

COMPUTE = CATEGORIES.index("compute")


@pytest.fixture
def panel(qtbot):
    p = ResultsPanel()
    qtbot.addWidget(p)
    p.resize(1400, 430)
    p.show()
    qtbot.waitExposed(p)
    yield p
    p.release()


@pytest.fixture
def shown(panel, qtbot):
    """The panel after a run of ``tiny_result``, every view filled."""
    record = prepare_record(dgx_project(), tiny_result(), 0.5)
    panel.show_result(record.result, 0.5)
    panel.show_record(record)
    panel.flush()
    return panel


def colour_pixels(image: QImage, colour: str, step: int = 3) -> int:
    target = QColor(colour).rgb()
    return sum(image.pixel(x, y) == target for x in range(0, image.width(), step)
               for y in range(0, image.height(), step))


def test_views_show_a_run(shown):
    assert shown.tabs.currentWidget() is shown.gantt  # the first result opens on the timeline
    assert [r.text for r in shown.gantt.data.rows][1] == "stage 0 · 2 devices"
    assert shown.gantt.bar_count() == 5
    assert shown.links.model.index(0).data().split()[:2] == ["45.0", "%"]  # busiest first
    assert shown.links.selected() == [0, 1]  # the busiest (up to four) are plotted on opening
    assert shown.memory.device.currentText() == "node[1]/gpu[0] · peak 22 GiB (137.5 % of capacity)"
    assert "does not fit" in shown.memory.heading.text()
    assert "needs 22 GiB, has 16 GiB (6 GiB too much)" in "".join(
        i.textItem.toPlainText() for i in shown.memory.items if hasattr(i, "textItem"))
    assert shown.cursor.span == 10.0


def test_one_cursor_moves_every_plot(shown, qtbot):
    lines = [shown.gantt.cursor_line.line, shown.links.cursor_line.line, shown.memory.cursor_line.line]
    dragged = lines[1]
    with qtbot.waitSignal(shown.cursor.moved):
        dragged.setValue(4.5)
        dragged.sigDragged.emit(dragged)  # what a mouse drag of the line emits
    assert shown.cursor.position == 4.5
    assert [line.value() for line in lines] == [4.5, 4.5, 4.5]
    assert lines[0].label.textItem.toPlainText() == "4.5 s"
    assert shown.memory.readout.text().startswith("at 4.5 s: 12 GiB (75.0 % of capacity)")
    shown.links.shape.setCurrentIndex(1)  # exact steps
    assert "switch → node[1]/gpu[0] 50.0 %" in shown.links.readout.text()
    assert "node[0]/gpu[0] → switch 100.0 %" in shown.links.readout.text()
    shown.cursor.move_to(99.0)  # clamped to the run
    assert shown.cursor.position == 10.0 and lines[2].value() == 10.0


def test_clicking_the_gantt_moves_the_cursor(shown, qtbot):
    from PySide6.QtCore import QPointF, Qt

    vb = shown.gantt.viewbox
    scene_pos = vb.mapViewToScene(QPointF(6.0, 1.0))
    view_pos = shown.gantt.plot_widget.mapFromScene(scene_pos)
    qtbot.mouseClick(shown.gantt.plot_widget.viewport(), Qt.MouseButton.LeftButton, pos=view_pos)
    assert shown.cursor.position == pytest.approx(6.0, abs=0.05)


def test_gantt_hover_text_and_colour_toggle(shown):
    g = shown.gantt
    assert g.text_at(4.5, 1.0).splitlines()[0] == "all-reduce block0"
    assert "duration 1 s" in g.text_at(4.5, 1.0)
    assert g.text_at(4.5, 0.0) == ""  # a group header
    assert g.text_at(9.0, 1.0) == ""  # idle time
    assert set(g.items) == {COMPUTE, CATEGORIES.index("tp_comm"), CATEGORIES.index("network")}
    g.colour_by.setCurrentIndex(1)
    assert g.mode == "stage" and set(g.items) == {-1, 0, 1}
    names = [g.legend.items[i][1].text for i in range(len(g.legend.items))]
    assert names == ["no stage", "stage 0", "stage 1"]


def test_gantt_zoom_refines_level_of_detail(qtbot):
    view = GanttView(TimeCursor())
    qtbot.addWidget(view)
    view.resize(1200, 400)
    view.show()
    data = GanttData(synthetic_timeline(200_000, compute_lanes=16, link_lanes=8))
    view.set_data(data)
    full = view.bar_count()
    view.viewbox.setXRange(0.01, 0.011, padding=0)
    view.refresh_bars()
    (x0, x1), _ = view.viewbox.viewRange()
    xs = np.concatenate([item.opts["x0"] for item in view.items.values() if len(item.opts["x0"])])
    assert xs.min() >= x0 - 1e-3 and xs.max() <= x1  # only what is in view is built
    assert 0 < view.bar_count() < full
    view.release()


def test_a_million_slices_render(qtbot):
    """Benchmark-style: a 1,000,000-slice timeline builds and draws (timings: benchmarks/bench_gantt.py)."""
    cursor = TimeCursor()
    view = GanttView(cursor)
    qtbot.addWidget(view)
    view.resize(1500, 450)
    view.show()
    qtbot.waitExposed(view)
    data = GanttData(synthetic_timeline(1_000_000))
    cursor.set_span(data.span)
    view.set_data(data)
    assert len(view.data) == 1_000_000
    assert 0 < view.bar_count() < 100_000  # level of detail: far fewer rectangles than slices
    for item in view.items.values():  # one item per colour on the shared-pen, shared-brush fast path
        assert item._singleColor
    image = view.grab().toImage()
    assert colour_pixels(image, CATEGORY_COLOURS["compute"]) > 2000
    assert colour_pixels(image, CATEGORY_COLOURS["tp_comm"]) > 100
    view.release()


def test_summary_has_units_and_time_breakdown_bar(shown):
    text = shown.text()
    for expected in ("<b>10 s</b> per iteration", "0.8 samples/s", "MFU 100.0 %", "peak memory 70 GiB",
                     "run took (studio)", "500 ms", "OUT OF MEMORY"):
        assert expected in text
    bar = shown.breakdown
    assert [name for name, _, _ in bar.segments] == ["compute", "tp_comm", "bubble"]
    assert bar.toolTip().splitlines() == ["compute 8 s (80.0 %)", "tp comm 1 s (10.0 %)", "bubble 1 s (10.0 %)"]
    image = bar.grab().toImage()
    assert colour_pixels(image, CATEGORY_COLOURS["compute"], step=2) > colour_pixels(
        image, CATEGORY_COLOURS["tp_comm"], step=2) > 0


def test_compare_two_runs_after_an_edit(panel):
    before = dgx_project()
    after = before.model_copy(update={"mapping": before.mapping.model_copy(update={"micro_batch": 2})})
    slow = tiny_result()
    fast = tiny_result()
    fast.iteration_time_s = 8.0
    fast.time_breakdown_s = {"compute": 7.0, "tp_comm": 1.0}
    panel.show_record(prepare_record(before, slow, 0.1))
    panel.show_record(prepare_record(after, fast, 0.1))
    view = panel.compare
    assert view.run_a.currentText().startswith("#1 ") and view.run_b.currentText().startswith("#2 ")
    rows = {view.cell(r, 0): [view.cell(r, c) for c in range(1, 5)] for r in range(view.table.rowCount())}
    assert rows["iteration time"] == ["10 s", "8 s", "−2 s", "−20.0 %"]
    assert rows["throughput"] == ["0.8 samples/s", "1 samples/s", "+0.2 samples/s", "+25.0 %"]
    assert rows["time: bubble"][2] == "−1 s"
    assert view.table.item(0, 3).foreground().color() == QColor("#1e8449")  # faster is better: green
    assert "mapping.micro_batch: 1 → 2" in view.changes.text()
    view.pick(2, 1)  # any two, either way round
    assert view.cell(0, 3) == "+2 s"


def test_history_keeps_the_last_five(panel):
    for _ in range(7):
        panel.show_record(prepare_record(dgx_project(), tiny_result(), 0.1))
    assert [r.number for r in panel.history.records] == [3, 4, 5, 6, 7]
    assert panel.compare.run_a.count() == 5


def test_an_analytic_run_fills_the_gantt_and_says_why_links_are_empty(panel):
    from tilewright.engine.simulate import simulate

    data = dgx_project().model_dump(mode="json")
    data["run"]["engine"] = "analytic"
    project = type(dgx_project()).model_validate(data)
    result = simulate(project)
    record = prepare_record(project, result, 0.1)
    panel.show_result(result, 0.1)
    panel.show_record(record)
    panel.flush()
    assert len(panel.gantt.data) == len(result.timeline) > 0  # the per-stage slices
    heading = panel.links.heading
    assert "no link data for analytic runs" in heading.text() and "event engine" in heading.text()
    assert heading.wordWrap()  # the reason is read in full, not cut at the pane's edge


def test_a_result_queued_when_the_panel_is_released_fills_nothing_after(panel, qtbot):
    """A run's views fill in later event-loop turns; a window closed meanwhile releases the panel, and the queued
    fills neither run against the released plots nor keep a timer going."""
    record = prepare_record(dgx_project(), tiny_result(), 0.5)
    panel.show_result(record.result, 0.5)
    panel.show_record(record)
    assert panel.gantt.data is None  # the Timeline fills in a later turn
    panel.release()
    qtbot.wait(200)  # ten turns of the fill timer
    assert panel.gantt.data is None
    panel.flush()  # nothing left to run
    assert panel.gantt.data is None


def test_a_run_ending_while_anothers_fills_are_queued_shows_the_newer_one(panel, qtbot):
    """Two results in quick succession: the queued fills restart on one timer and the views end on the newer run
    (its timeline, its link list), not on a mix of the two."""
    older = prepare_record(dgx_project(), tiny_result(), 0.5)
    newer = prepare_record(dgx_project(), tiny_result(), 0.7)
    panel.show_result(older.result, 0.5)
    panel.show_record(older)
    panel.show_result(newer.result, 0.7)
    panel.show_record(newer)
    qtbot.waitUntil(lambda: panel.gantt.data is not None and panel.memory.result is not None, timeout=5000)
    qtbot.wait(150)
    assert panel.gantt.data is newer.gantt and panel.links.result is newer.result
    assert panel.memory.result is newer.result and panel.record is newer
