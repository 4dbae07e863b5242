"""Runs of the simulator, one at a time, on a worker thread.

The controller owns the current ``Job``, forwards its outcome as signals the window and the result
views connect to, and forgets a cancelled job's late answer. ``done`` fires after every outcome, so a
script (``--run --screenshot``) can wait for "the run is over", whatever happened.

The engine is injected: ``RunController(simulate=…)`` takes any function with the signature of
``tilewright.engine.simulate.simulate`` (``simulate(project, *, progress, cancel) -> Result``, the job
protocol of ``tilewright.engine.jobs``), and uses that one when none is given. Tests pass doubles.

Cancel sets the job's flag, which the engine polls every couple of thousand events, so the worker
thread really stops (it does not run on unseen); the controller does not wait for that and is ready
for the next run at once.

While a run goes, the interpreter switches threads every 0.1 ms instead of 5 ms. The engine is pure
Python and holds the GIL; the GUI thread needs it back for every Python paint and slot call, and at the
default interval a repaint of the window with many Python-drawn items waited up to 5 ms per item (a
first paint during a palm-wafer run froze the window 0.9 s; 0.1 s at 0.1 ms), with no measurable cost
to the engine (0.95 s either way).

No cyclic collection falls inside a run: ``studio.gc_guard`` keeps automatic collection off while a
worker runs and collects on the GUI thread instead, in short young-generation passes, with one full
pass after the last job ended. (A full collection scans the whole heap holding the GIL; one used to
fall inside every run, 70–85 ms of frozen window.) The worker itself starts only once the window has
painted (``gate``; see ``studio.ui.settle``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QObject, QThreadPool, Signal
from tilewright.engine.ir.project import Project
from tilewright.engine.results.result import Result
from tilewright.engine.simulate import simulate as engine_simulate
from tilewright.studio.job_controller import JobController
from tilewright.studio.model.run_record import RunRecord
from tilewright.studio.units import SECONDS, format_value
from tilewright.studio.workers import NOT_RUN, Job, SimulateFn, simulation_job, start


class RunController(JobController):
    finished = Signal(object, float)  # the Result, wall seconds
    recorded = Signal(object)  # the RunRecord (result + prepared views), just before ``finished``

    def __init__(
        self,
        pool: QThreadPool | None = None,
        parent: QObject | None = None,
        gate: Callable[[Callable[[], None]], None] | None = None,
        simulate: SimulateFn | None = None,
    ):
        super().__init__(parent)
        self.pool = pool or QThreadPool.globalInstance()
        self.simulate: SimulateFn = simulate or engine_simulate
        # Decides when a run's worker may start (the window holds it until it has painted; see
        # ``studio.ui.settle``); without one it starts at once.
        self.gate = gate or (lambda go: go())
        self.last_result: Result | None = None
        self.last_record: RunRecord | None = None
        self.last_message = "no run yet"
        self.started_at = 0.0

    def run(self, project: Project, allow_large: bool = False) -> bool:
        """Start simulating ``project`` (an immutable snapshot); refuses while a run is going. The worker
        refuses a run past the size limits (``engine.plan.budget``) unless ``allow_large``."""
        if self.job is not None:
            return False
        job = simulation_job(project, self.simulate, allow_large)
        self.started_at = time.monotonic()
        self._begin(job)
        self.gate(lambda: self._launch(job))
        return True

    def _launch(self, job: Job) -> None:
        """The gate opened: start the worker, unless the run was cancelled while held back."""
        if job is self.job:
            start(job, self.pool)
            return
        job.ended_at = time.monotonic()  # it never ran; its relay goes with the ``stopped`` signal
        job.signals.stopped.emit()

    def failed_message(self, message: str) -> str:
        if message.startswith(NOT_RUN):  # refused before it started: it did not fail, it never ran
            count = len(message.splitlines()) - 1
            return f"run not started: the project has {count} problem{'s' if count != 1 else ''}"
        return super().failed_message(message)

    def _finished(self, value: object, seconds: float) -> None:
        record: RunRecord = value  # type: ignore[assignment]
        result = record.result
        self.last_result = result
        self.last_record = record
        self.last_message = (
            f"last run: {format_value(result.iteration_time_s, SECONDS)} per iteration ({seconds:.2f} s to simulate)"
        )
        if result.oom is not None:
            self.last_message += " · OUT OF MEMORY"
        elif result.host_oom is not None:  # offloaded state past the host memory (``Result.host_oom``)
            self.last_message += " · HOST MEMORY FULL"
        self.recorded.emit(record)
        self.finished.emit(result, seconds)
