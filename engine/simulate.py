"""One call from a project to a ``Result``: build the workload, elaborate the hardware, plan, simulate."""

from __future__ import annotations

import time
from collections.abc import Callable

from tilewright.engine.hardware import elaborate
from tilewright.engine.ir.project import EngineKind, Mode, Project
from tilewright.engine.plan.plan import Plan, build_plan
from tilewright.engine.results.result import Result
from tilewright.engine.workloads import build_workload


def make_plan(project: Project) -> Plan:
    workload = build_workload(project.workload)
    hw = elaborate(project.hardware, devices_needed=project.mapping.devices)
    return build_plan(project, hw, workload)


def simulate(
    project: Project,
    plan: Plan | None = None,
    *,
    progress: Callable[[float], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    series: bool = True,
) -> Result:
    """Simulate ``project``. ``progress(fraction)`` is called now and then from the calling thread;
    ``cancel()`` returning true stops the run with ``engine.sim.event_engine.Cancelled``. ``series=False``
    skips the per-link utilisation series and lanes (a command that prints only metrics)."""
    start = time.perf_counter()
    plan = plan or make_plan(project)
    if project.run.mode is Mode.infer and project.run.engine is EngineKind.analytic:
        from tilewright.engine.sim.inference import simulate_inference

        result = simulate_inference(plan)
    elif project.run.mode is Mode.infer:
        from tilewright.engine.sim.inference_engine import simulate_inference_events

        result = simulate_inference_events(plan, series=series)
    elif project.run.engine is EngineKind.analytic:
        from tilewright.engine.analytic.engine import analytic_result

        result = analytic_result(plan)
    else:
        from tilewright.engine.sim.assemble import assemble
        from tilewright.engine.sim.event_engine import EventEngine

        eng = EventEngine(plan, contention=project.run.contention, aggregate=project.run.aggregate)
        rec = eng.run(progress=progress, cancel=cancel)
        tail = max(rec.ledgers, key=lambda r: rec.ledgers[r].finish)
        result = assemble(
            plan,
            rec,
            eng.net,
            engine="event",
            events=_events(eng),
            wall=0.0,
            critical=eng.critical_path(tail),
            lane_devices=eng.lane_nodes,
            series=series,
        )
    result.wall_time_s = time.perf_counter() - start
    return result


def _events(engine) -> int:
    """simpy numbers every scheduled event; its counter is the event count."""
    eid = getattr(engine.env, "_eid", None)
    try:
        return next(eid) if eid is not None else 0
    except TypeError:
        return 0
