"""Run an exploration function on the thread pool with progress text and a cancel that really stops it.

Search and sweep report progress as text through a callback; raising from that callback is how a
cancel reaches them between candidates or points (they need no cancel parameter of their own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal
from tilewright.engine.jobs import Cancelled
from tilewright.studio.workers import Job, Relay, start


class ExploreRunner(QObject):
    progress = Signal(str)
    finished = Signal(object, float)
    failed = Signal(str)
    runningChanged = Signal(bool)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.job: Job | None = None

    @property
    def running(self) -> bool:
        return self.job is not None

    def run(self, fn: Callable[[Callable[[str], None]], Any]) -> None:
        """``fn(say)`` runs on a worker; ``say(text)`` reports progress (and stops it when cancelled)."""
        if self.job is not None:
            return
        holder: dict[str, Job] = {}

        def say(text: str) -> None:
            job = holder["job"]
            if job.cancelled.is_set():
                raise Cancelled("exploration cancelled")
            job.signals.progress.emit(0.0, text)

        job = Job(lambda: fn(say))
        holder["job"] = job
        self.job = job
        Relay(self, job, self._done, self._failed, self._failed, lambda _f, text: self.progress.emit(text))
        job.signals.stopped.connect(self._stopped)
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
        self.progress.emit("cancelled")
