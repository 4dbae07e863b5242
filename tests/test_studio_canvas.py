"""The canvas: level of detail, smooth zoom on a 64 × 64 wafer, links, and gestures as single commands."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt  # noqa: E402
from PySide6.QtGui import QMouseEvent, QWheelEvent  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402
from tilewright.engine.ir.project import CanvasLayout  # noqa: E402
from tilewright.studio.document import ProjectDocument  # noqa: E402
from tilewright.studio.samples import big_wafer_project, dgx_project, wafer_project  # noqa: E402
from tilewright.studio.ui.canvas import CanvasWidget  # noqa: E402
from tilewright.studio.ui.canvas.layout import auto_positions  # noqa: E402
from tilewright.studio.ui.selection import Selection  # noqa: E402


@pytest.fixture
def make_canvas(qtbot):
    def make(project):
        doc = ProjectDocument(project)
        selection = Selection(doc)
        widget = CanvasWidget(doc, selection)
        qtbot.addWidget(widget)
        widget.resize(1000, 700)
        widget.show()
        qtbot.waitExposed(widget)
        widget.zoom_to_fit()
        return widget

    return make


def render(widget):
    widget.view.viewport().repaint()
    QApplication.processEvents()


def send_mouse(view, kind, pos, button, buttons):
    event = QMouseEvent(kind, QPointF(pos), QPointF(view.viewport().mapToGlobal(pos)), button, buttons,
                        Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(view.viewport(), event)


def test_big_wafer_far_out_is_one_block_close_in_draws_only_visible_cells(make_canvas):
    w = make_canvas(big_wafer_project(64))
    tiles = w.scene.grids["wafer/tile"]
    render(w)
    assert tiles.last_paint == ("block", 0)
    w.view.zoom_by(4.0)
    render(w)
    mode, cells = tiles.last_paint
    assert mode == "cells" and 0 < cells < 64 * 64  # culled to the exposed part


def test_big_wafer_zoom_and_pan_draw_only_what_is_exposed(make_canvas):
    """Zooming and panning a 64 × 64 wafer keeps drawing culled cells, never all 4,096 (the frame-time bar,
    < 50 ms, is benchmarks/bench_wafer_canvas.py's: wall time is not a test's to judge)."""
    w = make_canvas(big_wafer_project(64))
    tiles = w.scene.grids["wafer/tile"]
    for _ in range(12):
        w.view.zoom_by(1.25)
        render(w)
    for _ in range(10):
        w.view.pan_by(40, 25)
        render(w)
        mode, cells = tiles.last_paint
        assert mode == "cells" and 0 < cells < 64 * 64
    w.view.zoom_to_fit()
    w.view.zoom_by(3.0)  # the worst case: most cells visible, just above the block threshold
    render(w)
    assert tiles.last_paint[0] == "cells"


def test_wheel_zooms_about_cursor_and_middle_button_pans(make_canvas):
    w = make_canvas(wafer_project())
    view = w.view
    before = view.zoom
    pos = QPointF(view.viewport().width() / 2, view.viewport().height() / 2)
    wheel = QWheelEvent(pos, view.viewport().mapToGlobal(pos), QPoint(0, 0), QPoint(0, 240),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(view.viewport(), wheel)
    assert view.zoom == pytest.approx(before * 1.0015**240)
    assert not view.auto_fit
    centre_before = view.mapToScene(view.viewport().rect().center())
    start, end = QPoint(300, 300), QPoint(200, 250)
    send_mouse(view, QEvent.Type.MouseButtonPress, start, Qt.MouseButton.MiddleButton, Qt.MouseButton.MiddleButton)
    send_mouse(view, QEvent.Type.MouseMove, end, Qt.MouseButton.NoButton, Qt.MouseButton.MiddleButton)
    send_mouse(view, QEvent.Type.MouseButtonRelease, end, Qt.MouseButton.MiddleButton, Qt.MouseButton.NoButton)
    moved = view.mapToScene(view.viewport().rect().center()) - centre_before
    assert moved.x() == pytest.approx(100 / view.zoom, rel=0.05)
    assert moved.y() == pytest.approx(50 / view.zoom, rel=0.05)
    w.zoom_to_fit()
    assert view.auto_fit
    assert view.mapFromScene(w.scene.content_rect()).boundingRect().width() <= view.viewport().width()


def test_drag_is_one_undo_command_pushed_on_release(make_canvas, qtbot):
    w = make_canvas(dgx_project())
    doc, view = w.scene.doc, w.view
    item = w.scene.grids["cluster/node"]
    start = view.mapFromScene(item.scene_grid_rect().center())
    old = (item.x(), item.y())
    send_mouse(view, QEvent.Type.MouseButtonPress, start, Qt.MouseButton.LeftButton, Qt.MouseButton.LeftButton)
    for step in range(1, 6):
        send_mouse(view, QEvent.Type.MouseMove, start + QPoint(12 * step, 6 * step), Qt.MouseButton.NoButton,
                   Qt.MouseButton.LeftButton)
    assert doc.undo_stack.count() == 0  # nothing pushed mid-drag
    send_mouse(view, QEvent.Type.MouseButtonRelease, start + QPoint(60, 30), Qt.MouseButton.LeftButton,
               Qt.MouseButton.NoButton)
    assert doc.undo_stack.count() == 1
    saved = doc.project.canvas.positions["cluster/node"]
    assert saved != old and saved == (item.x(), item.y())
    doc.undo_stack.undo()
    assert (item.x(), item.y()) == old
    assert "cluster/node" not in doc.project.canvas.positions


def test_switch_is_a_bar_with_a_spoke_per_instance(make_canvas):
    w = make_canvas(dgx_project())
    w.scene.drill_into("cluster/node")
    links = w.scene.links
    assert not links.bar.isNull()
    assert len(links.spokes) == 8
    gpu = w.scene.grids["cluster/node/gpu"]
    ends = sorted(round(s.p2().x()) for s in links.spokes)
    assert ends == sorted(round(gpu.instance_top(i).x()) for i in range(8))
    assert links.caption is not None and links.caption.lines == ["switch"]


def test_many_switch_spokes_are_bundled(make_canvas):
    project = dgx_project()
    hw = project.hardware
    node = hw.children[0].model_copy(update={"rows": 200})
    w = make_canvas(project.model_copy(update={"hardware": hw.model_copy(update={"children": [node]})}))
    assert w.scene.links.bundled and len(w.scene.links.spokes) == 1


def test_mesh_is_drawn_inside_the_grid(make_canvas):
    w = make_canvas(wafer_project())
    die = w.scene.grids["wafer/die"]
    assert die.links.value == "mesh"
    lines = die._link_lines(0, 1, 0, 1)
    assert len(lines) == 4  # 2 × 2 grid: two horizontal and two vertical neighbour links
    assert w.scene.links.bar.isNull()
    assert len(w.scene.frame.ports) == 4  # DRAM: two ports on each of two edges


def test_saved_positions_are_used(make_canvas):
    project = dgx_project()
    project = project.model_copy(update={"canvas": CanvasLayout(positions={"cluster/node": (333.0, -44.0)})})
    w = make_canvas(project)
    item = w.scene.grids["cluster/node"]
    assert (item.x(), item.y()) == (333.0, -44.0)


def test_auto_layout_puts_new_children_right_of_placed_ones():
    hw = wafer_project().hardware
    from tilewright.studio.templates import build_component
    from tilewright.studio.tree_edit import add_child

    hw, path = add_child(hw, "wafer", build_component("chip"))
    places = {p.path: p for p in auto_positions(hw, "wafer", {"wafer/die": (1000.0, 50.0)})}
    die, chip = places["wafer/die"], places[path]
    assert (die.x, die.y) == (1000.0, 50.0)
    assert chip.x > die.x + die.width and chip.y == 50.0
    assert chip.first_instance == 4  # instance numbering continues after the die's 2 × 2


def test_labels_name_kind_and_figures_with_units(make_canvas):
    w = make_canvas(dgx_project())
    w.scene.drill_into("cluster/node")
    label = w.scene.grids["cluster/node/gpu"].label.lines
    hbm = dgx_project().hardware.find("cluster/node/gpu").memories[0].capacity_bytes
    assert label == ["gpu · chip · 1 × 8", f"312 TFLOP/s bf16 · {hbm / 2**30:.3g} GiB HBM"]
    title = w.scene.frame.title.lines
    assert title[0] == "node[0] · node · one of 2"
    assert "links: switch · 300 GB/s per link · 1 µs" in title
