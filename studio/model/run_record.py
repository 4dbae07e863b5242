"""One finished run as the studio keeps it: the project it ran, the ``Result``, and what the views need,
prepared on the worker thread (sorting a million Gantt slices or ranking thousands of links must not
stall the window). No Qt here."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tilewright.engine.ir.project import Project
from tilewright.engine.results.result import MemoryTrack, Result, Series
from tilewright.studio.model import metrics
from tilewright.studio.model.gantt_data import GanttData
from tilewright.studio.model.link_carriage import LinkCarriage, link_carriage
from tilewright.studio.units import SECONDS, format_value


@dataclass
class RunRecord:
    project: Project
    result: Result
    seconds: float  # wall time of the whole job (plan, simulation, preparation)
    gantt: GanttData | None = None
    ranked_links: list[tuple[Series, float]] = field(default_factory=list)
    memory_order: list[tuple[MemoryTrack, float]] | None = None  # (track, peak bytes), fullest first
    carriage: LinkCarriage | None = None  # what each link carried, by category (the links view's filter)
    finished_at: float = field(default_factory=time.time)
    number: int = 0  # given by ``RunHistory`` when kept

    @property
    def metrics(self) -> dict[str, Any]:
        return self.result.metrics_json()

    @property
    def title(self) -> str:
        """"#3 gpt3-dgx-a100 · 14:02:11 · 12.8 s/iteration"."""
        clock = time.strftime("%H:%M:%S", time.localtime(self.finished_at))
        per_iteration = self.result.iteration_time_s
        tail = f" · {format_value(per_iteration, SECONDS)}/iteration" if per_iteration else ""
        return f"#{self.number} {self.project.name or 'project'} · {clock}{tail}"


def prepare_record(project: Project, result: Result, seconds: float) -> RunRecord:
    """Everything slow the views need, computed where it may take its time (the worker thread); the
    metrics caches the canvas heat overlay reads are warmed too. A run without a timeline (metrics
    only) has the empty one its ``Result`` defaults to, and an empty Gantt."""
    ranked = metrics.busiest_links(result)
    metrics.average_device_activity(result)
    gantt = GanttData(result.timeline, result.time_breakdown_s, result.iteration_time_s)
    return RunRecord(project=project, result=result, seconds=seconds, gantt=gantt,
                     ranked_links=ranked, memory_order=metrics.fullest_first(list(result.memory)),
                     carriage=link_carriage(result.timeline))
