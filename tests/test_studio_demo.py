"""Demo mode and presentation mode: play and scrub a run on the canvas through the shared time cursor,
cheaply enough per frame for a 64 × 64 wafer; present full screen with editing locked; render it all
from the command line offscreen."""

from __future__ import annotations

import os
from argparse import Namespace

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtGui import QImage  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402
from tilewright.engine.io import save_project  # noqa: E402
from tilewright.engine.simulate import simulate  # noqa: E402
from tilewright.studio import app  # noqa: E402
from tilewright.studio.samples import big_wafer_project, wafer_project  # noqa: E402
from tilewright.studio.ui.canvas.overlay_controller import Overlay  # noqa: E402
from tilewright.studio.ui.demo import FPS, LOOP_SECONDS, SLIDER_STEPS  # noqa: E402


@pytest.fixture(scope="module")
def wafer_run():
    project = wafer_project()
    return project, simulate(project)


def test_play_needs_a_run_then_animates_the_shared_cursor(make_window, qtbot, wafer_run):
    project, result = wafer_run
    w = make_window(project)
    demo = w.canvas.demo
    assert not demo.play_button.isEnabled()
    w.actions_.play.trigger()
    assert not demo.playing  # nothing to play yet
    w.canvas.show_result(result)
    assert demo.play_button.isEnabled() and w.time_cursor.span == pytest.approx(demo.span)
    demo.play_button.click()
    assert demo.playing and w.canvas.overlay.mode is Overlay.cursor and w.actions_.play.isChecked()
    qtbot.waitUntil(lambda: w.time_cursor.position > 3 * demo.span / (LOOP_SECONDS * FPS), timeout=3000)
    assert demo.slider.value() > 0 and "of" in demo.time_label.text()
    demo.play_button.click()
    assert not demo.playing and not w.actions_.play.isChecked()
    w.time_cursor.move_to(demo.span)
    demo.step()  # past the end: wraps to the start
    assert w.time_cursor.position == 0.0


def test_scrubbing_moves_the_cursor_and_shows_the_moment(make_window, wafer_run):
    project, result = wafer_run
    w = make_window(project)
    w.canvas.show_result(result)
    demo = w.canvas.demo
    demo.slider.setValue(SLIDER_STEPS // 2)
    assert w.time_cursor.position == pytest.approx(demo.span / 2)
    assert w.canvas.overlay.mode is Overlay.cursor
    assert w.canvas.overlay.time == pytest.approx(demo.span / 2)
    w.time_cursor.move_to(demo.span / 4)  # another view (the Gantt) moves the cursor
    assert demo.slider.value() == SLIDER_STEPS // 4


def test_a_frame_on_a_64_by_64_wafer_is_cheap(make_window):
    project = big_wafer_project(64)
    w = make_window(project)
    w.canvas.show_result(simulate(project))
    demo = w.canvas.demo
    demo.set_mode(Overlay.cursor)
    viewport = w.canvas.view.viewport()
    before = w.time_cursor.position
    for _ in range(20):  # the frame-time bar is benchmarks/bench_wafer_canvas.py's
        demo.step()
        viewport.grab()  # a full render of the frame (repaint() is a no-op for a docked window offscreen)
    assert w.time_cursor.position != before
    tiles = w.canvas.scene.grids["wafer/tile"]
    assert tiles.last_paint[0] == "block"  # far out, the heat is one image, not 4,096 rectangles
    w.canvas.view.zoom_by(8.0)  # closer: heat per tile, drawn for the visible tiles only
    viewport.grab()
    mode, cells = tiles.last_paint
    assert mode == "cells" and 0 < cells < 64 * 64


def test_presentation_mode_locks_editing_and_scales_fonts(make_window):
    w = make_window(wafer_project())
    size = QApplication.font().pointSizeF()
    w.actions_.presentation.trigger()
    try:
        assert w.presenting and w.doc.read_only and QApplication.font().pointSizeF() > size
        assert not w.library.isEnabled() and not w.workload.auto_map.isEnabled()
        assert w.canvas.breadcrumb.hint.isHidden()
        assert w.canvas.demo.isVisible()
    finally:
        w.actions_.presentation.trigger()
    assert not w.presenting and QApplication.font().pointSizeF() == pytest.approx(size)
    assert not w.doc.read_only


def test_presentation_screenshot_from_the_command_line(qapp, tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_SETTINGS", str(tmp_path / "settings.ini"))
    project = tmp_path / "wafer.json"
    save_project(wafer_project(), project)
    png = tmp_path / "present.png"
    size = QApplication.font().pointSizeF()
    code = app.main(Namespace(project=str(project), run=False, screenshot=str(png), size="1200x800",
                              presentation=True))
    assert code == 0
    image = QImage(str(png))
    assert (image.width(), image.height()) == (1200, 800)
    assert QApplication.font().pointSizeF() == pytest.approx(size)  # closing gave the font back
