"""Background work: anything that may take long runs on Qt's thread pool, never on the GUI thread.

One worker abstraction for every long task (the idea of napari's ``create_worker``): a ``Job`` runs a
function that follows the engine's job protocol (``tilewright.engine.jobs``) — it takes ``progress``
(fraction 0–1, text) and ``cancel`` (true when the caller wants it to stop) as keyword arguments, and
raises ``Cancelled`` when it stops early. The job passes its own throttled progress signal and its cancel
flag; its signals are delivered on the GUI thread (queued connections). Simulation, search, sweep and the
cross-part checks all run this way.

``simulation_job`` is the entry the Run menu uses: it simulates with the injected engine function, then
prepares the ``RunRecord`` the result views read (sorting, ranking) — all on the worker thread.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, Protocol

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal
from tilewright.engine.errors import InputError
from tilewright.engine.ir.project import Project
from tilewright.engine.jobs import CancelFn, Cancelled, ProgressFn
from tilewright.engine.plan.budget import check_budget
from tilewright.engine.results.result import Result
from tilewright.studio import gc_guard
from tilewright.studio.model.run_record import RunRecord, prepare_record

PROGRESS_EVERY_S = 0.05  # at most 20 progress signals a second: the GUI thread paints, it is not flooded
PLANNING = "building the plan"
SIMULATING = "simulating"
PREPARING = "preparing the views"


class SimulateFn(Protocol):
    """What the run controller calls to simulate: ``tilewright.engine.simulate.simulate`` or a test double."""

    def __call__(
        self, project: Project, *, progress: ProgressFn | None = None, cancel: CancelFn | None = None
    ) -> Result: ...


class JobSignals(QObject):
    finished = Signal(object, float)  # the function's answer, wall seconds
    failed = Signal(str)
    stopped = Signal()  # cancelled: the function stopped early (or never started)
    progress = Signal(float, str)  # fraction 0–1, what it is doing ("building the plan", "simulating", …)


COMMAND_LINE = "command line"  # the source engine checks name for arguments that came as flags


def readable(exc: BaseException) -> str:
    """The message a person reads: an ``InputError`` already names file, path and reason; anything else
    gets its type so "KeyError: 'x'" is not just "'x'". Engine entry points shared with the CLI (search,
    hw-search, HyPar) name their arguments' source "command line"; in the studio nothing came from one, so
    that prefix goes ("failed: command line: run.mode: …" read as if the user had typed a command)."""
    if isinstance(exc, InputError):
        if exc.source == COMMAND_LINE:
            return "\n".join(str(p) for p in exc.problems)
        return str(exc)
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


class Throttle:
    """The ``progress`` a job hands its function: forwards ``(fraction, text)`` to ``emit`` at most every
    ``PROGRESS_EVERY_S`` (always the end, fraction 1). An empty text keeps the last one, so a function
    reporting fractions only stays in the phase its caller named."""

    def __init__(self, emit: Callable[[float, str], None]):
        self.emit, self.text, self.last = emit, "", 0.0

    def __call__(self, fraction: float, text: str = "") -> None:
        self.text = text or self.text
        now = time.monotonic()
        if fraction >= 1.0 or now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.emit(float(fraction), self.text)


class Job(QRunnable):
    """Run ``fn(*args, progress=…, cancel=…, **kwargs)`` on the pool. ``cancel()`` sets the flag the
    function polls; ``Cancelled`` (or any error once cancelled) ends the job with ``stopped``."""

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any):
        super().__init__()
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.signals = JobSignals()
        self.cancelled = threading.Event()
        self.progress = Throttle(self.signals.progress.emit)
        self.ended_at: float | None = None
        self.setAutoDelete(False)  # Python owns it; ``start`` keeps it alive until well after it ends

    def run(self) -> None:
        gc_guard.job_started()  # no cyclic collection on this worker thread (see studio.gc_guard)
        try:
            self._run()
        finally:
            gc_guard.job_ended()

    def _run(self) -> None:
        start = time.perf_counter()
        try:
            if self.cancelled.is_set():
                raise Cancelled("cancelled before it started")
            result = self.fn(*self.args, progress=self.progress, cancel=self.cancelled.is_set, **self.kwargs)
        except Cancelled:
            self.signals.stopped.emit()
        except Exception as exc:  # a failed job must report, never kill the pool thread
            if self.cancelled.is_set():
                self.signals.stopped.emit()
            else:
                if not isinstance(exc, InputError):
                    traceback.print_exc(file=sys.stderr)  # the whole story, for a bug report
                self.signals.failed.emit(readable(exc))
        else:
            self.signals.finished.emit(result, time.perf_counter() - start)
        finally:
            self.ended_at = time.monotonic()

    def cancel(self) -> None:
        self.cancelled.set()


class Relay(QObject):
    """Delivers a job's outcome to callbacks, and dies with its parent: a job answering after the
    window that asked is gone then reaches nobody (a lambda connection would call into deleted widgets).
    """

    def __init__(
        self,
        parent: QObject,
        job: Job,
        finished: Callable[[Any, float], None],
        failed: Callable[[str], None],
        progress: Callable[[float, str], None] | None = None,
        stopped: Callable[[], None] | None = None,
    ):
        super().__init__(parent)
        self._finished, self._failed, self._progress, self._stopped = finished, failed, progress, stopped
        job.signals.finished.connect(self.on_finished)
        job.signals.failed.connect(self.on_failed)
        job.signals.stopped.connect(self.on_stopped)
        job.signals.progress.connect(self.on_progress)

    def on_finished(self, result: Any, seconds: float) -> None:
        self._finished(result, seconds)
        self.deleteLater()

    def on_failed(self, message: str) -> None:
        self._failed(message)
        self.deleteLater()

    def on_stopped(self) -> None:
        if self._stopped is not None:
            self._stopped()
        self.deleteLater()

    def on_progress(self, fraction: float, text: str) -> None:
        if self._progress is not None:
            self._progress(fraction, text)


# While a long Python job runs (a simulation, opening a large project), the interpreter switches threads
# every 0.1 ms instead of 5 ms, so the GUI thread gets the GIL back quickly (see ``run_controller``).
# Counted, so overlapping jobs restore the interpreter's own interval only when the last one ends.
FAST_SWITCH_S = 0.0001
_FAST = {"users": 0, "saved": 0.005}


def fast_switching(on: bool) -> None:
    """Call with True when a long job starts and with False when it ends."""
    if on:
        if _FAST["users"] == 0:
            _FAST["saved"] = sys.getswitchinterval()
            sys.setswitchinterval(min(_FAST["saved"], FAST_SWITCH_S))
        _FAST["users"] += 1
    elif _FAST["users"] > 0:
        _FAST["users"] -= 1
        if _FAST["users"] == 0:
            sys.setswitchinterval(_FAST["saved"])


# Jobs handed to the pool, kept referenced so Python never frees one while a pool thread runs it; a job
# is let go a while after it ended (by then the pool thread has long returned from ``run``).
_LIVE: set[Job] = set()
RELEASE_AFTER_S = 5.0


def start(job: Job, pool: QThreadPool | None = None) -> Job:
    gc_guard.install()
    now = time.monotonic()
    for old in [j for j in _LIVE if j.ended_at is not None and now - j.ended_at > RELEASE_AFTER_S]:
        _LIVE.discard(old)
    _LIVE.add(job)
    (pool or QThreadPool.globalInstance()).start(job)
    return job


def simulate_and_prepare(
    project: Project, simulate: SimulateFn, *, progress: ProgressFn, cancel: CancelFn, allow_large: bool = False
) -> RunRecord:
    """``simulate(project)`` with the job's progress and cancel, then the ``RunRecord`` the result views
    read (sorted, ranked on this thread). Reports from the engine without a text count as simulating.
    A run past the size limits is refused (not left to exhaust memory) unless ``allow_large``."""
    start = time.perf_counter()
    check_budget(project, project.name, allow_large=allow_large)
    refuse_problems(project)
    progress(0.0, PLANNING)  # the engine plans first; its first report says it moved on
    result = simulate(project, progress=lambda f, text="": progress(f, text or SIMULATING), cancel=cancel)
    if cancel():
        raise Cancelled("cancelled")
    progress(1.0, PREPARING)
    return prepare_record(project, result, time.perf_counter() - start)


NOT_RUN = "Not run: the project has problems (the status bar lists them too)"


class ProjectProblems(InputError):
    """A run refused for the project's problems: the heading once, then one problem a line."""

    def __str__(self) -> str:
        return "\n".join([f"{NOT_RUN}:", *(f"• {p}" for p in self.problems)])


def refuse_problems(project: Project) -> None:
    """Refuse a run of a project with cross-part problems (``check_project``), as ``tilewright run`` does:
    the status bar listed them, yet Run simulated anyway (e.g. an inference sequence past the model's
    context). The size limits are ``check_budget``'s, asked before this."""
    from tilewright.engine.plan.checks import check_project

    problems = check_project(project, allow_large=True)
    if problems:
        raise ProjectProblems(project.name, problems)


def simulation_job(project: Project, simulate: SimulateFn, allow_large: bool = False) -> Job:
    return Job(simulate_and_prepare, project, simulate, allow_large=allow_large)


def _check(project: Project, *, progress: ProgressFn, cancel: CancelFn) -> list[Any]:  # noqa: ARG001
    from tilewright.engine.plan.checks import check_project

    return check_project(project)


def check_job(project: Project) -> Job:
    """Cross-part checks (they build the workload graph, which can take a while for large models)."""
    return Job(_check, project)
