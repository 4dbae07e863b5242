"""The main window as a user meets it: navigation, selection sync, editing with undo, files, the guard."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import QSettings, Qt  # noqa: E402
from PySide6.QtWidgets import QMessageBox  # noqa: E402
from tilewright.engine.io import load_project, save_project  # noqa: E402
from tilewright.studio.document import ProjectDocument  # noqa: E402
from tilewright.studio.samples import dgx_project, wafer_project  # noqa: E402
from tilewright.studio.ui.main_window import MainWindow  # noqa: E402

Decision = QMessageBox.StandardButton


@pytest.fixture
def make_window(qtbot, tmp_path):
    def make(project=None, path=None, settings_name="settings.ini"):
        doc = ProjectDocument(project or dgx_project(), path)
        settings = QSettings(str(tmp_path / settings_name), QSettings.Format.IniFormat)
        window = MainWindow(doc, settings)
        window.ask_save_changes = lambda: Decision.Discard  # never block a test on a modal dialog
        qtbot.addWidget(window)
        window.resize(1300, 850)
        window.show()
        qtbot.waitExposed(window)
        return window

    return make


def grid_center(window, path):
    view = window.canvas.view
    return view.mapFromScene(window.canvas.scene.grids[path].scene_grid_rect().center())


def test_window_opens_on_project(make_window):
    w = make_window(wafer_project())
    assert "wafer 2 × 2 dies" in w.windowTitle()
    assert set(w.canvas.scene.grids) == {"wafer/die"}
    assert w.outline.topLevelItem(0).text(0) == "wafer"
    assert w.outline.items["wafer/die/tile"].text(2) == "4 × 4 = 16"
    assert w.outline.items["wafer"].text(3) == "64"  # devices in all instances
    for key in ("library", "outline", "inspector", "workload", "results"):
        assert w.docks[key].widget() is not None
    frame_text = "\n".join(w.canvas.scene.frame.title.lines)
    assert "mesh · 1 TB/s per link · 10 ns" in frame_text and "DDR" in frame_text


def test_double_click_drills_down_and_breadcrumb_goes_back(make_window, qtbot):
    w = make_window(wafer_project())
    qtbot.mouseDClick(w.canvas.view.viewport(), Qt.MouseButton.LeftButton, pos=grid_center(w, "wafer/die"))
    qtbot.waitUntil(lambda: w.selection.level == "wafer/die")
    assert set(w.canvas.scene.grids) == {"wafer/die/tile"}
    assert w.canvas.breadcrumb.segments() == ["wafer", "die"]
    # The tiles have nothing inside: double-clicking one stays put and says why.
    with qtbot.waitSignal(w.canvas.scene.message):
        qtbot.mouseDClick(w.canvas.view.viewport(), Qt.MouseButton.LeftButton, pos=grid_center(w, "wafer/die/tile"))
    assert w.selection.level == "wafer/die"
    qtbot.mouseClick(w.canvas.breadcrumb.buttons[0], Qt.MouseButton.LeftButton)
    assert w.selection.level == "wafer"
    assert set(w.canvas.scene.grids) == {"wafer/die"}
    assert w.canvas.breadcrumb.segments() == ["wafer"]


def test_outline_and_canvas_selection_stay_in_sync(make_window, qtbot):
    w = make_window(dgx_project())
    # Outline → canvas: a deep component takes the canvas to its level and selects it there.
    w.outline.items["cluster/node/gpu"].setSelected(True)
    assert w.selection.level == "cluster/node"
    assert w.canvas.scene.grids["cluster/node/gpu"].isSelected()
    assert w.inspector.path == "cluster/node/gpu"
    # Canvas → outline: click the empty canvas, then the grid.
    w.canvas.breadcrumb.buttons[0].click()
    qtbot.mouseClick(w.canvas.view.viewport(), Qt.MouseButton.LeftButton, pos=grid_center(w, "cluster/node"))
    assert w.selection.paths == ["cluster/node"]
    assert [it.text(0) for it in w.outline.selectedItems()] == ["node"]
    assert w.inspector.path == "cluster/node"


def test_inspector_edit_undo_redo(make_window):
    w = make_window(dgx_project())
    w.selection.reveal("cluster/node/gpu")
    editor = w.inspector.editor("memories", 0, "capacity_bytes")
    assert editor.line_edit.text() == "80 GB"
    editor.type_and_commit("40 GB")
    assert w.doc.project.hardware.find("cluster/node/gpu").memories[0].capacity_bytes == 40e9
    assert w.isWindowModified()
    assert w.outline.items["cluster/node/gpu"].toolTip(0).endswith(f"{40e9 / 2**30:.3g} GiB HBM")
    w.actions_.undo.trigger()
    assert w.doc.project.hardware.find("cluster/node/gpu").memories[0].capacity_bytes == 80e9
    assert w.inspector.editor("memories", 0, "capacity_bytes").line_edit.text() == "80 GB"
    w.actions_.redo.trigger()
    assert w.doc.project.hardware.find("cluster/node/gpu").memories[0].capacity_bytes == 40e9
    assert w.inspector.editor("memories", 0, "capacity_bytes").line_edit.text() == "40 GB"


def test_inspector_rows_edit_updates_canvas_and_counts(make_window):
    w = make_window(dgx_project())
    w.selection.reveal("cluster/node")
    w.inspector.editor("rows").type_and_commit("4")
    assert w.canvas.scene.grids["cluster/node"].component.rows == 4
    assert w.outline.items["cluster"].text(3) == "32"


@pytest.mark.parametrize(
    ("field", "text", "reason"),
    [
        (("rows",), "0", "must be ≥ 1"),
        (("interconnect", "link_bandwidth_bytes_per_s"), "-5 GB/s", "must be > 0"),
        (("interconnect", "link_bandwidth_bytes_per_s"), "fast", "not a number"),
        (("name",), "my node", "letters, digits"),
    ],
)
def test_refused_value_shows_reason_and_leaves_model(make_window, field, text, reason):
    w = make_window(dgx_project())
    w.selection.reveal("cluster/node")
    before = w.doc.project
    editor = w.inspector.editor(*field)
    editor.type_and_commit(text)
    assert reason in editor.error
    assert editor.error_label.isVisible()
    assert w.doc.project is before
    assert w.doc.undo_stack.count() == 0


def test_choice_refused_by_model_snaps_back_with_reason(make_window):
    w = make_window(dgx_project())
    w.selection.reveal("cluster/node")
    topology = w.inspector.editor("interconnect", "topology")
    topology.combo.setCurrentText("edges")  # an edge list is required for that topology
    topology.combo.activated.emit(topology.combo.currentIndex())
    assert "edge_list" in topology.error
    assert topology.combo.currentText() == "switch"
    assert w.doc.project.hardware.find("cluster/node").interconnect.topology.value == "switch"
    topology.combo.setCurrentText("ring")
    topology.combo.activated.emit(topology.combo.currentIndex())
    assert topology.error == ""
    assert w.doc.project.hardware.find("cluster/node").interconnect.topology.value == "ring"
    w.canvas.scene.drill_into("cluster/node")
    assert w.canvas.scene.grids["cluster/node/gpu"].links.value == "ring"  # drawn in the grid now


def test_library_adds_to_current_level_and_undo_removes(make_window):
    w = make_window(dgx_project())
    w.canvas.scene.drill_into("cluster/node")
    item = w.library.findItems("Switch", Qt.MatchFlag.MatchExactly)[0]
    w.library.itemDoubleClicked.emit(item)
    assert [c.name for c in w.doc.project.hardware.find("cluster/node").children] == ["gpu", "switch"]
    assert "cluster/node/switch" in w.canvas.scene.grids
    assert w.selection.paths == ["cluster/node/switch"]
    assert "cluster/node/switch" in w.outline.items
    w.doc.undo_stack.undo()
    assert [c.name for c in w.doc.project.hardware.find("cluster/node").children] == ["gpu"]
    assert "cluster/node/switch" not in w.canvas.scene.grids
    assert w.selection.paths == []


def test_delete_and_paste_through_the_clipboard(make_window):
    w = make_window(dgx_project())
    w.canvas.scene.drill_into("cluster/node")
    w.library.add_template("chip")
    w.copy()
    w.paste()
    assert [c.name for c in w.doc.project.hardware.find("cluster/node").children] == ["gpu", "chip", "chip_2"]
    assert w.delete_selection()
    assert [c.name for c in w.doc.project.hardware.find("cluster/node").children] == ["gpu", "chip"]
    w.selection.reveal("cluster")
    assert not w.delete_selection()  # the root stays; the refusal is reported, nothing changes
    assert w.doc.project.hardware.name == "cluster"


def test_save_as_and_reopen_through_window(make_window, tmp_path):
    w = make_window(wafer_project())
    w.selection.reveal("wafer/die")
    w.inspector.editor("cols").type_and_commit("3")
    target = tmp_path / "out" / "wafer"
    target.parent.mkdir()
    w.ask_save_path = lambda *a, **k: str(target)
    assert w.save()  # no file yet: Save falls through to Save As
    saved = tmp_path / "out" / "wafer.json"
    assert load_project(saved).hardware.find("wafer/die").cols == 3
    assert not w.isWindowModified() and "wafer.json" in w.windowTitle()
    assert str(saved.resolve()) in w.settings.value("recentFiles")


def test_unsaved_changes_guard(make_window, tmp_path):
    other = tmp_path / "dgx.json"
    save_project(dgx_project(), other)
    w = make_window(wafer_project())
    w.selection.reveal("wafer/die")
    w.inspector.editor("rows").type_and_commit("3")
    asked = []
    w.ask_save_changes = lambda: asked.append(1) or Decision.Cancel
    assert not w.open_path(other)
    assert w.doc.root_path == "wafer" and w.doc.is_dirty
    assert not w.close()  # Cancel keeps the window open
    w.ask_save_changes = lambda: asked.append(1) or Decision.Discard
    assert w.open_path(other)
    assert w.doc.root_path == "cluster" and not w.doc.is_dirty
    assert len(asked) == 3
    asked.clear()
    assert w.new_project()  # nothing unsaved now: no question asked
    assert asked == []


def test_guard_save_choice_saves_before_leaving(make_window, tmp_path):
    path = tmp_path / "wafer.json"
    save_project(wafer_project(), path)
    w = make_window(load_project(path), path)
    w.selection.reveal("wafer/die")
    w.inspector.editor("rows").type_and_commit("3")
    w.ask_save_changes = lambda: Decision.Save
    assert w.new_project()
    assert load_project(path).hardware.find("wafer/die").rows == 3


def test_open_bad_file_reports_and_keeps_project(make_window, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"hardware": {"name": "x"}}')
    w = make_window(wafer_project())
    errors = []
    w.show_error = lambda title, text: errors.append(text)
    assert not w.open_path(bad)
    assert errors and "bad.json" in errors[0]
    assert w.doc.root_path == "wafer"


def test_dock_layout_saved_and_restored(make_window):
    w = make_window(wafer_project())
    w.docks["library"].hide()
    w.save_layout()
    w2 = make_window(wafer_project())
    assert w2.docks["library"].isHidden()
    assert not w2.docks["outline"].isHidden()


def test_shortcuts_follow_platform_standard_keys(make_window):
    from PySide6.QtGui import QKeySequence

    w = make_window()
    assert w.actions_.undo.shortcut() == QKeySequence(QKeySequence.StandardKey.Undo)
    assert w.actions_.save.shortcut() == QKeySequence(QKeySequence.StandardKey.Save)
    assert w.actions_.run.shortcut() == QKeySequence("F5")
    menus = [a.text().replace("&", "") for a in w.menuBar().actions()]
    assert menus == ["File", "Edit", "View", "Run", "Help"]


def test_presentation_locks_editing(make_window):
    w = make_window(dgx_project())
    w.set_presentation(True)
    assert not w.library.add_template("chip")
    w.selection.reveal("cluster/node")
    assert not w.inspector.scroll.widget().isEnabled()
    assert w.doc.undo_stack.count() == 0


def test_status_bar_reports_checks(make_window, qtbot):
    w = make_window(dgx_project())
    qtbot.waitUntil(lambda: w.status.is_checked, timeout=5000)
    text = w.status.validation.text()
    assert text.startswith(("✓", "⚠", "checks"))
    w.selection.reveal("cluster/node")
    w.inspector.editor("rows").type_and_commit("1")  # 8 devices, the mapping wants 16
    qtbot.waitUntil(lambda: w.status.is_checked, timeout=5000)
    if w.status.validation.text() != "checks unavailable":
        assert "16" in w.status.validation.text() and "8" in w.status.validation.text()


def test_select_all_then_delete_is_one_undo_step(make_window):
    w = make_window(dgx_project())
    w.canvas.scene.drill_into("cluster/node")
    w.library.add_template("switch")
    w.library.add_template("chip")
    w.selection.select(["cluster/node/switch"])
    w.actions_.select_all.trigger()
    assert set(w.selection.paths) == {"cluster/node/gpu", "cluster/node/switch", "cluster/node/chip"}
    w.selection.select(["cluster/node/switch", "cluster/node/chip"])
    depth = w.doc.undo_stack.count()
    w.actions_.delete.trigger()
    assert [c.name for c in w.doc.project.hardware.find("cluster/node").children] == ["gpu"]
    assert w.doc.undo_stack.count() == depth + 1
    w.actions_.undo.trigger()
    assert [c.name for c in w.doc.project.hardware.find("cluster/node").children] == ["gpu", "switch", "chip"]


def test_undo_menu_names_the_edit(make_window):
    w = make_window(dgx_project())
    w.selection.reveal("cluster/node/gpu")
    w.inspector.editor("memories", 0, "capacity_bytes").type_and_commit("40 GiB")
    assert w.doc.project.hardware.find("cluster/node/gpu").memories[0].capacity_bytes == 40 * 2**30
    assert w.actions_.undo.text() == "&Undo Set gpu hbm capacity"


def test_import_model_config_replaces_workload_undoably(make_window, tmp_path):
    pytest.importorskip("tilewright.engine.workloads.hf_import")
    folder = tmp_path / "tiny-gpt"
    folder.mkdir()
    (folder / "config.json").write_text(
        '{"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "vocab_size": 1000, "n_positions": 256}'
    )
    w = make_window(dgx_project())
    assert w.import_model_config(folder / "config.json")
    assert (w.doc.project.workload.name, w.doc.project.workload.layers) == ("tiny-gpt", 2)
    from PySide6.QtWidgets import QLabel

    assert "tiny-gpt · gpt" in [label.text() for label in w.workload.model_box.findChildren(QLabel)]
    w.doc.undo_stack.undo()
    assert w.doc.project.workload.layers == 24
    errors = []
    w.show_error = lambda title, text: errors.append(text)
    (folder / "config.json").write_text('{"model_type": "gpt2", "n_layer": 2}')
    assert not w.import_model_config(folder / "config.json")
    assert errors and "config.json" in errors[0]


def test_export_canvas_png_and_system_json(make_window, tmp_path):
    from PySide6.QtGui import QImage
    from tilewright.engine.io.presets import load_system

    w = make_window(wafer_project())
    assert w.export(tmp_path / "canvas.png")
    assert not QImage(str(tmp_path / "canvas.png")).isNull()
    assert w.export(tmp_path / "system.json")
    assert load_system(str(tmp_path / "system.json")) == w.doc.project.hardware
    errors = []
    w.show_error = lambda title, text: errors.append(text)
    assert not w.export(tmp_path / "system.txt") and errors


def test_open_recent_lists_saved_files(make_window, tmp_path):
    w = make_window(wafer_project())
    w.save_as(tmp_path / "a.json")
    w.save_as(tmp_path / "b.json")
    w.fill_recent_menu()
    names = [a.text() for a in w.actions_.recent_menu.actions()]
    assert names == ["b.json", "a.json"]
    w.actions_.recent_menu.actions()[1].trigger()
    assert w.doc.file_path.resolve() == (tmp_path / "a.json").resolve()


def test_a_failed_save_shows_why_and_keeps_the_window_and_its_edits(make_window, tmp_path):
    """A name with a lone surrogate cannot be written as UTF-8: choosing Save on close shows the reason
    and leaves the window open with the edits (nothing is lost)."""
    path = tmp_path / "wafer.json"
    save_project(wafer_project(), path)
    before = path.read_bytes()
    w = make_window(load_project(path), path)
    w.doc.replace(w.doc.project.model_copy(update={"name": "bad\ud800name"}), path)
    w.selection.reveal("wafer/die")
    w.inspector.editor("rows").type_and_commit("3")
    errors = []
    w.show_error = lambda title, text: errors.append(text)
    w.ask_save_changes = lambda: Decision.Save
    assert not w.close()
    assert w.isVisible() and w.doc.is_dirty
    assert errors and "wafer.json" in errors[0] and "surrogate" in errors[0]
    assert path.read_bytes() == before
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_file_with_a_lone_surrogate_is_refused_on_open(make_window, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "a\\ud800b"}')  # a JSON escape: the only way to write a lone surrogate
    w = make_window(wafer_project())
    errors = []
    w.show_error = lambda title, text: errors.append(text)
    assert not w.open_path(bad)
    assert errors and "lone UTF-16 surrogate" in errors[0]
