"""Serving simulations (``tilewright.engine.serving``), one at a time, on a worker thread — as a run does.

The same ``workers.Job`` as the Run menu's simulation carries the job protocol: ``progress`` reaches the
serving window through a ``Relay`` (throttled, on the GUI thread), Cancel sets the flag the simulator
polls every few dozen iterations, and the controller forgets a cancelled job's late answer at once.
The worker also reads the trace file and shapes the views (``studio.model.serving_data``), so the GUI
thread only draws.

The engine is injected like the run controller's: ``simulate`` and ``sweep`` default to
``simulate_serving`` and ``sweep_rates``; tests pass doubles with the same signatures.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QThreadPool, Signal
from tilewright.engine.errors import InputError, Problem
from tilewright.engine.ir.project import Project
from tilewright.engine.jobs import CancelFn, Cancelled, ProgressFn
from tilewright.engine.plan.checks import check_project
from tilewright.engine.serving import ServingSetupError, load_trace, simulate_serving, sweep_rates
from tilewright.studio.job_controller import JobController
from tilewright.studio.model.serving_data import ServingRequest, ServingView, serving_view
from tilewright.studio.units import SECONDS, format_value
from tilewright.studio.workers import Job, start

READING = "reading the trace"
SHAPING = "preparing the views"

SimulateServingFn = Callable[..., Any]  # simulate_serving(project, config, *, progress, cancel) -> ServingResult
SweepFn = Callable[..., Any]  # sweep_rates(project, config, rates, *, progress, cancel) -> SweepResult


def serve_and_shape(
    project: Project,
    request: ServingRequest,
    simulate: SimulateServingFn,
    sweep: SweepFn,
    *,
    progress: ProgressFn,
    cancel: CancelFn,
) -> ServingView:
    """Check the project as a run would, read the trace (if any), simulate one rate or sweep several, then
    shape the views — all on the worker. An inconsistent project, or a setting the instances cannot be built
    with, comes back as an ``InputError`` naming it."""
    config = request.config
    problems = check_project(project, allow_large=True)  # what a run refuses (e.g. tp not dividing the heads)
    if problems:
        raise InputError(project.name, problems)
    try:
        if request.trace is not None:
            progress(0.0, READING)
            config = dataclasses.replace(config, requests=tuple(load_trace(request.trace)))
            result = simulate(project, config, progress=progress, cancel=cancel)
            rates, results, best = [None], [result], None
        elif request.is_sweep:
            swept = sweep(project, config, list(request.rates), progress=progress, cancel=cancel)
            rates, results, best = list(swept.rates), list(swept.results), swept.best_rate
        else:
            rate = request.rates[0]
            result = simulate(project, dataclasses.replace(config, rate=rate), progress=progress, cancel=cancel)
            rates, results, best = [rate], [result], rate if result.meets_slo() else None
    except ServingSetupError as exc:
        raise InputError(project.name, Problem(exc.setting, exc.reason)) from None
    if cancel():
        raise Cancelled("cancelled")
    progress(1.0, SHAPING)
    return serving_view(project.name, rates, results, best)


class ServingController(JobController):
    finished = Signal(object, float)  # the ServingView, wall seconds

    CANCELLED_TEXT = "serving run cancelled"
    FAILED_PREFIX = "serving run failed"

    def __init__(
        self,
        parent: QObject | None = None,
        pool: QThreadPool | None = None,
        simulate: SimulateServingFn | None = None,
        sweep: SweepFn | None = None,
    ):
        super().__init__(parent)
        self.pool = pool or QThreadPool.globalInstance()
        self.simulate = simulate or simulate_serving
        self.sweep = sweep or sweep_rates
        self.last_view: ServingView | None = None
        self.last_message = "no serving run yet"

    def run(self, project: Project, request: ServingRequest) -> bool:
        """Start serving ``project`` (an immutable snapshot) as ``request`` says; refuses while one runs."""
        if self.job is not None:
            return False
        job = Job(serve_and_shape, project, request, self.simulate, self.sweep)
        self._begin(job)
        start(job, self.pool)
        return True

    def _finished(self, value: object, seconds: float) -> None:
        view: ServingView = value  # type: ignore[assignment]
        self.last_view = view
        self.last_message = (
            f"served {sum(len(r.result.records) for r in view.runs)} requests "
            f"({format_value(seconds, SECONDS)} to simulate)"
        )
        self.finished.emit(view, seconds)
