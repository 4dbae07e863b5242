"""One finished run as the studio keeps it: the project it ran, the ``Result``, and what the views need,
prepared on the worker thread (sorting a million Gantt slices or ranking thousands of links must not
stall the window). No Qt here."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tilewright.studio.ui.results import metrics
from tilewright.studio.ui.results.gantt_data import GanttData


@dataclass
class RunRecord:
    project: Any
    result: Any
    seconds: float  # wall time of the whole job (plan, simulation, preparation)
    gantt: GanttData | None = None
    ranked_links: list[tuple[Any, float]] = field(default_factory=list)
    memory_order: list[tuple[Any, float]] | None = None  # (track, peak bytes), fullest first
    finished_at: float = field(default_factory=time.time)
    number: int = 0  # given by ``RunHistory`` when kept

    @property
    def metrics(self) -> dict[str, Any]:
        fn = getattr(self.result, "metrics_json", None)
        return fn() if callable(fn) else {}

    @property
    def title(self) -> str:
        """"#3 gpt3-dgx-a100 · 14:02:11 · 12.8 s/iteration"."""
        from tilewright.studio.ui.results.summary import format_metric

        clock = time.strftime("%H:%M:%S", time.localtime(self.finished_at))
        name = getattr(self.project, "name", "") or "project"
        per_iteration = self.metrics.get("iteration_time_s")
        tail = f" · {format_metric('iteration_time_s', per_iteration)}/iteration" if per_iteration else ""
        return f"#{self.number} {name} · {clock}{tail}"


def prepare_record(project: Any, result: Any, seconds: float) -> RunRecord:
    """Everything slow the views need, computed where it may take its time (the worker thread); the
    metrics caches the canvas heat overlay reads are warmed too."""
    timeline = getattr(result, "timeline", None)
    gantt = GanttData(timeline) if timeline is not None and hasattr(timeline, "arrays") else None
    ranked: list[tuple[Any, float]] = []
    if hasattr(result, "link_utilisation"):
        ranked = metrics.busiest_links(result)
        metrics.average_device_activity(result)
    memory = metrics.fullest_first(list(getattr(result, "memory", []) or []))
    return RunRecord(project=project, result=result, seconds=seconds, gantt=gantt, ranked_links=ranked,
                     memory_order=memory)
