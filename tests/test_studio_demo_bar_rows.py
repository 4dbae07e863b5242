"""The canvas's demo bar (Show, op chooser, Play, scrubber, time) in one row where the canvas is wide enough,
in two where it is not: a grid device's op chooser made one row ~710 px wide, and a 1024 × 640 window grew
past 1,100 px around it after a run, its right edge off a 1024-px screen and the inspector squeezed to its
84-px minimum."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.io.presets import load_project_preset  # noqa: E402
from tilewright.engine.simulate import simulate  # noqa: E402
from tilewright.studio.model.run_record import prepare_record  # noqa: E402

N150 = "wormhole-n150-llama2-7b-inference"  # one grid chip: the op chooser is shown after a run


@pytest.fixture(scope="module")
def n150_run():
    project = load_project_preset(N150)
    return project, simulate(project)


def shown(make_window, qtbot, n150_run, size):
    project, result = n150_run
    window = make_window(project, size=size, persist=False)
    window.results.show_record(prepare_record(project, result, 0.1))
    window.results.show_result(result, 0.1)
    window.results.flush()
    window.canvas.show_result(result)
    qtbot.wait(50)
    return window


def disjoint(*widgets) -> bool:
    rects = [w.geometry() for w in widgets]
    return not any(a.intersects(b) for i, a in enumerate(rects) for b in rects[i + 1:])


def test_a_small_window_keeps_its_size_after_a_grid_run(make_window, qtbot, n150_run):
    w = shown(make_window, qtbot, n150_run, (1024, 640))
    demo = w.canvas.demo
    assert demo.op_box.isVisible()
    assert (w.width(), w.height()) == (1024, 640)
    assert demo.stacked and demo.width() <= w.centralWidget().width()
    # every control whole, none over another, the time label's text not cut
    parts = (demo.mode_box, demo.op_box, demo.play_button, demo.slider, demo.time_label)
    assert all(demo.rect().contains(p.geometry()) for p in parts) and disjoint(*parts)
    assert demo.time_label.width() >= demo.time_label.sizeHint().width()
    assert w.docks["inspector"].width() > 150  # room for its fields' names and values


def test_a_wide_canvas_keeps_one_row(make_window, qtbot, n150_run):
    w = shown(make_window, qtbot, n150_run, (1920, 1080))
    demo = w.canvas.demo
    assert demo.op_box.isVisible() and not demo.stacked
    assert demo.slider.geometry().top() == pytest.approx(demo.op_box.geometry().top(), abs=6)  # side by side
