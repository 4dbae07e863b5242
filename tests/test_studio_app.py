"""``tilewright studio``: screenshots of the real window, bad input, and runs on a worker thread."""

from __future__ import annotations

import os
import sys
import threading
import types
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


@pytest.fixture(autouse=True)
def private_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_SETTINGS", str(tmp_path / "settings.ini"))


def args(**kw):
    base = dict(project=None, run=False, screenshot=None, size="1600x1000", presentation=False)
    base.update(kw)
    return Namespace(**base)


class FakeResult:
    iteration_time_s = 0.25
    oom = None

    def metrics_json(self):
        return {"iteration_time_s": 0.25, "tokens_per_s": 131072.0, "mfu": 0.42, "devices": 16,
                "peak_memory_bytes": 5.5e9, "time_breakdown_s": {"compute": 0.2, "bubble": 0.05},
                "memory_breakdown_bytes": {"weights": 1e9}}


@pytest.fixture
def fake_engine(monkeypatch):
    """An ``engine.simulate`` that records the thread it ran on, so tests neither wait for nor depend on
    the real engine (which other work is changing)."""
    seen: dict[str, object] = {}

    def simulate(project):
        seen["thread"] = threading.current_thread()
        seen["project"] = project.name
        return FakeResult()

    module = types.ModuleType("tilewright.engine.simulate")
    module.simulate = simulate
    monkeypatch.setitem(sys.modules, "tilewright.engine.simulate", module)
    return seen


def test_screenshot_writes_png_of_requested_size(qapp, tmp_path):
    project = tmp_path / "wafer.json"
    save_project(wafer_project(), project)
    png = tmp_path / "shots" / "wafer.png"
    assert app.main(args(project=str(project), screenshot=str(png), size="900x640")) == 0
    image = QImage(str(png))
    assert not image.isNull()
    assert (image.width(), image.height()) == (900, 640)
    assert len({image.pixel(x, y) for x in range(0, 900, 37) for y in range(0, 640, 29)}) > 10  # not blank


def test_screenshot_with_run_waits_for_result(qapp, tmp_path, fake_engine):
    project = tmp_path / "dgx.json"
    save_project(dgx_project(), project)
    png = tmp_path / "dgx.png"
    assert app.main(args(project=str(project), screenshot=str(png), run=True, size="1000x700")) == 0
    assert fake_engine["project"] == "gpt-1.3b on 2 × DGX"
    assert fake_engine["thread"] is not threading.main_thread()
    assert QImage(str(png)).size().width() == 1000


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

    monkeypatch.setattr("tilewright.engine.presets.default_project_path", missing)
    project, path, note = app.load_initial_project(None)
    assert path is None and project.hardware.name == "system" and "new project" in note


@pytest.fixture
def window(qtbot, tmp_path):
    w = MainWindow(ProjectDocument(dgx_project()), QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    w.ask_save_changes = lambda: QMessageBox.StandardButton.Discard
    qtbot.addWidget(w)
    w.show()
    return w


def test_run_without_engine_says_so_and_carries_on(window, qtbot, monkeypatch):
    monkeypatch.setitem(sys.modules, "tilewright.engine.simulate", None)  # importing it now raises ImportError
    with qtbot.waitSignal(window.runner.done, timeout=5000):
        assert window.run_simulation()
    assert window.status.run_state.text() == "engine not available yet"
    assert window.actions_.run.isEnabled() and not window.actions_.cancel.isEnabled()


def test_run_reports_result_with_units(window, qtbot, fake_engine):
    with qtbot.waitSignal(window.runner.done, timeout=5000):
        window.run_simulation()
        assert window.actions_.cancel.isEnabled()
    assert fake_engine["thread"] is not threading.main_thread()
    text = window.results.text()
    for expected in ("250 ms", "131 ktokens/s", "42.0 %", "5.12 GiB", "200 ms", "16 devices"):
        assert expected in text
    assert window.status.run_state.text().startswith("last run: 250 ms per iteration")


def test_cancel_forgets_a_slow_run(window, qtbot, monkeypatch):
    release = threading.Event()

    def slow(project):
        release.wait(5)
        return FakeResult()

    module = types.ModuleType("tilewright.engine.simulate")
    module.simulate = slow
    monkeypatch.setitem(sys.modules, "tilewright.engine.simulate", module)
    window.run_simulation()
    assert not window.run_simulation()  # one run at a time
    window.cancel_run()
    assert window.status.run_state.text() == "run cancelled"
    release.set()
    qtbot.wait(200)
    assert window.runner.last_result is None  # the late answer of a cancelled run is ignored
    window.runner.pool.waitForDone(2000)
