"""Running a simulation from the window: on a worker thread, with progress and a time-left estimate, a
Cancel that really stops the engine, errors shown as messages, and a GUI that never freezes."""

from __future__ import annotations

import os
import sys
import threading
import time
import types

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import QEvent, QObject, QTimer  # noqa: E402

from engine.errors import InputError, Problem  # noqa: E402
from engine.io import load_project  # noqa: E402
from studio.ui.main_window import MainWindow  # noqa: E402

PALM = "presets/projects/palm-wafer-t18b.json"  # ~1.5 s of event simulation, 50–100k slices
MAX_GAP_S = 0.100


@pytest.fixture
def open_window(make_window):
    def make(preset: str) -> MainWindow:
        return make_window(load_project(preset, check=False), size=(1600, 1000), persist=False)

    return make


class Ticks:
    """A 10 ms timer recording when it fired: the longest gap is the longest the event loop was blocked."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.timer = QTimer()
        self.timer.setInterval(10)
        self.timer.timeout.connect(lambda: self.times.append(time.perf_counter()))

    def start(self) -> None:
        self.times = [time.perf_counter()]
        self.timer.start()

    def stop(self) -> float:
        self.timer.stop()
        return max((b - a for a, b in zip(self.times, self.times[1:], strict=False)), default=0.0)


def test_gui_never_blocks_during_a_real_run(open_window, qtbot):
    """Timer ticks at 10 ms from the press of Run until the views are filled and painted. The window
    settles first (its consistency check, another Python worker, answered): this measures the run."""
    w = open_window(PALM)
    qtbot.waitUntil(lambda: w.status.is_checked, timeout=10_000)
    qtbot.wait(200)
    phases: list[tuple[float, str]] = []
    w.runner.progress.connect(lambda f, p: phases.append((f, p)))
    ticks = Ticks()
    ticks.start()
    with qtbot.waitSignal(w.runner.done, timeout=30_000):
        assert w.run_simulation()
        assert w.results.header.currentWidget() is w.results.progress
    qtbot.wait(400)  # the views fill in and paint after the result arrives: that counts too
    longest = ticks.stop()
    assert w.runner.last_record is not None, w.runner.last_message
    assert len(ticks.times) > 50
    assert longest < MAX_GAP_S, f"event loop blocked for {1000 * longest:.0f} ms"
    names = [p for _, p in phases]
    assert names[0] == "building the plan" and "simulating" in names and names[-1] == "preparing the views"
    fractions = [f for f, p in phases if p == "simulating"]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert w.results.header.currentWidget() is w.results.headline
    assert "OUT OF MEMORY" in w.results.headline.text()  # this preset does not fit a tile's SRAM
    assert w.results.tabs.currentWidget() is w.results.gantt
    assert len(w.results.gantt.data) == len(w.runner.last_result.timeline)


def test_cancel_really_stops_the_engine(open_window, qtbot):
    w = open_window(PALM)
    with qtbot.waitSignal(w.runner.progress, timeout=20_000, check_params_cb=lambda f, p: p == "simulating"
                          and f > 0):
        w.run_simulation()
    job = w.runner.job
    stopped = []
    job.signals.stopped.connect(lambda: stopped.append(time.perf_counter()))
    cancelled_at = time.perf_counter()
    w.results.progress.cancel_button.click()
    assert w.runner.job is None and w.status.run_state.text() == "run cancelled"
    assert w.actions_.run.isEnabled()
    qtbot.waitUntil(lambda: job.ended_at is not None, timeout=5000)
    qtbot.waitUntil(lambda: bool(stopped), timeout=2000)
    assert stopped[0] - cancelled_at < 1.0  # the engine polled the flag and quit; it did not run on
    assert w.runner.last_result is None
    with qtbot.waitSignal(w.runner.done, timeout=30_000):  # and the next run starts cleanly
        assert w.run_simulation()
    assert w.runner.last_record is not None


def _engine_raising(monkeypatch, exc: Exception) -> None:
    module = types.ModuleType("engine.simulate")

    def simulate(project, plan=None, *, progress=None, cancel=None):
        raise exc

    module.simulate = simulate
    module.make_plan = lambda project: None
    monkeypatch.setitem(sys.modules, "engine.simulate", module)


def test_input_error_arrives_as_a_readable_message(open_window, qtbot, monkeypatch):
    w = open_window("presets/projects/chiplet-bert-large.json")
    _engine_raising(monkeypatch, InputError("chiplet.json", Problem("mapping.tp", "must divide 16")))
    with qtbot.waitSignal(w.runner.done, timeout=5000):
        w.run_simulation()
    assert "The run failed: chiplet.json: mapping.tp: must divide 16" in w.results.text()
    assert "InputError" not in w.results.text()  # its message already says what and where
    assert w.status.run_state.text() == "last run failed: chiplet.json: mapping.tp: must divide 16"
    assert w.actions_.run.isEnabled()


def test_any_exception_is_reported_not_raised(open_window, qtbot, monkeypatch):
    w = open_window("presets/projects/chiplet-bert-large.json")
    _engine_raising(monkeypatch, ZeroDivisionError("division by zero"))
    with qtbot.waitSignal(w.runner.done, timeout=5000):
        w.run_simulation()
    assert "The run failed: ZeroDivisionError: division by zero" in w.results.text()
    monkeypatch.undo()
    with qtbot.waitSignal(w.runner.done, timeout=30_000):  # the window still works
        w.run_simulation()
    assert w.runner.last_record is not None


def test_progress_strip_estimates_time_left(open_window, qtbot):
    w = open_window("presets/projects/chiplet-bert-large.json")
    strip = w.results.progress
    strip.start()
    strip.sim_started_at = time.monotonic() - 3.0  # three seconds into the simulation phase
    strip.update_progress(0.25, "simulating")
    assert strip.bar.value() == 250 and strip.bar.format() == "25 %"
    assert strip.eta.text() == "about 9 s left"
    strip.update_progress(0.0, "preparing the views")
    assert strip.phase.text() == "Preparing the views…" and strip.eta.text().endswith("so far")


def test_simulation_runs_off_the_gui_thread_with_cancel_and_progress(open_window, qtbot, monkeypatch):
    seen: dict[str, object] = {}
    import engine.simulate as real

    def spy(project, plan=None, *, progress=None, cancel=None):
        seen.update(thread=threading.current_thread(), progress=progress, cancel=cancel, plan=plan)
        return real.simulate(project, plan, progress=progress, cancel=cancel)

    module = types.ModuleType("engine.simulate")
    module.simulate, module.make_plan = spy, real.make_plan
    monkeypatch.setitem(sys.modules, "engine.simulate", module)
    w = open_window("presets/projects/chiplet-bert-large.json")
    with qtbot.waitSignal(w.runner.done, timeout=30_000):
        w.run_simulation()
    assert seen["thread"] is not threading.main_thread()
    assert seen["plan"] is not None and callable(seen["progress"]) and seen["cancel"]() is False


class FirstPaint(QObject):
    """Records when ``window`` first paints."""

    def __init__(self, window: MainWindow):
        super().__init__(window)
        self.at: float | None = None
        window.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.Paint and self.at is None:
            self.at = time.perf_counter()
        return False


def _shown_at_once(qtbot, tmp_path, preset: str) -> MainWindow:
    """A window built and shown as ``tilewright studio --run`` does: no waiting for it to be exposed."""
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QMessageBox

    from studio.document import ProjectDocument

    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    window = MainWindow(ProjectDocument(load_project(preset, check=False)), settings, persist=False)
    window.ask_save_changes = lambda: QMessageBox.StandardButton.Discard
    qtbot.addWidget(window)
    window.resize(1600, 1000)
    return window


def test_run_pressed_as_the_window_opens_never_blocks(qtbot, tmp_path):
    """Run in the same instant as ``show()``: the first paint, the activation and the consistency check
    all happen while the run starts. The worker waits for the window to paint, so the event loop never
    stalls (it did for 100–190 ms when the engine competed with the first paint for the GIL)."""
    w = _shown_at_once(qtbot, tmp_path, PALM)
    painted = FirstPaint(w)
    worker_started: list[float] = []
    w.runner.progress.connect(lambda _f, _p: worker_started.append(time.perf_counter()))
    ticks = Ticks()
    ticks.start()
    with qtbot.waitSignal(w.runner.done, timeout=30_000):
        w.show()
        assert w.run_simulation()
        assert w.runner.job is not None and w.results.header.currentWidget() is w.results.progress
    qtbot.wait(400)
    longest = ticks.stop()
    assert w.runner.last_record is not None, w.runner.last_message
    assert longest < MAX_GAP_S, f"event loop blocked for {1000 * longest:.0f} ms"
    assert painted.at is not None and worker_started and worker_started[0] > painted.at
    qtbot.waitUntil(lambda: w.status.is_checked, timeout=10_000)  # the checks answered meanwhile, too


def test_a_run_cancelled_before_its_worker_started_never_runs(open_window, qtbot):
    w = open_window("presets/projects/chiplet-bert-large.json")
    qtbot.wait(100)
    assert w.run_simulation()
    job = w.runner.job
    reports: list[str] = []
    job.signals.progress.connect(lambda _f, phase: reports.append(phase))
    w.cancel_run()  # the window has not repainted yet: the worker was still held back
    assert w.runner.job is None
    qtbot.waitUntil(lambda: job.ended_at is not None, timeout=2000)  # the gate opened and let it go
    qtbot.wait(100)
    assert reports == [] and w.runner.last_result is None and w.runner.last_record is None
    with qtbot.waitSignal(w.runner.done, timeout=30_000):  # the next run goes through
        assert w.run_simulation()
    assert w.runner.last_record is not None
