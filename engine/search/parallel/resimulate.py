"""The search's last step: its best candidates re-simulated on the event engine, with contention, and
ordered among themselves by that time."""

from __future__ import annotations

from tilewright.engine.ir.project import EngineKind, Project
from tilewright.engine.jobs import ProgressFn, Reporter
from tilewright.engine.search.parallel.extended import Planner
from tilewright.engine.search.parallel.ranking import SearchResult


def resimulate_top(project: Project, result: SearchResult, top: int, report: Reporter, planner: Planner) -> None:
    """The top ``top`` on the event engine, planned on the search's graphs (``Planner``) and without per-link
    series (the search reads the iteration time and memory only)."""
    from tilewright.engine.simulate import simulate

    run = project.run.model_copy(update={"engine": EngineKind.event})
    n = min(top, len(result.ranked))
    for i, r in enumerate(result.ranked[:top]):
        text = f"search: event engine {i + 1}/{n}: {r.candidate.label()}"
        part = report.part(i / n, (i + 1) / n)
        part(0.0, text)
        mapping = r.candidate.mapping(result.global_batch, project.mapping)
        p = project.model_copy(update={"mapping": mapping, "run": run})
        r.event = simulate(p, planner.plan(p), progress=None if report.silent else _keep_text(part, text),
                           cancel=report.cancelled, series=False)
    head = result.ranked[:top]
    head.sort(key=lambda r: r.event.iteration_time_s if r.event else r.iteration_time_s)
    result.ranked[:top] = head


def _keep_text(report: Reporter, text: str) -> ProgressFn:
    """The simulation's fractions under the search's own text (which candidate is being confirmed)."""

    def progress(fraction: float, _text: str = "") -> None:
        report(fraction, text)

    return progress
