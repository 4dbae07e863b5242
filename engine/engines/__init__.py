"""The engine contract: every engine turns a plan into a ``Result`` with ``run(plan, *, progress, cancel)``.

Two engines implement it and differ only in timing semantics: ``event`` (simpy processes, transfers as
max-min fair flows on the topology: contention) and ``analytic`` (the uncontended recurrence, no event
queue). Both iterate the plan's program (``engine.plan.program``) and hand what they measured to the one
result builder (``result_builder``). ``progress``/``cancel`` follow the job protocol of ``engine.jobs``.
"""

from __future__ import annotations

from typing import Protocol

from tilewright.engine.ir.project import EngineKind, Project
from tilewright.engine.jobs import CancelFn, ProgressFn
from tilewright.engine.plan.plan import Plan
from tilewright.engine.results.result import Result


class Engine(Protocol):
    name: str

    def run(self, plan: Plan, *, progress: ProgressFn | None = None, cancel: CancelFn | None = None) -> Result:
        """Simulate ``plan`` (training or inference, as its project says); raise ``Cancelled`` when
        ``cancel()`` turns true."""
        ...


def engine_for(project: Project, *, series: bool = True) -> Engine:
    """The engine ``project.run`` asks for (``series=False``: the event engine skips per-link series)."""
    run = project.run
    if run.engine is EngineKind.analytic:
        from tilewright.engine.engines.analytic.engine import AnalyticEngine

        return AnalyticEngine()
    from tilewright.engine.engines.event.engine import EventEngine  # simpy only when asked for

    return EventEngine(contention=run.contention, aggregate=run.aggregate, series=series)

