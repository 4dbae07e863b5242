"""The canvas at 1280 × 720 once a run's results take their room: the canvas keeps a usable height, the
legend covers no component, captions fit the canvas (elided with "…" when they must), and layer tags
never sit on a caption — and every pipeline stage has one, inside the view, even when its cells are too
small for it."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QRectF
from tilewright.engine.io import load_project
from tilewright.studio.ui.canvas.label import PixelLabel


def _settle(qtbot, w) -> None:
    w.results._make_room()  # what the first result does to the results dock
    qtbot.wait(50)
    w.canvas.zoom_to_fit()
    w.canvas.view.viewport().repaint()


def _caption_rects(w):
    view = w.canvas.view
    return [(label.shown_lines, label.deviceTransform(view.viewportTransform()).mapRect(label.boundingRect()))
            for label in w.canvas.scene.items() if isinstance(label, PixelLabel) and label.lines]


@pytest.mark.parametrize("preset", ["palm-wafer-t18b", "gpt3-dgx-a100", "chiplet-bert-large"])
def test_small_window_keeps_every_caption_readable(make_window, qtbot, preset):
    w = make_window(load_project(f"presets/projects/{preset}.json"), size=(1280, 720))
    _settle(qtbot, w)
    view = w.canvas.view
    assert view.viewport().height() >= 240  # it was ~145 px: the results dock took 430 px of 720
    legend = w.canvas.legend
    assert legend.isVisible()
    frame = view.mapFromScene(w.canvas.scene.content_rect()).boundingRect()
    assert not legend.geometry().intersects(frame)
    captions = _caption_rects(w)
    for lines, rect in captions:
        assert not rect.intersects(legend.geometry()), lines
        assert rect.right() <= view.viewport().width() and rect.left() >= 0, lines
    tags = w.canvas.scene.tags
    for box in tags.boxes:
        assert not any(box.intersects(rect) for _lines, rect in captions), box


def test_a_narrow_canvas_elides_captions_and_shrinks_the_legend(make_window, qtbot):
    w = make_window(load_project("presets/projects/palm-wafer-t18b.json"), size=(1280, 720))
    _settle(qtbot, w)
    assert w.canvas.legend.key_size.value == "compact"  # no room for the full key beside the wafer
    die = w.canvas.scene.grids["palm-wafer/die"].label
    # a short canvas keeps a caption's first line (its cells get the height), marked as cut; the tooltip has all
    assert len(die.shown_lines) < len(die.lines) and die.shown_lines[-1].endswith("…")
    assert not any(line.endswith("…") for line in die.lines)
    w.resize(1920, 1080)
    qtbot.wait(50)
    w.canvas.zoom_to_fit()
    assert w.canvas.legend.key_size.value == "full" and die.shown_lines == die.lines


def _legend_rect(w):
    legend = w.canvas.legend
    return QRectF(legend.geometry().translated(-w.canvas.view.viewport().pos())) if legend.isVisible() else QRectF()


# pp 8 on the eight GPUs of one node, pp 20 on a 5 × 4 wafer of dies, pp 4 on a 4 × 4 chiplet package,
# pp 4 × ep 8 on a node: at 1280 × 720 their cells are too small for all their tags.
@pytest.mark.parametrize("preset", ["gpt3-dgx-a100", "palm-wafer-t18b", "chiplet-bert-large", "mixtral-8x7b-dgx-h100"])
def test_every_stage_has_a_visible_tag_in_a_small_window(make_window, qtbot, preset):
    project = load_project(f"presets/projects/{preset}.json")
    w = make_window(project, size=(1280, 720))
    _settle(qtbot, w)
    tags = w.canvas.scene.tags
    stages = project.mapping.pp
    assert w.canvas.overlay.layout.stages == stages
    view = QRectF(w.canvas.view.viewport().rect())
    legend = _legend_rect(w)
    captions = [rect for _lines, rect in _caption_rects(w)]
    # Every stage has a tag, drawn whole inside the canvas view (the GPT-3 node had 3 of 8, PaLM 3 of 20).
    assert sorted(set(tags.box_stages)) == list(range(stages))
    for box in tags.boxes:
        assert view.contains(box), box
        assert not box.intersects(legend), box  # under the floating legend it would be hidden
        assert not any(box.intersects(rect) for rect in captions), box
    boxes = tags.boxes
    assert not any(a.intersects(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])  # no pile of text
    # A tag away from its cells points at them: its leader starts on its stage's cells and ends on its tag.
    cells = {stage: [] for stage in range(stages)}
    for grid in w.canvas.scene.grids.values():
        rect = w.canvas.view.mapFromScene(grid.scene_grid_rect()).boundingRect()
        if grid.colours is not None:
            for stage in {int(s) for s in grid.colours.pixels.ravel() if s >= 0}:
                cells[stage].append(QRectF(rect).adjusted(-1, -1, 1, 1))
    for stage, start, end in tags.leaders:
        assert any(rect.contains(start) for rect in cells[stage]), (stage, start)
        box = boxes[tags.box_stages.index(stage)]
        assert box.adjusted(-0.5, -0.5, 0.5, 0.5).contains(end) and not box.adjusted(1, 1, -1, -1).contains(end)


@pytest.mark.parametrize("preset", ["gpt3-dgx-a100", "palm-wafer-t18b", "mixtral-8x7b-dgx-h100"])
def test_stage_tags_keep_off_the_frame_edge_the_link_bar_and_other_leaders(make_window, qtbot, preset):
    """At 1280 × 720 the QA screenshots had "L5–8" across the system's border, "L17–24" on the fat-tree bar
    and PaLM's twenty tags on one another's leader lines."""
    w = make_window(load_project(f"presets/projects/{preset}.json"), size=(1280, 720))
    _settle(qtbot, w)
    scene, view = w.canvas.scene, w.canvas.view
    tags = scene.tags
    frame = view.mapFromScene(scene.frame.mapRectToScene(scene.frame.rect)).boundingRect()
    inner, outer = QRectF(frame).adjusted(1, 1, -1, -1), QRectF(frame).adjusted(-1, -1, 1, 1)
    bar = scene.links.bar
    bar_px = QRectF(view.mapFromScene(scene.links.mapRectToScene(bar)).boundingRect()) if not bar.isNull() else None
    assert tags.boxes
    for box, stage in zip(tags.boxes, tags.box_stages, strict=True):
        assert inner.contains(box) or not outer.intersects(box), (stage, box, frame)  # never across the edge
        assert bar_px is None or not box.intersects(bar_px), (stage, box, bar_px)
        for other, start, end in tags.leaders:  # each leader's two ends show: its stage's dot and its tag
            if other != stage:
                assert not box.contains(start) and not box.adjusted(1, 1, -1, -1).contains(end), (stage, other)
    # The lines run beneath the components and their captions (a caption's backdrop covers a line that must
    # cross it), the tags and the stages' dots above them.
    assert tags.lines.zValue() < min(g.zValue() for g in scene.grids.values()) < tags.zValue()
    assert tags.lines.zValue() > scene.links.zValue()  # ...but over the link bar they leave from


def test_a_stage_that_is_a_whole_node_colours_the_whole_node():
    """GPT-3 at tp 8 × pp 8, rank order tp-dp-pp: the plan puts each stage's tensor group on the eight GPUs
    of one node, so the canvas colours each node cell one stage, the node's, as ``stage_groups`` says."""
    from tilewright.engine.hardware import elaborate
    from tilewright.engine.plan.placement import stage_groups
    from tilewright.studio import mapping
    from tilewright.studio.model import level_cells
    from tilewright.studio.ui.canvas.overlay import stage_colours

    project = load_project("presets/projects/gpt3-dgx-a100.json")
    hw, layout = mapping.display_hardware(project), mapping.stage_layout(project)
    graph = elaborate(hw, devices_needed=project.mapping.devices)
    groups = stage_groups(graph.devices, project.mapping)
    cells = level_cells.level_cells(hw, hw.name, hw.name, layout.devices)[f"{hw.name}/node"]
    colours = stage_colours(cells, layout)
    assert len(cells.nodes) == project.mapping.pp == 8
    for i in range(len(cells.nodes)):
        members = set(cells.members[i])
        stages = [s for s, replicas in enumerate(groups) if members & {d for r in replicas for d in r}]
        assert len(stages) == 1, (i, stages)  # one node, one stage
        assert members == {d for r in groups[stages[0]] for d in r}  # ...and the whole of it
        assert set(colours.pixels[i].ravel()) == {stages[0]}
