"""The hierarchy outline counts what runs: a DGX cluster drawn as one growable node runs on as many nodes
as the mapping needs, and the outline said "Devices 8" beside a header and a canvas saying 64."""

from __future__ import annotations

from tilewright.engine.io import load_project
from tilewright.engine.io.presets import preset_path
from tilewright.studio.commands import SetMappingField
from tilewright.studio.document import ProjectDocument
from tilewright.studio.ui.outline import Outline
from tilewright.studio.ui.selection import Selection


def _outline(qtbot, preset: str) -> tuple[ProjectDocument, Outline]:
    doc = ProjectDocument(load_project(preset_path("projects", preset)))
    outline = Outline(doc, Selection(doc))
    qtbot.addWidget(outline)
    return doc, outline


def test_a_grown_cluster_shows_the_devices_the_run_uses(qtbot):
    doc, outline = _outline(qtbot, "gpt3-dgx-a100")
    hw = doc.project.hardware
    (node,) = [c for c in hw.children if c.growable]
    per_node = node.device_count() // node.count  # as drawn: one node of eight GPUs
    needed = doc.project.mapping.devices
    assert needed > node.device_count()  # the preset runs past what is drawn: the case at hand
    nodes = -(-needed // per_node)
    root = outline.items[hw.name]
    assert root.text(3) == str(nodes * per_node)
    row = outline.items[f"{hw.name}/{node.name}"]
    assert row.text(2) == f"{nodes} (grown)" and row.text(3) == str(nodes * per_node)
    assert f"{per_node} per {node.name} × {nodes} {node.name}s = {nodes * per_node} devices" in row.toolTip(3)
    assert f"{node.count} {node.name} drawn" in row.toolTip(2)


def test_the_counts_follow_the_mapping(qtbot):
    doc, outline = _outline(qtbot, "gpt3-dgx-a100")
    hw = doc.project.hardware
    before = doc.project.mapping.devices
    doc.push(SetMappingField(doc, "dp", doc.project.mapping.dp * 2))
    assert doc.project.mapping.devices == 2 * before
    assert outline.items[hw.name].text(3) == str(2 * before)
    doc.undo_stack.undo()
    assert outline.items[hw.name].text(3) == str(doc.project.mapping.devices)


def test_a_fixed_wafer_keeps_its_drawn_counts(qtbot):
    doc, outline = _outline(qtbot, "palm-wafer-t18b")
    hw = doc.project.hardware
    assert outline.items[hw.name].text(3) == str(hw.device_count())
    assert all("grown" not in item.text(2) for item in outline.items.values())


def test_the_inspector_says_how_the_run_grows_the_system(qtbot):
    """The Inspector's figures are the drawing's (one node); its header also says what the run grows it to, as the
    Hierarchy's tooltip does, instead of leaving "8 devices" beside a 64-device run."""
    from tilewright.studio.ui.inspector import Inspector

    doc = ProjectDocument(load_project(preset_path("projects", "gpt3-dgx-a100")))
    selection = Selection(doc)
    inspector = Inspector(doc, selection)
    qtbot.addWidget(inspector)
    hw = doc.project.hardware
    (node,) = [c for c in hw.children if c.growable]
    per_node = node.device_count() // node.count
    nodes = -(-doc.project.mapping.devices // per_node)
    selection.select(hw.name)
    text = inspector.header.text()
    assert "(per instance, as drawn)" in text
    assert f"{per_node} per {node.name} × {nodes} {node.name}s = {nodes * per_node} devices" in text
