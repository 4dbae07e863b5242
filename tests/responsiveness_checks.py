"""The 100 ms rule: the event loop never blocks for longer while a run goes on, measured in a process that
is a studio session (one window, its runs), not in a test session holding everything 700 tests left
behind, whose cyclic collections alone take longer than a studio's. tests/test_studio_responsiveness.py
runs this file in a fresh interpreter; it is not collected on its own (no ``test_`` prefix).

What blocks the event loop is this process: the GUI thread's own handlers (computing, or waiting on a
lock, a file, a sleep), or another thread holding the GIL (the engine's worker converting a timeline in
one call, say). Wall-clock gaps between timer ticks also grow with *other* processes' load — on a loaded
2-core CI machine the GUI thread waits for a CPU, or the worker that holds the GIL does — which says
nothing about the studio, and made the suite flaky. So each gap between ticks is measured by what this
process did in it, two ways (Linux's ``/proc/.../schedstat`` gives each thread's time spent ready to run
but without a CPU, its run-queue wait):

- ``worked``: the process's CPU time in the gap, capped by the gap less the GUI thread's own run-queue
  wait. Work that kept the GUI thread from its events (its handlers, or the GIL holder's computation)
  counts in full however loaded the machine is, and a worker computing freely while the GUI thread only
  waited for a core does not. Bound: 100 ms, the rule itself;
- ``stalled``: the wall-clock gap less the run-queue wait of every thread of the process in it
  (whatever waited for a CPU — the GUI thread, or the GIL holder it waited on — is the machine's load).
  On a quiet machine this is the wall-clock gap, so a GUI thread that sleeps or waits on a lock or a
  file counts in full. Bound: 250 ms, since a heavily oversubscribed VM (6 busy processes on 2 cores)
  showed pauses with neither CPU time nor run-queue wait of up to ~80 ms.

A handler or a GIL-holding worker that computes for 120 ms counts 120 ms, loaded or not (checked by
tests/test_studio_responsiveness.py). Without schedstat (not Linux) ``stalled`` is the wall-clock gap and
``worked`` the CPU time in it. ``benchmarks/bench_responsiveness.py``
runs the same checks with the plain wall-clock bound as well (``TILEWRIGHT_WALL_CLOCK=1``)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import QEvent, QObject, QTimer  # noqa: E402
from tilewright.engine.io import load_project  # noqa: E402
from tilewright.studio.ui.main_window import MainWindow  # noqa: E402
from tilewright.studio.workers import PLANNING, PREPARING  # noqa: E402

PALM = "presets/projects/palm-wafer-t18b.json"  # ~1.5 s of event simulation, 50–100k slices
MAX_GAP_S = 0.100  # the studio's own work between two turns of the event loop
# A stall without work (a sleep, a lock, a file) less the machine's load: bounded more loosely, since on a
# heavily oversubscribed VM pauses with neither CPU time nor run-queue wait reached ~80 ms.
MAX_STALL_S = 0.250
WALL_CLOCK = os.environ.get("TILEWRIGHT_WALL_CLOCK") == "1"  # the benchmark's stricter, load-sensitive bound
RUN_TIMEOUT_MS = 120_000  # a loaded machine may take several times the ~2 s these runs need


@pytest.fixture
def open_window(make_window):
    def make(preset: str) -> MainWindow:
        return make_window(load_project(preset), size=(1600, 1000), persist=False)

    return make


def _run_queue_wait(path: str) -> float:
    """Seconds a thread has spent ready to run but waiting for a CPU (0 without Linux's schedstat)."""
    try:
        with open(path, encoding="ascii") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def run_queue_waits() -> tuple[float, float]:
    """(the calling thread's run-queue wait, the sum over every thread of this process), in seconds."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        tids = []
    total = sum(_run_queue_wait(f"/proc/self/task/{tid}/schedstat") for tid in tids)
    return _run_queue_wait("/proc/thread-self/schedstat"), total


class Ticks:
    """A 10 ms timer on the GUI thread recording, at each tick, the wall clock, this process's CPU time,
    the GUI thread's run-queue wait and every thread's; ``stop`` gives the longest gap three ways."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float, float, float]] = []
        self.timer = QTimer()
        self.timer.setInterval(10)
        self.timer.timeout.connect(self._sample)

    @property
    def times(self) -> list[float]:
        return [s[0] for s in self.samples]

    def _sample(self) -> None:
        self.samples.append((time.perf_counter(), time.process_time(), *run_queue_waits(), time.thread_time()))

    def start(self) -> None:
        self.samples = []
        self._sample()
        self.timer.start()

    def stop(self) -> Gaps:
        self.timer.stop()
        worked = stalled = wall = gui = 0.0
        for (w0, c0, g0, a0, t0), (w1, c1, g1, a1, t1) in zip(self.samples, self.samples[1:], strict=False):
            gap = w1 - w0
            wall = max(wall, gap)
            work = min(c1 - c0, gap - (g1 - g0))
            if work > worked:
                worked, gui = work, t1 - t0
            stalled = max(stalled, gap - max(0.0, a1 - a0))  # threads that ended in the gap drop out of the sum
        return Gaps(worked, stalled, wall, gui)


@dataclass(frozen=True)
class Gaps:
    """The longest gap between ticks, three ways (seconds): ``worked``, the CPU work that kept the GUI
    thread from its events; ``stalled``, the wall clock less every thread's run-queue wait; ``wall``."""

    worked: float
    stalled: float
    wall: float
    gui: float = 0.0  # of ``worked``'s gap, the GUI thread's own CPU time (the rest: a worker holding the GIL)


def assert_responsive(ticks: Ticks) -> Gaps:
    gaps = ticks.stop()
    from tilewright.studio import gc_guard

    longest_gc = max((s for _, s in gc_guard.pauses()), default=0.0)
    text = (f"longest gap: {1000 * gaps.worked:.0f} ms of the studio's work ({1000 * gaps.gui:.0f} ms on the GUI "
            f"thread), {1000 * gaps.stalled:.0f} ms stalled, {1000 * gaps.wall:.0f} ms of wall clock; longest "
            f"collection on the GUI thread {1000 * longest_gc:.0f} ms")
    print(text)
    assert gaps.worked < MAX_GAP_S, f"event loop blocked by the studio's own work — {text}"
    assert gaps.stalled < MAX_STALL_S, f"event loop stalled — {text}"
    if WALL_CLOCK:
        assert gaps.wall < MAX_GAP_S, f"event loop blocked (wall clock) — {text}"
    return gaps


def test_gui_never_blocks_during_a_real_run(open_window, qtbot):
    """Timer ticks at 10 ms from the press of Run until the views are filled and painted. The window
    settles first (its consistency check, another Python worker, answered): this measures the run."""
    w = open_window(PALM)
    qtbot.waitUntil(lambda: w.status.is_checked, timeout=60_000)
    qtbot.wait(200)
    phases: list[tuple[float, str]] = []
    w.runner.progress.connect(lambda f, p: phases.append((f, p)))
    ticks = Ticks()
    ticks.start()
    with qtbot.waitSignal(w.runner.done, timeout=RUN_TIMEOUT_MS):
        assert w.run_simulation()
        assert w.results.header.currentWidget() is w.results.progress
    qtbot.wait(400)  # the views fill in and paint after the result arrives: that counts too
    assert len(ticks.times) > 50
    assert_responsive(ticks)
    assert w.runner.last_record is not None, w.runner.last_message
    names = [p for _, p in phases]
    assert names[0] == PLANNING and names[-1] == PREPARING
    fractions = [f for f, p in phases if p not in (PLANNING, PREPARING)]  # the engine's own reports
    assert fractions and fractions == sorted(fractions) and fractions[-1] == 1.0
    assert w.results.header.currentWidget() is w.results.headline
    assert "OUT OF MEMORY" in w.results.headline.text()  # this preset does not fit a tile's SRAM
    assert w.results.tabs.currentWidget() is w.results.gantt
    assert len(w.results.gantt.data) == len(w.runner.last_result.timeline)


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
    """A window built and shown as ``tilewright studio --run`` does: no waiting for it to be exposed. The
    previous test's window, closed at its teardown, is destroyed first: its deferred deletion (25–30 ms on
    a slow machine) would otherwise run in this window's first turn of the event loop and be charged to it."""
    from PySide6.QtCore import QCoreApplication, QEvent, QSettings
    from PySide6.QtWidgets import QMessageBox
    from tilewright.studio.document import ProjectDocument

    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete.value)

    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    window = MainWindow(ProjectDocument(load_project(preset)), settings, persist=False)
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
    with qtbot.waitSignal(w.runner.done, timeout=RUN_TIMEOUT_MS):
        w.show()
        assert w.run_simulation()
        assert w.runner.job is not None and w.results.header.currentWidget() is w.results.progress
    qtbot.wait(400)
    assert_responsive(ticks)
    assert w.runner.last_record is not None, w.runner.last_message
    assert painted.at is not None and worker_started and worker_started[0] > painted.at
    qtbot.waitUntil(lambda: w.status.is_checked, timeout=60_000)  # the checks answered meanwhile, too
