"""Frame times of the Gantt and the canvas while a large run computes (issue 13: "Gantt lane scrolling
and canvas frames under 30 ms while a large run computes").

The studio's main window opens on palm-wafer-t18b with every device simulated (``run.aggregate`` off:
~400k events, a few seconds on one core) and runs it once, so the Timeline holds a large result with
many lanes. Then it runs the project again from the Run action's entry (``MainWindow.run_simulation``:
a worker on Qt's pool, fast GIL switching, the GUI-thread collector) and, every ``TICK_MS`` of the event
loop until the run is done, draws frames on the GUI thread:

- ``gantt scroll``: a shift+wheel notch on the Gantt's plot (a real ``QWheelEvent`` through the view,
  the scene and the view box: three lanes) and a synchronous repaint of the plot's viewport;
- ``gantt refill``: the level-of-detail pass the Gantt runs ``REFRESH_MS`` after the view stops moving
  (``refresh_bars``) and the repaint that shows it;
- ``canvas``: a small pan or zoom of the canvas (``pan_by``/``zoom_by``, as a drag or a wheel notch)
  and a synchronous repaint of its viewport.

Each frame is timed by the wall clock (``perf_counter``) and by the GUI thread's CPU time
(``thread_time``). Wall time includes waiting for the GIL held by the engine's worker and, on a loaded
machine, for a CPU; CPU time is the studio's own work on the GUI thread; ``gil? max`` is the longest
wait in a frame that was neither CPU time nor a wait for a CPU (Linux schedstat): the GIL, mostly.
Verdicts against ``TARGET_MS``: p95 of wall time and the maximum of CPU time. The same frames with no
run going give a baseline.

Prints PASS/FAIL lines and exits 0 (``make bench`` stops at the first non-zero exit); exit 1 only if the
benchmark itself breaks (the window or a run fails).
Run: ``QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/bench_frames.py [--runs N] [--profile]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

TARGET_MS = 30.0
TICK_MS = 50  # one frame of each kind per tick of the event loop
BASELINE_S = 3.0
PRESET = "palm-wafer-t18b"
RUN_TIMEOUT_S = 180.0
KINDS = ("gantt scroll", "gantt refill", "canvas")


def run_queue_wait() -> float:
    """Seconds the calling thread has waited for a CPU while ready to run (Linux schedstat; else 0)."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


class Frames:
    """Per kind, (wall ms, GUI-thread CPU ms, other wait ms) of each frame drawn. The other wait is the wall
    time neither on a CPU nor waiting for one: waiting for the GIL, mostly (the engine's worker holds it)."""

    def __init__(self) -> None:
        self.samples: dict[str, list[tuple[float, float, float]]] = {k: [] for k in KINDS}
        self.slow: Counter[str] = Counter()  # frames over the target (wall clock), by the run's phase

    def time(self, kind: str, fn: Callable[[], None], phase: str = "no run") -> None:
        w0, c0, q0 = time.perf_counter(), time.thread_time(), run_queue_wait()
        fn()
        wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
        other = max(0.0, wall - cpu - (run_queue_wait() - q0))
        self.samples[kind].append((1000 * wall, 1000 * cpu, 1000 * other))
        if 1000 * wall >= TARGET_MS:
            self.slow[phase] += 1


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def report(title: str, frames: Frames) -> None:
    print(f"-- {title}")
    print(f"   {'kind':<13} {'n':>4}   {'wall median':>11} {'p95':>7} {'max':>7}   "
          f"{'cpu median':>10} {'p95':>7} {'max':>7}   {'gil? max':>8}   "
          f"verdict (p95 wall, max cpu < {TARGET_MS:.0f} ms)")
    for kind, samples in frames.samples.items():
        if not samples:
            print(f"   {kind:<13} {0:>4}   no frames measured")
            continue
        wall, cpu, other = [s[0] for s in samples], [s[1] for s in samples], [s[2] for s in samples]
        p95_wall, max_cpu = percentile(wall, 0.95), max(cpu)
        verdict = (f"{'PASS' if p95_wall < TARGET_MS else 'FAIL'} wall p95, "
                   f"{'PASS' if max_cpu < TARGET_MS else 'FAIL'} cpu max")
        print(f"   {kind:<13} {len(samples):>4}   {statistics.median(wall):11.1f} {p95_wall:7.1f} {max(wall):7.1f}   "
              f"{statistics.median(cpu):10.1f} {percentile(cpu, 0.95):7.1f} {max_cpu:7.1f}   "
              f"{max(other):8.1f}   {verdict}")
    if frames.slow:
        print(f"   frames over {TARGET_MS:.0f} ms of wall clock, by the run's phase: "
              + ", ".join(f"{phase} {n}" for phase, n in frames.slow.most_common()))


def wait_until(app, condition: Callable[[], bool], timeout_s: float) -> bool:  # noqa: ANN001
    end = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > end:
            return False
        app.processEvents()
        time.sleep(0.005)
    return True


class Driver:
    """Draws one frame of each kind per tick; alternates directions so the views stay in range."""

    def __init__(self, window, frames: Frames) -> None:  # noqa: ANN001
        self.window, self.frames, self.n = window, frames, 0
        self.phase = "no run"  # what the run was doing (its progress reports), for the slow frames
        window.runner.started.connect(lambda: setattr(self, "phase", "held back or starting"))
        window.runner.progress.connect(lambda _f, text: setattr(self, "phase", text or self.phase))
        window.runner.done.connect(lambda: setattr(self, "phase", "no run"))
        self.gantt = window.results.gantt
        self.canvas = window.canvas.view

    def tick(self) -> None:
        self.n += 1
        self.frames.time("gantt scroll", self._scroll_gantt, self.phase)
        self.frames.time("gantt refill", self._refill_gantt, self.phase)
        self.frames.time("canvas", self._move_canvas, self.phase)

    def _scroll_gantt(self) -> None:
        from PySide6.QtCore import QPoint, QPointF, Qt
        from PySide6.QtGui import QWheelEvent
        from PySide6.QtWidgets import QApplication

        viewport = self.gantt.plot_widget.viewport()
        rows = len(self.gantt.data.rows) if self.gantt.data is not None else 0
        down = (self.n // max(1, rows // 3 - 8)) % 2 == 0  # to the bottom, then back up
        centre = self.gantt.plot_widget.mapFromScene(self.gantt.viewbox.sceneBoundingRect().center())
        pos = QPointF(centre)
        delta = QPoint(0, -120 if down else 120)
        event = QWheelEvent(pos, QPointF(viewport.mapToGlobal(centre)), QPoint(0, 0), delta,
                            Qt.MouseButton.NoButton, Qt.KeyboardModifier.ShiftModifier,
                            Qt.ScrollPhase.NoScrollPhase, False)
        QApplication.sendEvent(viewport, event)
        viewport.repaint()

    def _refill_gantt(self) -> None:
        self.gantt._timer.stop()  # noqa: SLF001 - the pass its timer would run, timed here instead
        self.gantt.refresh_bars()
        self.gantt.plot_widget.viewport().repaint()

    def _move_canvas(self) -> None:
        step = self.n % 8
        if step in (0, 1):
            self.canvas.pan_by(24, 12)
        elif step in (2, 3):
            self.canvas.pan_by(-24, -12)
        elif step in (4, 5):
            self.canvas.zoom_by(1.1)
        else:
            self.canvas.zoom_by(1 / 1.1)
        self.canvas.viewport().repaint()


def open_window(app, tmp: Path):  # noqa: ANN001, ANN201
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QMessageBox
    from tilewright.engine.io.presets import load_project_preset
    from tilewright.studio.document import ProjectDocument
    from tilewright.studio.ui.main_window import MainWindow

    project = load_project_preset(PRESET)
    project = project.model_copy(update={"run": project.run.model_copy(update={"aggregate": False})})
    settings = QSettings(str(tmp / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(ProjectDocument(project), settings, persist=False)
    window.ask_save_changes = lambda: QMessageBox.StandardButton.Discard
    window.set_allow_large(True)  # every device simulated is past the estimate's limits: no question asked
    window.resize(1600, 1000)
    window.show()
    wait_until(app, lambda: window.status.is_checked, 60)
    return window


def run_once(app, window, driver: Driver | None) -> float:  # noqa: ANN001
    """Press Run; draw frames every ``TICK_MS`` until the run is done (when ``driver``). Seconds it took."""
    from PySide6.QtCore import QTimer

    done: list[bool] = []
    window.runner.done.connect(lambda: done.append(True))
    timer = QTimer()
    timer.setInterval(TICK_MS)
    if driver is not None:
        timer.timeout.connect(driver.tick)
    start = time.perf_counter()
    if not window.run_simulation():
        raise RuntimeError("the run did not start")
    timer.start()
    finished = wait_until(app, lambda: bool(done), RUN_TIMEOUT_S)
    timer.stop()
    seconds = time.perf_counter() - start
    if not finished:
        raise RuntimeError("the run did not end in time")
    if window.runner.last_record is None:
        raise RuntimeError(f"the run failed: {window.runner.last_message}")
    return seconds


def baseline(app, driver: Driver) -> None:  # noqa: ANN001
    from PySide6.QtCore import QTimer

    timer = QTimer()
    timer.setInterval(TICK_MS)
    timer.timeout.connect(driver.tick)
    timer.start()
    end = time.monotonic() + BASELINE_S
    wait_until(app, lambda: time.monotonic() > end, BASELINE_S + 5)
    timer.stop()


def settle(app, window) -> None:  # noqa: ANN001
    """The views fill in after a result; then the collector's full pass: wait them out."""
    end = time.monotonic() + 1.0
    wait_until(app, lambda: time.monotonic() > end, 5)
    window.results.flush()
    app.processEvents()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="measured runs (each a few seconds)")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the GUI thread's frames during the runs")
    args = parser.parse_args()

    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([sys.argv[0]])
    with tempfile.TemporaryDirectory() as tmp:
        window = open_window(app, Path(tmp))
        try:
            first = run_once(app, window, None)
            settle(app, window)
            gantt = window.results.gantt
            data = gantt.data
            lanes = sum(not r.is_header for r in data.rows) if data is not None else 0
            print(f"{PRESET}, every device simulated: {first:.1f} s to run; Timeline {len(data or ()):,} slices, "
                  f"{lanes} lanes; canvas: {len(window.canvas.scene.items())} items; "
                  f"target {TARGET_MS:.0f} ms per frame; one frame of each kind every {TICK_MS} ms")

            frames = Frames()
            driver = Driver(window, frames)
            baseline(app, driver)
            report(f"no run going ({BASELINE_S:.0f} s)", frames)

            frames = Frames()
            driver.frames = frames
            profiler = None
            if args.profile:
                import cProfile

                profiler = cProfile.Profile()
                original = driver.tick

                def profiled() -> None:
                    profiler.runcall(original)

                driver.tick = profiled  # type: ignore[method-assign]
            took = []
            for _ in range(max(1, args.runs)):
                took.append(run_once(app, window, driver))
                settle(app, window)
            report(f"while {PRESET} computes ({len(took)} runs: "
                   f"{', '.join(f'{s:.1f}' for s in took)} s; wall includes GIL and CPU waits)", frames)
            if profiler is not None:
                profiler.dump_stats(args.profile)
                print(f"profile of the frames: {args.profile}")
        except RuntimeError as exc:
            print(f"benchmark broken: {exc}")
            return 1
        finally:
            window.doc.undo_stack.setClean()
            window.close()
            from PySide6.QtCore import QThreadPool

            QThreadPool.globalInstance().waitForDone(10_000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
