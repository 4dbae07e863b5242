"""What every one-at-a-time background job of the studio shares (a simulation run, a serving run).

The controller owns the current ``Job`` and forwards its outcome as signals; a cancelled job's late answer
is forgotten; ``done`` fires after every outcome. While a job goes the interpreter switches threads every
0.1 ms (``workers.fast_switching``; see ``studio.run_controller`` for why). Subclasses say how a job is
made and started, what a finished one leaves behind, and the words of their status messages.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from tilewright.studio.workers import Job, Relay, fast_switching


class JobController(QObject):
    started = Signal()
    progress = Signal(float, str)  # fraction 0–1, what the job is doing
    failed = Signal(str)
    cancelled = Signal()
    done = Signal()  # after every outcome (finished, failed, cancelled)
    runningChanged = Signal(bool)

    CANCELLED_TEXT = "run cancelled"
    FAILED_PREFIX = "last run failed"

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.job: Job | None = None
        self.last_message = ""
        self._fast = False

    @property
    def running(self) -> bool:
        return self.job is not None

    def _begin(self, job: Job) -> None:
        """Make ``job`` the current one: relay its outcome here, switch threads fast, say it started."""
        Relay(
            self,
            job,
            finished=lambda value, seconds: self._on_finished(job, value, seconds),
            failed=lambda message: self._failed(job, message),
            progress=lambda fraction, text: self._progress(job, fraction, text),
        )
        self.job = job
        if not self._fast:
            self._fast = True
            fast_switching(True)
        self.started.emit()
        self.runningChanged.emit(True)

    def cancel(self) -> None:
        if self.job is None:
            return
        self.job.cancel()
        self.job = None
        self.last_message = self.CANCELLED_TEXT
        self.cancelled.emit()
        self._end()

    def _on_finished(self, job: Job, value: object, seconds: float) -> None:
        if job is not self.job:
            return
        self.job = None
        self._finished(value, seconds)
        self._end()

    def _finished(self, value: object, seconds: float) -> None:
        """A job's answer arrived: keep it, set ``last_message``, emit the subclass's ``finished``."""
        raise NotImplementedError

    def _failed(self, job: Job, message: str) -> None:
        if job is not self.job:
            return
        self.job = None
        self.last_message = self.failed_message(message)
        self.failed.emit(message)
        self._end()

    def failed_message(self, message: str) -> str:
        """The status line of a failed job (its first line: the status bar is one line high)."""
        return f"{self.FAILED_PREFIX}: {message.splitlines()[0] if message else ''}"

    def _progress(self, job: Job, fraction: float, text: str) -> None:
        if job is self.job:
            self.progress.emit(fraction, text)

    def _end(self) -> None:
        if self._fast:
            self._fast = False
            fast_switching(False)
        self.runningChanged.emit(False)
        self.done.emit()
