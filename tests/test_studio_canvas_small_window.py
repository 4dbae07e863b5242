"""The canvas at 1280 × 720 once a run's results take their room: the canvas keeps a usable height, the
legend covers no component, captions fit the canvas (elided with "…" when they must), and layer tags
never sit on a caption."""

from __future__ import annotations

import pytest
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
