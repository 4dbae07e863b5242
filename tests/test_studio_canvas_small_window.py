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
    assert die.shown_lines[1].endswith("…") and not die.lines[1].endswith("…")  # the tooltip keeps it whole
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
