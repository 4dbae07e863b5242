"""One sweep point: apply its overrides to the base project, simulate, and flatten what to record.

Runs in a worker process (or a Ray task), so it takes and returns plain data. A point that makes an
inconsistent project (tp not dividing the heads, say) is recorded as ``invalid`` with the reason rather
than stopping the sweep; one that runs out of memory as ``oom`` with its metrics.
"""

from __future__ import annotations

import copy
from typing import Any

from tilewright.engine.errors import InputError
from tilewright.engine.jobs import CancelFn, Cancelled

METRICS = (
    "iteration_time_s", "samples_per_s", "tokens_per_s", "mfu", "hfu", "peak_memory_bytes", "ttft_s", "tpot_s",
    "devices", "average_power_w",
)
# the hardware's rated totals (``hardware_totals``): ``power_w`` is the rated power of the nodes and devices in
# use, not what the run draws — that is the simulated ``average_power_w`` (``engine/engines/energy.py``)
COST_FIELDS = ("area_mm2", "power_w", "cost_usd")
COLUMN_DOCS = {
    "average_power_w": "simulated average power over the run, W (the run's energy / its time; hosts excluded)",
    "power_w": "rated power of the hardware in use, W (its nodes' and devices' power_w summed; not simulated)",
    "area_mm2": "rated silicon area of the hardware in use, mm²",
    "cost_usd": "listed cost of the hardware in use, USD",
}
LABELS = {"power_w": "rated power", "average_power_w": "simulated power"}  # what the text report calls them


def build_point_project(base: dict[str, Any], overrides: dict[str, Any], source: str):
    """The project of one point; raises ``InputError`` when the overrides make it invalid."""
    from tilewright.engine.io.overrides import apply_overrides
    from tilewright.engine.io.project_file import project_from_data
    from tilewright.engine.plan.checks import raise_for_problems

    data = copy.deepcopy(base)
    for path, value in overrides.items():
        apply_overrides(data, path, value, source)
    project = project_from_data(data, source)
    raise_for_problems(project, source)
    return project


def hardware_totals(project) -> dict[str, float]:
    """Area, power and cost of the system as the run uses it (growable levels grown to fit)."""
    from tilewright.engine.hardware import grow

    hw = grow(project.hardware, project.mapping.devices)
    return {f: hw.total(f) for f in COST_FIELDS}


def run_point(
    base: dict[str, Any], overrides: dict[str, Any], source: str, *, cancel: CancelFn | None = None
) -> dict[str, Any]:
    """Simulate one point; returns ``status`` (ok | oom | invalid | error), metrics and totals. ``cancel``
    (in-process runs only: a worker process is stopped by ending it) raises ``Cancelled`` mid-simulation."""
    from tilewright.engine.simulate import simulate

    row: dict[str, Any] = {"status": "ok", "error": ""}
    try:
        project = build_point_project(base, overrides, source)
    except InputError as exc:
        row.update(status="invalid", error="; ".join(str(p) for p in exc.problems))
        return row
    try:
        metrics = simulate(project, cancel=cancel).metrics_json()
    except Cancelled:
        raise
    except Exception as exc:  # a fault in one point must not end a long sweep; it is recorded
        row.update(status="error", error=f"{exc.__class__.__name__}: {exc}")
        return row
    row.update({k: metrics.get(k) for k in METRICS})
    if "oom" in metrics:
        row["status"] = "oom"
    row.update(hardware_totals(project))
    return row
