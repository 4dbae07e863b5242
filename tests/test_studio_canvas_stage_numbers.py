"""Stage numbers at 1280 × 720 once a run's results take their room (the Links tab makes the Results dock
tallest): PaLM's 5 × 4 dies were drawn ~45 px high and GPT-3's grown node row ~60 px wide, so their numbers
scattered round the card on leader lines, over the die's caption and across the card. A short canvas now
gives its height to the cells (captions keep one line, the frame pads less): every stage's number sits on
its own cells, none on a caption, and no leader line is needed."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QRectF
from tilewright.engine.io import load_project
from tilewright.studio.ui.canvas.label import PixelLabel
from tilewright.studio.ui.canvas.tag_inset import block_offsets, callout


def _links_tab(qtbot, w) -> None:
    w.results._make_room()  # what the first result does to the results dock
    tabs = w.results.tabs
    tabs.setCurrentIndex(next(i for i in range(tabs.count()) if tabs.tabText(i) == "Links"))
    qtbot.wait(50)
    w.canvas.zoom_to_fit()
    w.canvas.view.viewport().repaint()


@pytest.mark.parametrize("height", [720, 640])
@pytest.mark.parametrize("preset", ["palm-wafer-t18b", "gpt3-dgx-a100"])
def test_stage_numbers_sit_on_their_cells_or_in_one_block_never_scattered(make_window, qtbot, preset, height):
    project = load_project(f"presets/projects/{preset}.json")
    w = make_window(project, size=(1280, height))
    _links_tab(qtbot, w)
    view = w.canvas.view
    assert view.viewport().height() < 300  # the case at hand: a short canvas
    tags = w.canvas.scene.tags
    assert sorted(set(tags.box_stages)) == list(range(project.mapping.pp))  # every stage named
    assert tags.leaders == []  # no number off on a line of its own
    captions = [label.deviceTransform(view.viewportTransform()).mapRect(label.boundingRect())
                for label in w.canvas.scene.items() if isinstance(label, PixelLabel) and label.lines]
    grids = [QRectF(view.mapFromScene(g.scene_grid_rect()).boundingRect()).adjusted(-1, -1, 1, 1)
             for g in w.canvas.scene.grids.values()]
    viewport = QRectF(view.viewport().rect())
    for block in tags.insets:  # a block of numbers, when the cells are too small: clear of every caption
        assert viewport.contains(block) and not any(block.intersects(c) for c in captions), block
    for box in tags.boxes:
        assert not any(box.intersects(c) for c in captions), box
        assert any(g.contains(box.center()) for g in grids) or any(b.contains(box) for b in tags.insets), box
    boxes = tags.boxes
    assert not any(a.intersects(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    if preset == "gpt3-dgx-a100" and height == 720:  # the audit's case: room for the numbers on the nodes
        assert tags.insets == []


def test_an_inset_keeps_the_cells_arrangement_and_apart():
    """The fallback when numbers fit neither on the cells nor in a taller canvas: a block of tags in the
    cells' own arrangement (a 5 × 4 grid stays 5 × 4), spread just enough that no two touch."""
    from PySide6.QtCore import QPointF

    centres = [QPointF(100 + 9 * c, 50 + 11 * r) for r in range(5) for c in range(4)]  # 9 × 11 px cells
    w, h = 18.0, 17.0
    corners, size = block_offsets(centres, w, h)
    boxes = [QRectF(p.x(), p.y(), w, h) for p in corners]
    assert not any(a.adjusted(-1, -1, 1, 1).intersects(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    outline = QRectF(0, 0, size.width(), size.height())
    assert all(outline.contains(b) for b in boxes)
    for i, a in enumerate(centres):  # the same order along both axes as on the cells
        for j, b in enumerate(centres):
            if a.x() < b.x():
                assert corners[i].x() < corners[j].x()
            if a.y() < b.y():
                assert corners[i].y() < corners[j].y()
    assert block_offsets([QPointF(1, 1), QPointF(1, 1)], w, h) is None  # two stages on one spot: no block
    start, end = callout(QRectF(0, 0, 50, 50), QRectF(200, 0, 40, 40))
    assert (start.x(), end.x()) == (50, 200)
