"""Background work: anything that may take long runs on Qt's thread pool, never on the GUI thread.

A ``Job`` wraps a plain function; its signals are delivered on the GUI thread (queued connections), and
a job that was cancelled or superseded simply has its answer ignored. ``run_simulation`` is the entry
the Run menu uses: it looks the engine up lazily, so the studio works before ``engine.simulate`` exists.
"""

from __future__ import annotations

import inspect
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal


class EngineUnavailable(Exception):
    """``engine.simulate`` cannot be imported yet; the studio says so and carries on."""


class JobSignals(QObject):
    finished = Signal(object, float)  # result, wall seconds
    failed = Signal(str)
    unavailable = Signal(str)
    progress = Signal(float, str)


class Job(QRunnable):
    """Run ``fn(*args, **kwargs)`` on the pool; ``cancelled`` is an Event the function may poll."""

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any):
        super().__init__()
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.signals = JobSignals()
        self.cancelled = threading.Event()
        self.setAutoDelete(False)  # the owner keeps it until its signal arrives

    def run(self) -> None:
        start = time.perf_counter()
        try:
            result = self.fn(*self.args, **self.kwargs)
        except EngineUnavailable as exc:
            self.signals.unavailable.emit(str(exc))
        except Exception as exc:  # a failed job must report, never kill the pool thread
            detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
            self.signals.failed.emit(detail)
        else:
            self.signals.finished.emit(result, time.perf_counter() - start)

    def cancel(self) -> None:
        self.cancelled.set()


def start(job: Job, pool: QThreadPool | None = None) -> Job:
    (pool or QThreadPool.globalInstance()).start(job)
    return job


def simulate_project(project: Any, cancelled: threading.Event, progress: Callable[[float, str], None]) -> Any:
    """Call ``engine.simulate.simulate(project)``, passing a cancel check and progress callback when the
    engine's signature accepts them (so the engine can grow those without the studio changing)."""
    try:
        from engine.simulate import simulate
    except ImportError as exc:
        raise EngineUnavailable("engine not available yet") from exc
    params = inspect.signature(simulate).parameters
    kwargs: dict[str, Any] = {}
    if "should_cancel" in params:
        kwargs["should_cancel"] = cancelled.is_set
    if "progress" in params:
        kwargs["progress"] = progress
    return simulate(project, **kwargs)


def simulation_job(project: Any) -> Job:
    job = Job(simulate_project, project)
    job.kwargs = {"cancelled": job.cancelled, "progress": job.signals.progress.emit}
    job.args = (project,)
    return job


def check_job(project: Any) -> Job:
    """Cross-part checks (they build the workload graph, which can take a while for large models)."""

    def run_checks(p: Any) -> Any:
        try:
            from engine.checks import check_project

            return check_project(p)
        except ImportError as exc:
            raise EngineUnavailable("checks unavailable") from exc

    return Job(run_checks, project)
