"""Mapping in the window: the layer table, Auto-map, dropping layers on the canvas, stage colours that
follow the model, and importing a Hugging Face config — each edit one undo step."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import QPoint, QPointF, Qt  # noqa: E402
from PySide6.QtGui import QDragEnterEvent, QDropEvent  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402
from tilewright.engine.io import load_project  # noqa: E402
from tilewright.engine.ir.mapping import PlacementStrategy  # noqa: E402
from tilewright.studio.samples import wafer_project  # noqa: E402
from tilewright.studio.ui.canvas import style  # noqa: E402
from tilewright.studio.ui.canvas.drops import MIME_LAYERS, layers_mime  # noqa: E402

HF = Path(__file__).parent / "data" / "hf"


def chiplet():
    return load_project("presets/projects/chiplet-bert-large.json")


def cell_point(w, path, cell):
    """Viewport position of instance ``cell`` of grid ``path``."""
    item = w.canvas.scene.grids[path]
    return w.canvas.view.mapFromScene(item.instance_center(cell))


def drop_on_viewport(w, mime, pos):
    view = w.canvas.view
    actions = Qt.DropAction.CopyAction
    enter = QDragEnterEvent(pos, actions, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(view.viewport(), enter)
    if not enter.isAccepted():
        return False
    event = QDropEvent(QPointF(pos), actions, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(view.viewport(), event)
    return event.isAccepted()


def test_layer_table_lists_layers_with_units_and_stages(make_window):
    w = make_window(chiplet())
    table = w.workload.table
    assert table.topLevelItemCount() == 26
    header = [table.headerItem().text(i) for i in range(table.columnCount())]
    assert header[4:7] == ["Params", "FLOP/sample", "Act./sample"]
    block = table.topLevelItem(1)
    assert block.text(2) == "block0" and block.text(4) == "12.6 M" and block.text(5) == "14 GFLOP"
    assert block.text(6).endswith("iB") and block.text(1) == "0"
    assert table.topLevelItem(25).text(1) == "3"  # the head is on the last of 4 stages
    assert "26 layers" in w.workload.totals_label.text()


def test_layer_selection_drags_as_a_range(make_window):
    w = make_window(chiplet())
    table = w.workload.table
    for i in (3, 5, 4):
        table.topLevelItem(i).setSelected(True)
    assert table.selected_range() == (3, 6)
    mime = table.mimeData(table.selectedItems())
    assert mime.hasFormat(MIME_LAYERS) and bytes(mime.data(MIME_LAYERS).data()) == b'{"first": 3, "last": 6}'


def test_auto_map_applies_all_degrees_as_one_command(make_window):
    w = make_window(wafer_project())
    panel, doc = w.workload, w.doc
    panel.editors["tp"].type_and_commit("2")
    panel.editors["pp"].type_and_commit("8")
    panel.strategy.setCurrentText("snake")
    panel.strategy.activated.emit(panel.strategy.currentIndex())
    assert doc.undo_stack.count() == 0 and doc.project.mapping.tp == 4  # nothing applied yet
    assert "16" in panel.devices_label.text() and "Auto-map" in panel.placement_label.text()
    panel.auto_map.click()
    m = doc.project.mapping
    assert (m.tp, m.pp, m.placement.value) == (2, 8, "snake") and doc.undo_stack.count() == 1
    assert "8 stages placed by the snake strategy" in panel.placement_label.text()
    doc.undo_stack.undo()
    assert (doc.project.mapping.tp, doc.project.mapping.pp) == (4, 4)
    assert panel.editors["tp"].value == 4
    panel.editors["dp"].type_and_commit("3")  # global batch 1 is not a multiple of 3
    assert not panel.apply_auto_map()
    assert "global_batch" in panel.error_label.text() and doc.undo_stack.count() == 1


def test_stage_colours_follow_the_mapping_and_its_undo(make_window):
    w = make_window(chiplet())
    item = w.canvas.scene.grids["chiplet-mesh/chiplet"]
    before = item.colours.cells.tolist()
    assert before[:4] == [0, 0, 1, 1] and len(set(before)) == 4  # block placement: 2 × 2 per stage
    assert item.colours.labels[0] == "L0–6\nstage 0"
    w.workload.editors["pp"].type_and_commit("2")
    w.workload.editors["tp"].type_and_commit("8")
    w.workload.apply_auto_map()
    assert len(set(item.colours.cells.tolist())) == 2
    w.doc.undo_stack.undo()
    assert item.colours.cells.tolist() == before
    assert "Pipeline stages" in w.canvas.legend.text() and "L0–6" in w.canvas.legend.text()


def test_dropping_layers_on_a_chiplet_places_them_on_its_group(make_window):
    w = make_window(chiplet())
    doc = w.doc
    pos = cell_point(w, "chiplet-mesh/chiplet", 15)  # chiplet[3,3]; a stage needs tp × dp = 4
    assert drop_on_viewport(w, layers_mime(0, 7), pos)
    assert doc.undo_stack.count() == 1
    assert doc.project.mapping.stages[0].devices == [10, 11, 14, 15]
    item = w.canvas.scene.grids["chiplet-mesh/chiplet"]
    assert item.colours.cells[15] == 0  # the canvas shows stage 0 where it was dropped
    assert w.workload.table.topLevelItem(0).text(1) == "0"
    assert "stages placed by hand" in w.workload.placement_label.text()
    doc.undo_stack.undo()
    assert doc.project.mapping.stages == [] and item.colours.cells[15] == 3


def test_dropping_layers_on_a_selected_group_uses_the_whole_selection(make_window):
    w = make_window(wafer_project())  # 2 × 2 dies of 16 tiles; tp 4 · pp 4
    w.canvas.scene.drill_into("wafer/die", 3)  # die[1,1]: devices 48–63
    w.selection.select(["wafer/die/tile"])
    assert drop_on_viewport(w, layers_mime(0, 4), cell_point(w, "wafer/die/tile", 0))
    placed = [s for s in w.doc.project.mapping.stages if s.layers[1] <= 4]
    assert [s.devices for s in placed] == [[48, 49, 50, 51], [52, 53, 54, 55], [56, 57, 58, 59], [60, 61, 62, 63]]


def test_refused_drop_changes_nothing_and_says_why(make_window, qtbot):
    w = make_window(chiplet())
    with qtbot.waitSignal(w.canvas.scene.message) as blocker:
        drop_on_viewport(w, layers_mime(0, 26), QPoint(5, 5))  # empty canvas
    assert "drop the layers onto" in blocker.args[0]
    assert w.doc.undo_stack.count() == 0


def test_drilled_level_shows_the_instance_clicked(make_window, qtbot):
    w = make_window(load_project("presets/projects/palm-wafer-t18b.json"))
    qtbot.mouseDClick(w.canvas.view.viewport(), Qt.MouseButton.LeftButton,
                      pos=cell_point(w, "palm-wafer/die", 5))  # die[1,1]
    qtbot.waitUntil(lambda: w.selection.level == "palm-wafer/die")
    scene = w.canvas.scene
    assert scene.level_node == "palm-wafer/die[1,1]"
    assert scene.frame.title.lines[0] == "die[1,1] · die · one of 20"
    tiles = scene.grids["palm-wafer/die/tile"]
    # Block placement, tp 16: one die per stage as PALM maps it, so die[1,1] (the sixth die) is stage 5.
    assert tiles.colours.cells.tolist() == [5] * 16
    assert tiles.colours.labels[0] == "L11–12\nstage 5"


def test_wafer_top_level_tags_stages_with_their_layers(make_window, qtbot):
    project = load_project("presets/projects/palm-wafer-t18b.json")
    # snake placement: every stage a strip across four dies, so at this zoom their tags would overlap
    snake = project.mapping.model_copy(update={"placement": PlacementStrategy.snake})
    project = project.model_copy(update={"mapping": snake})
    w = make_window(project)
    tags = w.canvas.scene.tags
    assert len(tags.tags) == 20 and tags.tags[0][2] == "L0–2"
    qtbot.waitUntil(lambda: tags.drawn > 0)
    w.canvas.view.viewport().repaint()
    # At this zoom the strips are too thin for twenty tags: those without room on their cells sit beside
    # the wafer with a leader line to their stage, never dropped and never on one another.
    assert tags.drawn == 20 and tags.named == list(range(20))
    far = len(tags.leaders)
    assert far > 0
    boxes = tags.boxes
    assert not any(a.intersects(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    w.canvas.view.zoom_by(4.0)
    w.canvas.view.viewport().repaint()
    assert len(tags.leaders) < far  # closer, more of them fit on their own cells
    dies = w.canvas.scene.grids["palm-wafer/die"]
    assert dies.colours.pixels.shape == (20, 4, 4)  # each die cell shows its 4 × 4 tiles


def test_narrow_neighbour_stages_write_their_number_on_their_own_cells_instead_of_dropping_them(make_window, qtbot):
    """Eight pipeline stages on the eight nodes of the cluster: each node is narrower than its "L5–8 +2" tag,
    so the long tags would overlap or hang off on leader lines over the link bar and the frame; the level
    writes every stage's number instead (the legend spells out its layers), each on its own cell."""
    w = make_window(load_project("presets/projects/gpt3-dgx-a100.json"))
    tags = w.canvas.scene.tags
    assert len(tags.tags) == 8
    qtbot.waitUntil(lambda: tags.drawn > 0)
    w.canvas.view.viewport().repaint()
    assert tags.drawn == 8 and tags.short and not tags.leaders
    boxes = tags.boxes
    assert not any(a.intersects(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    texts = [text for _box, text, _stage, _centre in tags._placed]
    assert texts == [str(stage) for stage in tags.box_stages]
    grid = w.canvas.scene.grids["dgx-a100/node"]
    view = w.canvas.view
    for box, stage in zip(boxes, tags.box_stages, strict=True):
        cell = view.mapFromScene(grid.instance_center(stage))  # node i holds stage i (tp 8 fills a node)
        assert box.contains(cell.toPointF()), (stage, box, cell)


@pytest.mark.parametrize("model", ["gpt2", "llama-2-7b", "bert-base-uncased"])
def test_import_hf_config_is_one_undo_step_and_relists_layers(make_window, model):
    w = make_window(chiplet())
    before = w.workload.table.topLevelItemCount()
    assert w.import_model_config(HF / model / "config.json")
    assert w.doc.project.workload.name == model and w.doc.undo_stack.count() == 1
    assert w.workload.table.topLevelItemCount() != before or model == "bert-base-uncased"
    w.doc.undo_stack.undo()
    assert w.workload.table.topLevelItemCount() == before


def test_presentation_locks_mapping_edits(make_window):
    w = make_window(chiplet())
    w.set_presentation(True)
    try:
        assert not w.workload.auto_map.isEnabled()
        assert not drop_on_viewport(w, layers_mime(0, 7), cell_point(w, "chiplet-mesh/chiplet", 15))
        assert w.doc.undo_stack.count() == 0
    finally:
        w.set_presentation(False)


def test_cells_use_the_kind_colour_when_overlay_is_off(make_window):
    w = make_window(chiplet())
    w.canvas.demo.set_mode(w.canvas.overlay.mode.off)
    assert w.canvas.scene.grids["chiplet-mesh/chiplet"].colours is None
    assert not w.canvas.legend.isVisible()
    assert style.stage_color(0) != style.stage_color(1)
