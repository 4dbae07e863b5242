"""One call from a project to a ``Result``: build the workload, elaborate the hardware, plan, run an engine."""

from __future__ import annotations

import time

from tilewright.engine.engines import engine_for
from tilewright.engine.hardware import elaborate
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.ir.workload import TransformerDims
from tilewright.engine.jobs import CancelFn, ProgressFn
from tilewright.engine.plan.plan import Plan, build_plan
from tilewright.engine.results.result import Result
from tilewright.engine.workloads import build_workload
from tilewright.engine.workloads.transformer_inference import without_mtp


def make_plan(project: Project) -> Plan:
    """The plan of ``project``; an inference run plans the served model, without the multi-token-prediction
    depths that only training runs (``workloads.transformer_inference``)."""
    spec = project.workload
    if project.run.mode is not Mode.train and isinstance(spec, TransformerDims):
        spec = without_mtp(spec)
    workload = build_workload(spec)
    hw = elaborate(project.hardware, devices_needed=project.mapping.devices)
    return build_plan(project, hw, workload)


def simulate(
    project: Project,
    plan: Plan | None = None,
    *,
    progress: ProgressFn | None = None,
    cancel: CancelFn | None = None,
    series: bool = True,
) -> Result:
    """Simulate ``project`` on the engine ``project.run.engine`` names, training or inference alike.
    ``progress(fraction, text)`` is called now and then from the calling thread; ``cancel()`` returning
    true stops the run with ``engine.jobs.Cancelled``. ``series=False`` skips the per-link utilisation
    series and lanes (a command that prints only metrics)."""
    start = time.perf_counter()
    plan = plan or make_plan(project)
    result = engine_for(project, series=series).run(plan, progress=progress, cancel=cancel)
    result.wall_time_s = time.perf_counter() - start
    return result
