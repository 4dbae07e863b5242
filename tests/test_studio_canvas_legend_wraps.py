"""A one-line canvas key wider than the view wraps inside it instead of losing its beginning.

The key floats against the view's right edge. The expert-group and context-ring keys have no shorter form
when there is nothing to colour (ep 1, cp 1: a sentence saying so), so on a 1280 × 720 window the "title"
key was wider than the canvas and started left of it: the cp 1 note read "whole sequences, no keys and values
pass around a ring (set cp > 1 …" with "cp 1: every device runs" cut off, and at 1024 wide the ep 1 note and
Mixtral's expert groups were cut too."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.io import load_project  # noqa: E402
from tilewright.studio.ui.canvas.legend import MARGIN, NO_GROUPS, Size  # noqa: E402
from tilewright.studio.ui.canvas.overlay_controller import Overlay  # noqa: E402


def _settle(qtbot, w) -> None:
    w.results._make_room()  # what the first result does to the results dock
    qtbot.wait(50)
    w.canvas.zoom_to_fit()


def _inside_the_view(w) -> None:
    legend, view = w.canvas.legend, w.canvas.view
    assert legend.isVisible()
    assert legend.x() >= 0, (legend.x(), legend.width(), view.width())
    assert legend.x() + legend.width() <= view.width()


@pytest.mark.parametrize(("preset", "size", "mode"), [
    ("gpt3-dgx-a100", (1280, 720), Overlay.context),
    ("gpt3-dgx-a100", (1024, 720), Overlay.experts),
    ("mixtral-8x7b-dgx-h100", (1280, 720), Overlay.context),
    ("mixtral-8x7b-dgx-h100", (1024, 720), Overlay.experts),
])
def test_the_group_key_stays_inside_the_canvas(make_window, qtbot, preset, size, mode):
    w = make_window(load_project(f"presets/projects/{preset}.json"), size=size)
    _settle(qtbot, w)
    w.canvas.demo.set_mode(mode)
    qtbot.wait(20)
    legend = w.canvas.legend
    assert legend.key_size is Size.title  # no room beside the level: the one-line key, as before
    _inside_the_view(w)
    # the key keeps its whole text (wrapped, not cut), and the level is fitted below it
    if w.canvas.overlay.groups(w.canvas.overlay.group_kind) is None:
        kind = w.canvas.overlay.group_kind
        assert NO_GROUPS[kind].split("(")[0].strip() in legend.text()
    w.canvas.zoom_to_fit()
    view = w.canvas.view
    frame = view.mapFromScene(w.canvas.scene.content_rect()).boundingRect()
    key = legend.geometry().translated(-view.viewport().pos())  # in the viewport's pixels, as the frame
    assert not key.intersects(frame), (key, frame)


def test_a_wrapped_key_unwraps_when_the_view_has_room(make_window, qtbot):
    w = make_window(load_project("presets/projects/gpt3-dgx-a100.json"), size=(1280, 720))
    _settle(qtbot, w)
    w.canvas.demo.set_mode(Overlay.context)
    qtbot.wait(20)
    narrow = w.canvas.legend.height()
    w.resize(1920, 1080)
    qtbot.wait(50)
    w.canvas.zoom_to_fit()
    legend = w.canvas.legend
    _inside_the_view(w)
    assert not legend.wordWrap()
    assert legend.height() < narrow  # one line of note again, not the narrow view's three
    assert legend.x() + legend.width() == w.canvas.view.width() - MARGIN  # against the right edge, as ever


def test_the_context_key_of_an_inference_project_says_the_run_refuses_cp(make_window, qtbot):
    """An inference project that keeps a training mapping's cp does not run: the project checks refuse cp > 1
    outside training. The key said "an inference run keeps every sequence whole on its devices", as if the run
    went ahead without the ring, while the status bar listed the refusal and Run did nothing."""
    from tilewright.engine.ir.project import Mode
    from tilewright.engine.plan.checks import check_project

    project = load_project("presets/projects/mixtral-8x7b-dgx-h100.json")
    mapping = project.mapping.model_copy(update={"cp": 2, "dp": project.mapping.dp // 2})
    project = project.model_copy(update={"mapping": mapping,
                                         "run": project.run.model_copy(update={"mode": Mode.infer})})
    assert any(p.path == "mapping.cp" for p in check_project(project))  # what the engine does with it
    w = make_window(project, size=(1600, 900))
    w.canvas.demo.set_mode(Overlay.context)
    qtbot.wait(20)
    text = w.canvas.legend.text()
    assert "cp 2" in text and "refuse" in text
    assert "keeps every sequence whole" not in text
