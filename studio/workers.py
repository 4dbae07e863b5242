"""Background work: anything that may take long runs on Qt's thread pool, never on the GUI thread.

A ``Job`` wraps a plain function; its signals are delivered on the GUI thread (queued connections), and
a job that was cancelled or superseded simply has its answer ignored. ``simulation_job`` is the entry
the Run menu uses: it plans, simulates with a progress callback and a cancel flag the engine polls
between batches of events, then prepares what the result views need — all on the worker thread. It
looks the engine up lazily, so the studio still opens when ``engine.simulate`` cannot be imported.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal
from tilewright.engine.errors import InputError
from tilewright.studio import gc_guard

PROGRESS_EVERY_S = 0.05  # at most 20 progress signals a second: the GUI thread paints, it is not flooded


class EngineUnavailable(Exception):
    """``engine.simulate`` cannot be imported; the studio says so and carries on."""


class JobSignals(QObject):
    finished = Signal(object, float)  # result, wall seconds
    failed = Signal(str)
    unavailable = Signal(str)
    stopped = Signal()  # the function gave up because the job was cancelled
    progress = Signal(float, str)  # fraction 0–1, phase ("building the plan", "simulating", …)


def readable(exc: BaseException) -> str:
    """The message a person reads: an ``InputError`` already names file, path and reason; anything else
    gets its type so "KeyError: 'x'" is not just "'x'"."""
    if isinstance(exc, InputError):
        return str(exc)
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


class Job(QRunnable):
    """Run ``fn(*args, **kwargs)`` on the pool; ``cancelled`` is an Event the function may poll."""

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any):
        super().__init__()
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.signals = JobSignals()
        self.cancelled = threading.Event()
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
            result = self.fn(*self.args, **self.kwargs)
        except EngineUnavailable as exc:
            self.signals.unavailable.emit(str(exc))
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
        unavailable: Callable[[str], None],
        progress: Callable[[float, str], None] | None = None,
    ):
        super().__init__(parent)
        self._finished, self._failed, self._unavailable, self._progress = finished, failed, unavailable, progress
        job.signals.finished.connect(self.on_finished)
        job.signals.failed.connect(self.on_failed)
        job.signals.unavailable.connect(self.on_unavailable)
        job.signals.stopped.connect(self.deleteLater)
        job.signals.progress.connect(self.on_progress)

    def on_finished(self, result: Any, seconds: float) -> None:
        self._finished(result, seconds)
        self.deleteLater()

    def on_failed(self, message: str) -> None:
        self._failed(message)
        self.deleteLater()

    def on_unavailable(self, message: str) -> None:
        self._unavailable(message)
        self.deleteLater()

    def on_progress(self, fraction: float, text: str) -> None:
        if self._progress is not None:
            self._progress(fraction, text)


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


class Throttle:
    """Forwards ``progress(fraction)`` as ``emit(fraction, phase)`` at most every ``PROGRESS_EVERY_S``."""

    def __init__(self, emit: Callable[[float, str], None], phase: str = "simulating"):
        self.emit, self.phase, self.last = emit, phase, 0.0

    def __call__(self, fraction: float) -> None:
        now = time.monotonic()
        if fraction >= 1.0 or now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.emit(float(fraction), self.phase)


def simulate_project(project: Any, cancelled: threading.Event, progress: Callable[[float, str], None]) -> Any:
    """Plan and simulate ``project`` with ``engine.simulate``, passing the cancel check and a throttled
    progress callback when the engine's signature accepts them (test doubles may take only a project)."""
    try:
        sim = importlib.import_module("tilewright.engine.simulate")  # what sys.modules holds (tests swap in doubles)
    except ImportError as exc:
        raise EngineUnavailable("engine not available yet") from exc
    params = inspect.signature(sim.simulate).parameters
    args: list[Any] = [project]
    if "plan" in params and callable(getattr(sim, "make_plan", None)):
        progress(0.0, "building the plan")
        args.append(sim.make_plan(project))
    kwargs: dict[str, Any] = {}
    if "cancel" in params:
        kwargs["cancel"] = cancelled.is_set
    if "progress" in params:
        kwargs["progress"] = Throttle(progress)
    if cancelled.is_set():
        raise RuntimeError("cancelled before the simulation started")
    progress(0.0, "simulating")
    return sim.simulate(*args, **kwargs)


def simulate_and_prepare(project: Any, cancelled: threading.Event, progress: Callable[[float, str], None]) -> Any:
    """The simulation, then the ``RunRecord`` the result views read (sorted, ranked on this thread)."""
    from tilewright.studio.ui.results.record import prepare_record

    start = time.perf_counter()
    result = simulate_project(project, cancelled, progress)
    progress(1.0, "preparing the views")
    return prepare_record(project, result, time.perf_counter() - start)


def simulation_job(project: Any) -> Job:
    job = Job(simulate_and_prepare, project)
    # The cancel flag and progress signal belong to the job itself, so they are wired after creating it.
    job.kwargs = {"cancelled": job.cancelled, "progress": job.signals.progress.emit}
    return job


def check_job(project: Any) -> Job:
    """Cross-part checks (they build the workload graph, which can take a while for large models)."""

    def run_checks(p: Any) -> Any:
        try:
            from tilewright.engine.checks import check_project

            return check_project(p)
        except ImportError as exc:
            raise EngineUnavailable("checks unavailable") from exc

    return Job(run_checks, project)
