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
from tilewright.engine.cli.context_check import refuse_served_past_context
from tilewright.engine.errors import InputError, Problem
from tilewright.engine.ir.project import Project
from tilewright.engine.jobs import CancelFn, Cancelled, ProgressFn
from tilewright.engine.plan.checks import check_project
from tilewright.engine.plan.context_length import context_problems, length_fields
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
    served = served_project(project, config)
    problems = serving_problems(served, traced=request.trace is not None)
    if problems:
        raise InputError(project.name, problems)
    try:
        if request.trace is not None:
            progress(0.0, READING)
            requests = tuple(load_trace(request.trace))
            # each request's own lengths against the model's context, as ``tilewright serve`` holds them
            refuse_served_past_context(project, project.name, request.trace, requests)
            config = dataclasses.replace(config, requests=requests)
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


def served_project(project: Project, config: Any) -> Project:
    """``project`` with the lengths the serving form sets (``config.prompt_tokens``/``output_tokens``, None:
    the project's own) in its ``run.inference``: what is served is what must pass the checks."""
    inference = project.run.inference
    update = {field: value for field in ("prompt_tokens", "output_tokens")
              if (value := getattr(config, field, None)) is not None}
    if not update:
        return project
    run = project.run.model_copy(update={"inference": inference.model_copy(update=update)})
    return project.model_copy(update={"run": run})


def serving_problems(served: Project, traced: bool) -> list[Problem]:
    """What refuses a serving run: the project's cross-part problems (e.g. tp not dividing the heads) and its
    served lengths past the model's context — whatever ``run.mode`` says, since serving is inference
    (``plan.context_length``). The window used to check the project's own lengths, not the form's prompt
    and output, so a 100,000-token prompt typed in the form was served. With a trace the lengths are each
    request's (checked as the trace is read), so the project's own lengths are not held against it."""
    lengths = length_fields(served.workload)
    problems = [p for p in check_project(served, allow_large=True) if p.path != lengths]
    if not traced:
        problems += context_problems(served, serving=True)
    return problems


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
