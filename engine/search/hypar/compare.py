"""Simulate a HyPar partition next to pure data parallelism on one system (``tilewright hypar --simulate``).

HyPar's search minimises bytes; whether that buys time depends on the topology, the link bandwidths and
how much of the step is compute. Both runs use the same project — system, model, dtype, array of N
devices, the partition's batch as one step — and differ only in ``mapping.layer_parallelism``: the
partition, or empty, which is the engine's ordinary data-parallel run (an all-reduce of every gradient).
"""

from __future__ import annotations

from typing import Any

from tilewright.engine.ir.project import Project
from tilewright.engine.ir.workload import WorkloadSpec
from tilewright.engine.jobs import ProgressFn
from tilewright.engine.plan.checks import raise_for_problems
from tilewright.engine.results.result import Result
from tilewright.engine.search.hypar.partition import Partition
from tilewright.engine.search.hypar.report import apply_partition

SOURCE = "command line"
COMM = ("tp_comm", "dp_comm", "pp_comm")  # HyPar's activation exchanges are tp_comm, its ΔW exchanges dp_comm


def base_project(
    spec: WorkloadSpec, *, system: Any | None, project: Project | None, dtype: str, engine: str | None = None
) -> Project:
    """The project both runs start from: ``project`` (a preset or file) or a fresh one on ``system``,
    with the partition's model and dtype (so the simulated bytes are the ones the search counted), in
    training mode, on ``engine`` when given (else the project's)."""
    from tilewright.engine.io.project_file import project_from_data

    data: dict[str, Any] = project.model_dump(mode="json") if project is not None else {
        "name": f"hypar-{getattr(spec, 'name', '') or 'model'}", "mapping": {}, "run": {}
    }
    if system is not None:
        data["hardware"] = system.model_dump(mode="json")
    data["workload"] = spec.model_dump(mode="json")
    data["run"] = {**data.get("run", {}), "dtype": dtype, "mode": "train"} | ({"engine": engine} if engine else {})
    return project_from_data(data, SOURCE)


def comparison_projects(base: Project, best: Partition) -> tuple[Project, Project]:
    """(the HyPar run, the all-dp run): the same mapping but for ``layer_parallelism``."""
    hybrid = apply_partition(base, best)
    hybrid.name = f"{base.name} (HyPar)"
    all_dp = hybrid.model_copy(deep=True)
    all_dp.name = f"{base.name} (all dp)"
    all_dp.mapping = all_dp.mapping.model_copy(update={"layer_parallelism": []})
    for p in (hybrid, all_dp):
        raise_for_problems(p, SOURCE)
    return hybrid, all_dp


def summary(result: Result) -> dict[str, Any]:
    t = result.time_breakdown_s
    out = {
        "iteration_time_s": result.iteration_time_s,
        "comm_s": sum(t.get(k, 0.0) for k in COMM),
        "compute_s": t.get("compute", 0.0) + t.get("memory_stall", 0.0) + t.get("host_wait", 0.0),  # device busy
        "time_breakdown_s": dict(t),
        "peak_memory_bytes": result.peak_memory_bytes,
        "out_of_memory": result.oom is not None or result.host_oom is not None,
    }
    if result.spatial_splits:  # a grid of cores per accelerator: how each forward op was split over them
        out["spatial_splits"] = list(result.spatial_splits)
    return out


def compare(base: Project, best: Partition, progress: ProgressFn | None = None) -> dict[str, Any]:
    """Simulate both runs; JSON-ready, with the all-dp time over the HyPar time as ``speedup``. ``progress``
    hears each simulation's (as halves of the whole), so a long pair of runs is not silent."""
    from tilewright.engine.simulate import simulate

    hybrid, all_dp = comparison_projects(base, best)
    out = []
    for i, (p, what) in enumerate(((hybrid, "the HyPar partition"), (all_dp, "pure data parallelism"))):
        sub = None
        if progress is not None:
            progress(i / 2, f"hypar: simulating {what} on {base.hardware.name}")
            sub = _half(progress, i, f"hypar: simulating {what} on {base.hardware.name}")
        out.append(summary(simulate(p, progress=sub)))
    h, d = out
    return {
        "system": base.hardware.name,
        "engine": base.run.engine.value,
        "hypar": h,
        "all_dp": d,
        "speedup": d["iteration_time_s"] / h["iteration_time_s"] if h["iteration_time_s"] else None,
    }


def _half(progress: ProgressFn, i: int, text: str) -> ProgressFn:
    """One simulation's fractions as the ``i``-th half of the comparison's, under ``text``."""
    return lambda fraction, _text="": progress((i + min(max(fraction, 0.0), 1.0)) / 2, text)


def compare_text(sim: dict[str, Any]) -> str:
    def line(name: str, s: dict[str, Any]) -> str:
        oom = ", OUT OF MEMORY" if s["out_of_memory"] else ""
        splits = _split_kinds(s.get("spatial_splits", []))
        return (f"  {name:<14} {s['iteration_time_s']:10.4f} s per step, comm {s['comm_s']:.4f} s, compute "
                f"{s['compute_s']:.4f} s, peak memory {s['peak_memory_bytes'] / 2**30:.2f} GiB{oom}"
                + (f"; per chip, forward ops split {splits}" if splits else ""))

    return "\n".join([
        f"Simulated on {sim['system']} ({sim['engine']} engine):",
        line("hybrid", sim["hypar"]),
        line("data parallel", sim["all_dp"]),
        f"  speed-up of HyPar over data parallelism: {sim['speedup']:.3f}×" if sim["speedup"] else "",
    ]).rstrip()


def _split_kinds(rows: list[dict[str, Any]]) -> str:
    """How many forward ops each kind of split took over an accelerator's cores: "12 × 2-D, 4 × 1-D"."""
    kinds: dict[str, int] = {}
    for row in rows:
        kind = str(row["split"]).split(" ", 1)[0]
        kinds[kind] = kinds.get(kind, 0) + int(row["count"])
    return ", ".join(f"{n} × {k}" for k, n in kinds.items())
