"""Running a simulation from the window: on a worker thread, with progress and a time-left estimate, a
Cancel that really stops the engine, errors shown as messages. That the GUI never freezes while a run
goes on is measured in a fresh process: tests/test_studio_responsiveness.py."""

from __future__ import annotations

import os
import threading
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.errors import InputError, Problem  # noqa: E402
from tilewright.engine.io import load_project  # noqa: E402
from tilewright.engine.simulate import simulate  # noqa: E402
from tilewright.studio.ui.main_window import MainWindow  # noqa: E402
from tilewright.studio.workers import PLANNING, PREPARING  # noqa: E402

from tests.studio_engine_double import FakeEngine  # noqa: E402

PALM = "presets/projects/palm-wafer-t18b.json"  # ~1.5 s of event simulation, 50–100k slices


@pytest.fixture
def open_window(make_window):
    def make(preset: str, simulate=None) -> MainWindow:
        return make_window(load_project(preset), size=(1600, 1000), persist=False, simulate=simulate)

    return make


def test_cancel_really_stops_the_engine(open_window, qtbot):
    w = open_window(PALM)
    with qtbot.waitSignal(w.runner.progress, timeout=20_000, check_params_cb=lambda f, p: p != PLANNING
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


def test_input_error_arrives_as_a_readable_message(open_window, qtbot):
    engine = FakeEngine(errors=[InputError("chiplet.json", Problem("mapping.tp", "must divide 16"))])
    w = open_window("presets/projects/chiplet-bert-large.json", simulate=engine)
    with qtbot.waitSignal(w.runner.done, timeout=5000):
        w.run_simulation()
    assert "The run failed: chiplet.json: mapping.tp: must divide 16" in w.results.text()
    assert "InputError" not in w.results.text()  # its message already says what and where
    assert w.status.run_state.text() == "last run failed: chiplet.json: mapping.tp: must divide 16"
    assert w.actions_.run.isEnabled()


def test_any_exception_is_reported_not_raised(open_window, qtbot):
    engine = FakeEngine(errors=[ZeroDivisionError("division by zero")])
    w = open_window("presets/projects/chiplet-bert-large.json", simulate=engine)
    with qtbot.waitSignal(w.runner.done, timeout=5000):
        w.run_simulation()
    assert "The run failed: ZeroDivisionError: division by zero" in w.results.text()
    with qtbot.waitSignal(w.runner.done, timeout=5000):  # the window still works
        w.run_simulation()
    assert w.runner.last_record is not None and w.runner.last_result is engine.result


def test_progress_and_cancel_with_an_injected_engine(open_window, qtbot):
    """The job protocol end to end with a double that naps in 10 ms steps: fractions reach the strip
    in order, Cancel stops the engine at its next check, and a cancelled run leaves no result."""
    engine = FakeEngine(steps=1000)
    w = open_window("presets/projects/chiplet-bert-large.json", simulate=engine)
    reports: list[tuple[float, str]] = []
    w.runner.progress.connect(lambda f, p: reports.append((f, p)))
    with qtbot.waitSignal(w.runner.progress, timeout=10_000, check_params_cb=lambda f, _p: f >= 0.02):
        w.run_simulation()
    assert reports[0] == (0.0, PLANNING) and all(p == "simulating" for _, p in reports[1:])
    assert [f for f, _ in reports] == sorted(f for f, _ in reports)
    assert w.results.progress.bar.value() == int(1000 * reports[-1][0]) > 0
    job = w.runner.job
    stopped: list[float] = []
    job.signals.stopped.connect(lambda: stopped.append(time.perf_counter()))
    cancelled_at = time.perf_counter()
    w.cancel_run()
    assert w.runner.job is None and w.status.run_state.text() == "run cancelled"
    qtbot.waitUntil(lambda: bool(stopped), timeout=2000)
    assert stopped[0] - cancelled_at < 0.5 and engine.calls[0]["cancel"]() is True
    assert w.runner.last_result is None and w.runner.last_record is None
    engine.steps = 3
    with qtbot.waitSignal(w.runner.done, timeout=5000):  # the next run goes through, to the end
        w.run_simulation()
    assert w.runner.last_result is engine.result and reports[-1] == (1.0, PREPARING)


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


def test_simulation_runs_off_the_gui_thread_with_cancel_and_progress(open_window, qtbot):
    seen: dict[str, object] = {}

    def spy(project, *, progress=None, cancel=None):
        seen.update(thread=threading.current_thread(), progress=progress, cancel=cancel)
        return simulate(project, progress=progress, cancel=cancel)

    w = open_window("presets/projects/chiplet-bert-large.json", simulate=spy)
    with qtbot.waitSignal(w.runner.done, timeout=30_000):
        w.run_simulation()
    assert seen["thread"] is not threading.main_thread()
    assert callable(seen["progress"]) and seen["cancel"]() is False
    assert w.runner.last_record is not None and w.runner.last_result.project == w.doc.project.name


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
