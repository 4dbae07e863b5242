"""The document and its undo commands: edits change only the model, undo/redo are exact, files round-trip."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.io import load_project, project_to_data  # noqa: E402
from tilewright.studio.commands import (  # noqa: E402
    AddChild,
    MoveOnCanvas,
    RemoveChildren,
    SetComponentField,
    SetMappingField,
)
from tilewright.studio.document import ProjectDocument  # noqa: E402
from tilewright.studio.samples import dgx_project, wafer_project  # noqa: E402
from tilewright.studio.templates import build_component  # noqa: E402
from tilewright.studio.tree_edit import EditRefused  # noqa: E402


@pytest.fixture
def doc(qapp):
    return ProjectDocument(wafer_project())


def test_field_command_emits_component_signal_and_undoes_exactly(doc, qtbot):
    before = project_to_data(doc.project)
    with qtbot.waitSignal(doc.componentChanged) as blocker:
        doc.push(SetComponentField(doc, "wafer/die/tile", ("memories", 0, "capacity_bytes"), 3e6))
    assert blocker.args == ["wafer/die/tile"]
    assert doc.project.hardware.find("wafer/die/tile").memories[0].capacity_bytes == 3e6
    assert doc.is_dirty
    doc.undo_stack.undo()
    assert project_to_data(doc.project) == before
    assert not doc.is_dirty
    doc.undo_stack.redo()
    assert doc.project.hardware.find("wafer/die/tile").memories[0].capacity_bytes == 3e6


def test_refused_command_never_reaches_the_stack(doc):
    with pytest.raises(EditRefused):
        doc.push(SetComponentField(doc, "wafer/die", ("cols",), -1))
    assert doc.undo_stack.count() == 0
    assert doc.project.hardware.find("wafer/die").cols == 2


def test_rename_moves_positions_and_reports_the_rename(doc, qtbot):
    doc.push(MoveOnCanvas(doc, {"wafer/die": (10.0, 20.0)}))
    with qtbot.waitSignal(doc.pathRenamed) as renamed:
        doc.push(SetComponentField(doc, "wafer/die", ("name",), "chiplet"))
    assert renamed.args == ["wafer/die", "wafer/chiplet"]
    assert doc.project.canvas.positions == {"wafer/chiplet": (10.0, 20.0)}
    with qtbot.waitSignal(doc.pathRenamed) as back:
        doc.undo_stack.undo()
    assert back.args == ["wafer/chiplet", "wafer/die"]
    assert doc.project.canvas.positions == {"wafer/die": (10.0, 20.0)}


def test_add_and_remove_children_are_structure_changes(doc, qtbot):
    with qtbot.waitSignal(doc.structureChanged):
        cmd = AddChild(doc, "wafer", build_component("chip"))
        doc.push(cmd)
    assert cmd.child_path == "wafer/chip"
    assert [c.name for c in doc.project.hardware.children] == ["die", "chip"]
    doc.push(MoveOnCanvas(doc, {"wafer/chip": (500.0, 0.0)}))
    doc.push(RemoveChildren(doc, ["wafer/chip"]))
    assert [c.name for c in doc.project.hardware.children] == ["die"]
    assert "wafer/chip" not in doc.project.canvas.positions  # no stale layout for a removed component
    doc.undo_stack.undo()
    assert doc.project.canvas.positions["wafer/chip"] == (500.0, 0.0)


def test_mapping_command_validates_the_whole_mapping(qapp):
    doc = ProjectDocument(dgx_project())
    with pytest.raises(EditRefused, match="global_batch"):
        SetMappingField(doc, "dp", 3)  # 16 samples are not a multiple of micro_batch × dp = 3
    doc.push(SetMappingField(doc, "dp", 4))
    assert doc.project.mapping.dp == 4


def test_save_and_load_round_trip(doc, tmp_path, qtbot):
    doc.push(SetComponentField(doc, "wafer/die/tile", ("rows",), 8))
    doc.push(MoveOnCanvas(doc, {"wafer/die": (12.5, -3.0)}))
    path = tmp_path / "wafer.json"
    with qtbot.waitSignal(doc.dirtyChanged) as clean:
        doc.save(path)
    assert clean.args == [False]
    assert not doc.is_dirty and doc.file_path == path
    reopened = ProjectDocument.open(path)
    assert reopened.project == doc.project
    assert load_project(path).hardware.find("wafer/die/tile").rows == 8


def test_replace_starts_history_afresh(doc, qtbot):
    doc.push(SetComponentField(doc, "wafer/die", ("rows",), 3))
    with qtbot.waitSignal(doc.projectReplaced):
        doc.replace(dgx_project())
    assert doc.undo_stack.count() == 0 and not doc.is_dirty
    assert doc.root_path == "cluster"


def test_read_only_document_refuses_pushes(doc):
    doc.read_only = True
    doc.push(SetComponentField(doc, "wafer/die", ("rows",), 3))
    assert doc.project.hardware.find("wafer/die").rows == 2
