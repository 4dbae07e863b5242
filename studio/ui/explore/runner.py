"""Run an exploration (search, sweep) on the thread pool, with progress and a cancel that really stops it.

The exploration follows the job protocol every long task does (``tilewright.engine.jobs``): the ``Job``
passes it ``progress(fraction, text)`` and ``cancel() -> bool`` as keyword arguments, and it raises
``Cancelled`` between candidates or points once cancelled — as the simulation does between events.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal
from tilewright.studio.workers import Job, Relay, start


class ExploreRunner(QObject):
    progress = Signal(float, str)  # fraction 0–1, what it is doing
    finished = Signal(object, float)
    failed = Signal(str)
    stopped = Signal()  # cancelled, and the worker has stopped
    runningChanged = Signal(bool)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.job: Job | None = None

    @property
    def running(self) -> bool:
        return self.job is not None

    def run(self, fn: Callable[..., Any]) -> None:
        """``fn(progress=…, cancel=…)`` runs on a worker (bind its other arguments with ``functools.partial``)."""
        if self.job is not None:
            return
        job = self.job = Job(fn)
        Relay(self, job, self._done, self._failed, self.progress.emit, self._stopped)
        self.runningChanged.emit(True)
        start(job)

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()

    def _done(self, result: Any, seconds: float) -> None:
        self.job = None
        self.runningChanged.emit(False)
        self.finished.emit(result, seconds)

    def _failed(self, message: str) -> None:
        self.job = None
        self.runningChanged.emit(False)
        self.failed.emit(message)

    def _stopped(self) -> None:
        self.job = None
        self.runningChanged.emit(False)
        self.stopped.emit()
