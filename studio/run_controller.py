"""Runs of the simulator, one at a time, on a worker thread.

The controller owns the current ``Job``, forwards its outcome as signals the window and the result
views connect to, and forgets a cancelled job's late answer. ``done`` fires after every outcome, so a
script (``--run --screenshot``) can wait for "the run is over", whatever happened.
"""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import QObject, QThreadPool, Signal

from studio.units import SECONDS, format_value
from studio.workers import Job, Relay, simulation_job, start


class RunController(QObject):
    started = Signal()
    finished = Signal(object, float)  # result, wall seconds
    failed = Signal(str)
    unavailable = Signal(str)
    cancelled = Signal()
    progress = Signal(float, str)
    done = Signal()
    runningChanged = Signal(bool)

    def __init__(self, pool: QThreadPool | None = None, parent: QObject | None = None):
        super().__init__(parent)
        self.pool = pool or QThreadPool.globalInstance()
        self.job: Job | None = None
        self.last_result: Any = None
        self.last_message = "no run yet"
        self.started_at = 0.0

    @property
    def running(self) -> bool:
        return self.job is not None

    def run(self, project: Any) -> bool:
        """Start simulating ``project`` (an immutable snapshot); refuses while a run is going."""
        if self.job is not None:
            return False
        job = simulation_job(project)
        Relay(
            self,
            job,
            finished=lambda r, s: self._finished(job, r, s),
            failed=lambda m: self._failed(job, m),
            unavailable=lambda m: self._unavailable(job, m),
            progress=lambda f, t: self._progress(job, f, t),
        )
        self.job = job
        self.started_at = time.monotonic()
        self.started.emit()
        self.runningChanged.emit(True)
        start(job, self.pool)
        return True

    def cancel(self) -> None:
        if self.job is None:
            return
        self.job.cancel()
        self.job = None
        self.last_message = "run cancelled"
        self.cancelled.emit()
        self._end()

    def _current(self, job: Job) -> bool:
        return job is self.job

    def _finished(self, job: Job, result: Any, seconds: float) -> None:
        if not self._current(job):
            return
        self.job = None
        self.last_result = result
        per_iteration = getattr(result, "iteration_time_s", None)
        if isinstance(per_iteration, int | float):
            self.last_message = (
                f"last run: {format_value(per_iteration, SECONDS)} per iteration ({seconds:.2f} s to simulate)"
            )
        else:
            self.last_message = f"last run: finished in {seconds:.2f} s"
        if getattr(result, "oom", None) is not None:
            self.last_message += " · OUT OF MEMORY"
        self.finished.emit(result, seconds)
        self._end()

    def _failed(self, job: Job, message: str) -> None:
        if not self._current(job):
            return
        self.job = None
        self.last_message = f"last run failed: {message}"
        self.failed.emit(message)
        self._end()

    def _unavailable(self, job: Job, message: str) -> None:
        if not self._current(job):
            return
        self.job = None
        self.last_message = message
        self.unavailable.emit(message)
        self._end()

    def _progress(self, job: Job, fraction: float, text: str) -> None:
        if self._current(job):
            self.progress.emit(fraction, text)

    def _end(self) -> None:
        self.runningChanged.emit(False)
        self.done.emit()
