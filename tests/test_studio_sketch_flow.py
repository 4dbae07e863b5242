"""A new user's first design, by hand, without knowing a single keyboard shortcut: File ▸ New, a wafer of
tiles from the component library, SRAM, NoC and DRAM set in the inspector (DRAM ports on two edges of
the tile grid), a model imported from File and mapped with Auto-map, Run ▸ Run, and a result.

Every step goes through what is on screen: menu entries found by their text in the menu bar, list and
tree items clicked with the mouse, inspector and workload fields typed into (Enter commits a field, as
it does in any form), combo boxes chosen, buttons clicked. Only the file dialog is replaced, as every
studio test does, since a native dialog cannot be driven offscreen."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu
from tilewright.engine.ir.hardware import Edge, MemoryKind, Topology
from tilewright.studio.samples import dgx_project
from tilewright.studio.ui.canvas.label import PixelLabel

HF_GPT2 = Path(__file__).parent / "data" / "hf" / "gpt2" / "config.json"


def menu_entry(w, menu: str, entry: str) -> QAction:
    """The enabled entry ``entry`` of menu ``menu`` in the window's menu bar ("&" and "…" ignored).

    Menus are found as the menu bar's children: ``QAction.menu()`` hands PySide a wrapper that owns the
    menu, and dropping it deletes the menu's actions."""
    def plain(text: str) -> str:
        return text.replace("&", "").rstrip("…").strip()

    bar = w.menuBar()
    shown = {plain(a.text()) for a in bar.actions()}
    for found in bar.findChildren(QMenu):
        if plain(found.title()) == menu and menu in shown:
            for action in found.actions():
                if plain(action.text()) == entry:
                    assert action.isEnabled(), f"{menu} ▸ {entry} is disabled"
                    return action
    raise AssertionError(f"no {menu} ▸ {entry} in the menu bar")


def click_tree_item(qtbot, tree, path: str) -> None:
    item = tree.items[path]
    tree.scrollToItem(item)
    rect = tree.visualItemRect(item)
    qtbot.mouseClick(tree.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


def double_click_library(qtbot, w, label: str) -> None:
    library = w.library
    item = next(library.item(i) for i in range(library.count()) if library.item(i).text() == label)
    library.scrollToItem(item)
    rect = library.visualItemRect(item)
    # A double-click is a press, a release, then the double-click: the view acts on the item pressed.
    qtbot.mouseClick(library.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.mouseDClick(library.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


def choose(editor, text: str) -> None:
    """Pick ``text`` in a choice editor's combo box, as a click on the list entry does."""
    combo = editor.combo
    index = combo.findText(text)
    assert index >= 0, f"{text!r} is not offered ({[combo.itemText(i) for i in range(combo.count())]})"
    combo.setCurrentIndex(index)
    combo.activated.emit(index)


def show_tab(w, dock: str) -> None:
    """Bring a tabbed dock (Inspector, Workload) to the front, as clicking its tab does."""
    w.docks[dock].show()
    w.docks[dock].raise_()


def test_sketch_a_wafer_from_file_new_to_a_first_run(make_window, qtbot, tmp_path):
    w = make_window(dgx_project(), size=(1280, 720))
    doc = w.doc

    # File ▸ New: one chip under a system, nothing to save.
    menu_entry(w, "File", "New").trigger()
    assert [c.name for c in doc.project.hardware.children] == ["chip"] and not doc.is_dirty

    # A wafer from the component library (double-click), then the starter chip goes (Edit ▸ Delete).
    double_click_library(qtbot, w, "Wafer")
    assert [c.name for c in doc.project.hardware.children] == ["chip", "wafer"]
    click_tree_item(qtbot, w.outline, "system/chip")
    assert w.selection.paths == ["system/chip"]
    menu_entry(w, "Edit", "Delete").trigger()
    hw = doc.project.hardware
    assert [c.name for c in hw.children] == ["wafer"] and hw.device_count() == 64

    # SRAM of every tile, in the inspector.
    show_tab(w, "inspector")
    click_tree_item(qtbot, w.outline, "system/wafer/tile")
    assert w.inspector.path == "system/wafer/tile"
    w.inspector.editor("memories", 0, "capacity_bytes").type_and_commit("2 MiB")
    w.inspector.editor("memories", 0, "bandwidth_bytes_per_s").type_and_commit("2 TB/s")
    sram = doc.project.hardware.find("system/wafer/tile").memories[0]
    assert sram.kind is MemoryKind.sram
    assert (sram.capacity_bytes, sram.bandwidth_bytes_per_s) == pytest.approx((2 * 2**20, 2e12))

    # The NoC joining the tiles: the wafer's interconnect.
    click_tree_item(qtbot, w.outline, "system/wafer")
    choose(w.inspector.editor("interconnect", "topology"), "torus")
    w.inspector.editor("interconnect", "link_bandwidth_bytes_per_s").type_and_commit("512 GB/s")
    w.inspector.editor("interconnect", "link_latency_s").type_and_commit("3 ns")
    noc = doc.project.hardware.find("system/wafer").interconnect
    assert (noc.topology, noc.link_bandwidth_bytes_per_s) == (Topology.torus, 512e9)
    assert noc.link_latency_s == pytest.approx(3e-9)

    # DRAM: an HBM stack from the library onto the selected wafer, made DDR with ports on two edges.
    double_click_library(qtbot, w, "HBM")
    assert [m.name for m in doc.project.hardware.find("system/wafer").memories] == ["hbm"]
    choose(w.inspector.editor("memories", 0, "kind"), "ddr")
    choose(w.inspector.editor("memories", 0, "attach"), "west, east")
    w.inspector.editor("memories", 0, "ports_per_edge").type_and_commit("2")
    w.inspector.editor("memories", 0, "capacity_bytes").type_and_commit("32 GiB")
    w.inspector.editor("memories", 0, "bandwidth_bytes_per_s").type_and_commit("100 GB/s")
    dram = doc.project.hardware.find("system/wafer").memories[0]
    assert (dram.kind, dram.attach, dram.ports_per_edge) == (MemoryKind.ddr, [Edge.west, Edge.east], 2)
    assert (dram.capacity_bytes, dram.bandwidth_bytes_per_s) == pytest.approx((32 * 2**30, 100e9))
    assert not w.inspector.editor("memories", 0, "attach").error
    # A refused edge set says why and leaves the model alone: a tile has no children for ports to sit between.
    click_tree_item(qtbot, w.outline, "system/wafer/tile")
    attach = w.inspector.editor("memories", 0, "attach")
    choose(attach, "north, south")
    assert attach.error and doc.project.hardware.find("system/wafer/tile").memories[0].attach == []

    # Open the wafer on the canvas (double-click in the hierarchy): the DRAM ports are drawn on its sides.
    w.outline.itemDoubleClicked.emit(w.outline.items["system/wafer"], 0)
    qtbot.waitUntil(lambda: w.selection.level == "system/wafer")
    frame = w.canvas.scene.frame
    assert frame.port_names == ["hbm@west[0]", "hbm@west[1]", "hbm@east[0]", "hbm@east[1]"]
    # The tiles are joined by the wafer's torus: no link to draw by hand on this level.

    # A model: File ▸ Import model config… (the file dialog answered with GPT-2's config.json).
    model_dir = tmp_path / "gpt2"
    model_dir.mkdir()
    shutil.copy(HF_GPT2, model_dir / "config.json")
    w.ask_open_path = lambda *_a, **_k: str(model_dir / "config.json")
    menu_entry(w, "File", "Import model config").trigger()
    assert doc.project.workload.name == "gpt2"

    # Mapped in the Workload tab: pipeline 4 × tensor 4 × data 4 on the 64 tiles, then Auto-map (tensor 16 does
    # not divide GPT-2's 12 heads: Run refuses such a project, as ``tilewright run`` does).
    show_tab(w, "workload")
    panel = w.workload
    panel.editors["pp"].type_and_commit("4")
    panel.editors["tp"].type_and_commit("4")
    panel.editors["dp"].type_and_commit("4")
    panel.editors["global_batch"].type_and_commit("8")  # two samples per replica
    assert "tp·pp·dp = 64 of 64 devices" in panel.devices_label.text()
    qtbot.mouseClick(panel.auto_map, Qt.MouseButton.LeftButton)
    m = doc.project.mapping
    assert (m.pp, m.tp, m.dp) == (4, 4, 4) and not panel.error_label.text()
    assert "4 stages" in panel.placement_label.text()

    # Run ▸ Run, on the real engine: a result arrives in the results dock.
    with qtbot.waitSignal(w.runner.done, timeout=120_000):
        menu_entry(w, "Run", "Run").trigger()
    record = w.results.record
    assert record is not None, w.results.text()
    assert record.result.project == doc.project.name and record.result.iteration_time_s > 0
    assert "per iteration" in w.results.headline.text()

    # Every caption on the canvas fits it: nothing runs off the canvas at 1280 × 720.
    view = w.canvas.view
    for label in w.canvas.scene.items():
        if isinstance(label, PixelLabel) and label.lines:
            rect = label.deviceTransform(view.viewportTransform()).mapRect(label.boundingRect())
            assert rect.right() <= view.viewport().width() + 1, label.lines
