"""Canvas gestures, each ONE undo step that undo and redo replay exactly: dropping a library component,
drawing a link, rubber-band selection and delete, a snapped move, copy and paste."""

from __future__ import annotations

import json
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QEvent, QPoint, QPointF, Qt  # noqa: E402
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QMouseEvent  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402
from tilewright.engine.io import project_to_data  # noqa: E402
from tilewright.engine.ir.hardware import Component, ComponentKind, Interconnect, Topology  # noqa: E402
from tilewright.engine.ir.project import Project  # noqa: E402
from tilewright.engine.ir.workload import MLPSpec  # noqa: E402
from tilewright.studio.samples import dgx_project, wafer_project  # noqa: E402
from tilewright.studio.templates import build_component  # noqa: E402
from tilewright.studio.ui.canvas import style  # noqa: E402
from tilewright.studio.ui.canvas.drops import template_mime  # noqa: E402

NONE = Qt.KeyboardModifier.NoModifier
LEFT = Qt.MouseButton.LeftButton


def three_chips() -> Project:
    """A package of three chips joined by hand-drawn links: chip–chip2 so far."""
    chips = [build_component("chip").model_copy(update={"name": n}) for n in ("chip", "chip2", "chip3")]
    package = Component(name="pkg", kind=ComponentKind.package, children=chips,
                        interconnect=Interconnect(topology=Topology.edges, link_bandwidth_bytes_per_s=100e9,
                                                  edge_list=[(0, 1)]))
    return Project(name="three chips", hardware=package, workload=MLPSpec(name="mlp", layer_sizes=[64, 64]))


def mouse(view, kind, pos, button, buttons, modifiers=NONE):
    event = QMouseEvent(kind, QPointF(pos), QPointF(view.viewport().mapToGlobal(pos)), button, buttons, modifiers)
    QApplication.sendEvent(view.viewport(), event)


def drag(view, start, end, modifiers=NONE, steps=5):
    mouse(view, QEvent.Type.MouseButtonPress, start, LEFT, LEFT, modifiers)
    for i in range(1, steps + 1):
        p = start + (end - start) * i / steps
        mouse(view, QEvent.Type.MouseMove, p, Qt.MouseButton.NoButton, LEFT, modifiers)
    mouse(view, QEvent.Type.MouseButtonRelease, end, LEFT, Qt.MouseButton.NoButton, modifiers)


def centre(w, path, cell=None):
    item = w.canvas.scene.grids[path]
    point = item.instance_center(cell) if cell is not None else item.scene_grid_rect().center()
    return w.canvas.view.mapFromScene(point)


def drop(w, mime, pos):
    view = w.canvas.view
    enter = QDragEnterEvent(pos, Qt.DropAction.CopyAction, mime, LEFT, NONE)
    QApplication.sendEvent(view.viewport(), enter)
    event = QDropEvent(QPointF(pos), Qt.DropAction.CopyAction, mime, LEFT, NONE)
    QApplication.sendEvent(view.viewport(), event)
    return enter.isAccepted() and event.isAccepted()


def undo_redo_roundtrip(doc, before, after):
    doc.undo_stack.undo()
    assert project_to_data(doc.project) == before
    doc.undo_stack.redo()
    assert project_to_data(doc.project) == after


def test_library_drag_carries_the_template_and_a_drop_adds_it_where_dropped(make_window):
    w = make_window(dgx_project())
    lib = w.library
    mime = lib.mimeData([lib.item(2)])  # "Chip"
    assert bytes(mime.data("application/x-tilewright-template").data()) == b"chip"
    doc = w.doc
    before = project_to_data(doc.project)
    pos = QPoint(w.canvas.view.viewport().width() - 120, w.canvas.view.viewport().height() - 80)
    dropped_at = w.canvas.view.mapToScene(pos)  # the view refits after the drop
    assert drop(w, template_mime("chip"), pos)
    assert doc.undo_stack.count() == 1 and doc.undo_stack.undoText() == "Add chip"
    assert [c.name for c in doc.project.hardware.children] == ["node", "chip"]
    x, y = doc.project.canvas.positions["cluster/chip"]
    assert x % style.SNAP == 0 and y % style.SNAP == 0  # snapped
    assert abs(x - dropped_at.x()) <= style.SNAP / 2 and abs(y - dropped_at.y()) <= style.SNAP / 2
    assert w.selection.paths == ["cluster/chip"]
    undo_redo_roundtrip(doc, before, project_to_data(doc.project))
    assert "cluster/chip" in w.canvas.scene.grids


def test_memory_template_dropped_on_a_component_goes_onto_it(make_window):
    w = make_window(dgx_project())
    w.canvas.scene.drill_into("cluster/node")
    assert drop(w, template_mime("hbm"), centre(w, "cluster/node/gpu", 3))
    gpu = w.doc.project.hardware.find("cluster/node/gpu")
    assert [m.name for m in gpu.memories] == ["hbm", "hbm_2"]
    w.doc.undo_stack.undo()
    assert len(w.doc.project.hardware.find("cluster/node/gpu").memories) == 1


def test_shift_drag_draws_a_link_between_two_instances(make_window):
    w = make_window(three_chips())
    doc, view = w.doc, w.canvas.view
    before = project_to_data(doc.project)
    arcs = w.canvas.scene.links.arcs.elementCount()
    drag(view, centre(w, "pkg/chip3"), centre(w, "pkg/chip2"), Qt.KeyboardModifier.ShiftModifier)
    ic = doc.project.hardware.interconnect
    assert ic.topology.value == "edges" and ic.edge_list == [(0, 1), (1, 2)]
    assert doc.undo_stack.count() == 1
    assert doc.project.canvas.positions == {}  # the drag drew, it did not move anything
    assert w.canvas.scene.links.arcs.elementCount() > arcs
    undo_redo_roundtrip(doc, before, project_to_data(doc.project))
    # Drawing an existing link again is refused with a reason; nothing is pushed.
    drag(view, centre(w, "pkg/chip2"), centre(w, "pkg/chip"), Qt.KeyboardModifier.ShiftModifier)
    assert doc.undo_stack.count() == 1


def test_link_mode_draws_without_shift_and_a_switch_becomes_edges(make_window, qtbot):
    w = make_window(dgx_project())
    w.canvas.scene.drill_into("cluster/node")  # 8 GPUs on a switch
    w.actions_.link_mode.setChecked(True)
    with qtbot.waitSignal(w.canvas.scene.message) as said:
        drag(w.canvas.view, centre(w, "cluster/node/gpu", 0), centre(w, "cluster/node/gpu", 5))
    node = w.doc.project.hardware.find("cluster/node")
    assert node.interconnect.topology.value == "edges" and node.interconnect.edge_list == [(0, 5)]
    assert node.interconnect.link_bandwidth_bytes_per_s == 300e9  # kept from the switch
    assert "switch" in said.args[0]
    w.doc.undo_stack.undo()
    assert w.doc.project.hardware.find("cluster/node").interconnect.topology.value == "switch"


def test_links_on_a_mesh_are_refused(make_window, qtbot):
    w = make_window(wafer_project())
    w.canvas.scene.drill_into("wafer/die")
    with qtbot.waitSignal(w.canvas.scene.message) as said:
        drag(w.canvas.view, centre(w, "wafer/die/tile", 0), centre(w, "wafer/die/tile", 5),
             Qt.KeyboardModifier.ShiftModifier)
    assert "mesh" in said.args[0] and w.doc.undo_stack.count() == 0


def test_rubber_band_selects_then_delete_is_one_step(make_window):
    w = make_window(dgx_project())
    w.canvas.scene.drill_into("cluster/node")
    w.library.add_template("switch")
    w.library.add_template("chip")
    w.selection.select([])
    depth = w.doc.undo_stack.count()
    scene, view = w.canvas.scene, w.canvas.view
    band = scene.grids["cluster/node/switch"].sceneBoundingRect().united(
        scene.grids["cluster/node/chip"].sceneBoundingRect())
    drag(view, view.mapFromScene(band.topLeft()) - QPoint(6, 6), view.mapFromScene(band.bottomRight()) + QPoint(6, 6))
    assert set(w.selection.paths) == {"cluster/node/switch", "cluster/node/chip"}
    assert w.doc.undo_stack.count() == depth  # selecting is not an edit
    before = project_to_data(w.doc.project)
    w.actions_.delete.trigger()
    assert [c.name for c in w.doc.project.hardware.find("cluster/node").children] == ["gpu"]
    assert w.doc.undo_stack.count() == depth + 1
    undo_redo_roundtrip(w.doc, before, project_to_data(w.doc.project))


def test_move_snaps_and_is_one_step(make_window):
    w = make_window(dgx_project())
    doc, view = w.doc, w.canvas.view
    before = project_to_data(doc.project)
    drag(view, centre(w, "cluster/node"), centre(w, "cluster/node") + QPoint(57, 23), steps=8)
    assert doc.undo_stack.count() == 1
    x, y = doc.project.canvas.positions["cluster/node"]
    assert x % style.SNAP == 0 and y % style.SNAP == 0
    undo_redo_roundtrip(doc, before, project_to_data(doc.project))
    w.actions_.snap.setChecked(False)
    drag(view, centre(w, "cluster/node"), centre(w, "cluster/node") + QPoint(13, 7))
    x2, y2 = doc.project.canvas.positions["cluster/node"]
    assert (x2 % style.SNAP, y2 % style.SNAP) != (0, 0)


def test_copy_paste_uses_the_file_serializer_and_is_one_step(make_window):
    w = make_window(dgx_project())
    w.canvas.scene.drill_into("cluster/node")
    w.selection.select(["cluster/node/gpu"])
    w.actions_.copy.trigger()
    text = QApplication.clipboard().text()
    gpu = w.doc.project.hardware.find("cluster/node/gpu")
    assert json.loads(text) == [gpu.model_dump(mode="json")]  # what a project file holds for it
    before = project_to_data(w.doc.project)
    w.actions_.paste.trigger()
    node = w.doc.project.hardware.find("cluster/node")
    assert [c.name for c in node.children] == ["gpu", "gpu_2"] and node.children[1].memories == gpu.memories
    assert w.doc.undo_stack.count() == 1 and w.selection.paths == ["cluster/node/gpu_2"]
    undo_redo_roundtrip(w.doc, before, project_to_data(w.doc.project))


def test_zoom_to_fit_leaves_room_for_the_legend(make_window):
    w = make_window(wafer_project())
    w.canvas.zoom_to_fit()
    legend = w.canvas.legend.geometry()
    frame = w.canvas.view.mapFromScene(w.canvas.scene.content_rect()).boundingRect()
    assert w.canvas.legend.isVisible() and not legend.intersects(frame)
