"""``tilewright studio``: screenshots of the real window, bad input, and runs on a worker thread."""

from __future__ import annotations

import os
import re
import threading
from argparse import Namespace

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtGui import QImage  # noqa: E402
from PySide6.QtWidgets import QMessageBox  # noqa: E402
from tilewright.engine.io import save_project  # noqa: E402
from tilewright.studio import app  # noqa: E402
from tilewright.studio.document import ProjectDocument  # noqa: E402
from tilewright.studio.samples import dgx_project, wafer_project  # noqa: E402
from tilewright.studio.ui.main_window import MainWindow  # noqa: E402

from tests.studio_engine_double import FakeEngine  # noqa: E402


@pytest.fixture(autouse=True)
def private_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_SETTINGS", str(tmp_path / "settings.ini"))


def args(**kw):
    base = dict(project=None, run=False, screenshot=None, size="1600x1000", presentation=False)
    base.update(kw)
    return Namespace(**base)


@pytest.fixture
def engine():
    """The engine the windows here run: a double, so tests neither wait for nor depend on the real one."""
    return FakeEngine()


def test_screenshot_writes_png_of_requested_size(qapp, tmp_path):
    project = tmp_path / "wafer.json"
    save_project(wafer_project(), project)
    png = tmp_path / "shots" / "wafer.png"
    assert app.main(args(project=str(project), screenshot=str(png), size="900x640")) == 0
    image = QImage(str(png))
    assert not image.isNull()
    assert (image.width(), image.height()) == (900, 640)
    assert len({image.pixel(x, y) for x in range(0, 900, 37) for y in range(0, 640, 29)}) > 10  # not blank


def test_screenshot_with_run_waits_for_result(qapp, tmp_path, engine):
    project = tmp_path / "dgx.json"
    save_project(dgx_project(), project)
    png = tmp_path / "dgx.png"
    engine.steps = 20  # 0.2 s: the screenshot must wait for it
    assert app.main(args(project=str(project), screenshot=str(png), run=True, size="1000x700"), simulate=engine) == 0
    assert [c["project"] for c in engine.calls] == ["gpt-1.3b on 2 × DGX"]
    assert engine.calls[0]["thread"] is not threading.main_thread()
    assert QImage(str(png)).size().width() == 1000


def test_screenshot_with_run_shows_every_view_filled(qapp, tmp_path, engine, monkeypatch):
    """A finished run fills the results views in later event-loop turns (``ResultsPanel.show_record``): the image
    must be grabbed once they are filled, not show "No timeline yet" beside the run's headline."""
    from tilewright.studio import exporting

    project = tmp_path / "dgx.json"
    save_project(dgx_project(), project)
    windows, filled = [], []
    take = app.take_screenshot
    monkeypatch.setattr(app, "take_screenshot",
                        lambda window, *a, **kw: windows.append(window) or take(window, *a, **kw))
    write = exporting.write_image

    def write_checked(pixmap, path):
        filled.append(windows[0].results.memory.result is not None)
        return write(pixmap, path)

    monkeypatch.setattr(exporting, "write_image", write_checked)
    engine.steps = 30  # 0.3 s: the project's checks are over before the run is, so nothing else waits after it
    assert app.main(args(project=str(project), screenshot=str(tmp_path / "x.png"), run=True, size="1000x700"),
                    simulate=engine) == 0
    assert len(engine.calls) == 1 and filled == [True]


def test_bad_project_exits_2_with_message(qapp, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"hardware": {"name": "x", "kind": "chip"}}')
    assert app.main(args(project=str(bad), screenshot=str(tmp_path / "x.png"))) == 2
    err = capsys.readouterr().err
    assert "bad.json" in err and "workload" in err
    assert not (tmp_path / "x.png").exists()


def test_bad_size_exits_2(qapp, tmp_path, capsys):
    assert app.main(args(screenshot=str(tmp_path / "x.png"), size="huge")) == 2
    assert "--size" in capsys.readouterr().err


def test_no_project_opens_default_or_new(qapp, monkeypatch):
    from tilewright.engine.errors import InputError

    def missing():
        raise InputError("gpt3-dgx-a100", "no project preset of that name")

    monkeypatch.setattr("tilewright.engine.io.presets.default_project_path", missing)
    project, path, note = app.load_initial_project(None)
    assert path is None and project.hardware.name == "system" and "new project" in note


@pytest.fixture
def window(qtbot, tmp_path, engine):
    w = MainWindow(ProjectDocument(dgx_project()), QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                   simulate=engine)
    w.ask_save_changes = lambda: QMessageBox.StandardButton.Discard
    qtbot.addWidget(w)
    w.show()
    return w


def test_run_reports_result_with_units(window, qtbot, engine):
    with qtbot.waitSignal(window.runner.done, timeout=5000):
        window.run_simulation()
        assert window.actions_.cancel.isEnabled()
    assert engine.calls[0]["thread"] is not threading.main_thread()
    text = window.results.text()
    for expected in ("250 ms", "131 ktokens/s", "42.0 %", "5.12 GiB", "200 ms", "16 devices"):
        assert expected in text
    assert window.status.run_state.text().startswith("last run: 250 ms per iteration")
    assert window.runner.last_result is engine.result and window.runner.last_record.result is engine.result


def test_cancel_forgets_a_slow_run(window, qtbot, engine):
    engine.release = threading.Event()  # the engine answers only when released, cancelled or not
    window.run_simulation()
    assert not window.run_simulation()  # one run at a time
    qtbot.waitUntil(lambda: bool(engine.calls), timeout=5000)
    job = window.runner.job
    window.cancel_run()
    assert window.status.run_state.text() == "run cancelled"
    assert window.actions_.run.isEnabled()
    engine.release.set()
    qtbot.waitUntil(lambda: job.ended_at is not None, timeout=5000)
    qtbot.wait(100)
    assert window.runner.last_result is None  # the late answer of a cancelled run is ignored
    assert window.status.run_state.text() == "run cancelled"
    window.runner.pool.waitForDone(2000)


@pytest.mark.parametrize("suffix, magic", [(".jpg", b"\xff\xd8\xff"), (".jpeg", b"\xff\xd8\xff"), (".bmp", b"BM"),
                                           (".png", b"\x89PNG\r\n\x1a\n")])
def test_screenshot_is_saved_in_the_format_its_suffix_names(qapp, tmp_path, suffix, magic):
    """``x.jpg`` held PNG bytes: a viewer trusting the suffix refused it."""
    project = tmp_path / "wafer.json"
    save_project(wafer_project(), project)
    shot = tmp_path / f"wafer{suffix}"
    assert app.main(args(project=str(project), screenshot=str(shot), size="900x640")) == 0
    assert shot.read_bytes().startswith(magic)
    image = QImage(str(shot))
    assert (image.width(), image.height()) == (900, 640)


def test_screenshot_with_a_suffix_qt_cannot_write_is_refused_before_the_window_opens(qapp, tmp_path, capsys):
    shot = tmp_path / "wafer.gif"
    assert app.main(args(project=None, screenshot=str(shot), size="640x480")) == 2
    err = capsys.readouterr().err
    assert "--screenshot" in err and "'.gif'" in err and "png" in err
    assert not shot.exists()


def test_size_below_the_window_minimum_is_refused_naming_it(qapp, tmp_path, capsys):
    """``--size 400x300`` gave an 897 × 601 image, a warning and exit 0: Qt grows a window to its minimum."""
    project = tmp_path / "wafer.json"
    save_project(wafer_project(), project)
    shot = tmp_path / "small.png"
    assert app.main(args(project=str(project), screenshot=str(shot), size="400x300")) == 2
    err = capsys.readouterr().err
    match = re.search(r"--size: 400x300 is smaller than the window's minimum of (\d+)x(\d+)", err)
    assert match, err
    low = (int(match.group(1)), int(match.group(2)))
    assert low[0] > 400 or low[1] > 300
    assert not shot.exists()
    # the named minimum itself is honoured: the image comes out exactly that size
    assert app.main(args(project=str(project), screenshot=str(shot), size=f"{low[0]}x{low[1]}")) == 0
    assert QImage(str(shot)).size().toTuple() == low
