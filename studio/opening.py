"""Opening a large project without freezing the window: its device graph is built on a worker.

The canvas draws a project from its elaborated hardware graph (the memory captions count the graph's
memory ports, the pipeline overlay places stages on its devices). Elaborating a 512 × 512-tile wafer
takes tens of seconds, and done by the canvas on the GUI thread it froze the window that long (opening
a 1000 × 1000 one never ended). So a project past ``BACKGROUND_DEVICES`` is opened in two steps: a job
on the thread pool builds what the canvas will ask for — through the same cached functions the canvas
calls (``studio.mapping``'s elaborated graph, stage layout and displayed hardware, ``studio.summary``'s
per-design memory figures, read off that one graph, and the first level's cells), so it is computed once
— and the window shows a busy indicator meanwhile; when the job is done the document takes the project
and the GUI thread only builds the canvas's items from the caches.

A project past the size limits in what drawing it needs (devices to elaborate, layers) is not opened
unless the user allows large work (``--allow-large``, Run ▸ Allow Large Runs): a 1000 × 1000-tile wafer
took 12 GiB within 100 s and was still elaborating.

The graphs are millions of long-lived objects, and the studio collects garbage on the GUI thread
(``studio.gc_guard``): a young collection scanning what the worker had just built froze the window
0.4 s (128 × 128 tiles), and a full one would scan it all after every later job. So while the layout is
built, what exists is frozen every ``FREEZE_EVERY_S`` (``gc.freeze``: out of the collector's sight, still
freed by reference counting when a cache lets it go). The price: a reference cycle made while a large
project opens is never collected.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tilewright.engine.errors import Problem
from tilewright.engine.ir.hardware import Component
from tilewright.engine.ir.project import Project
from tilewright.engine.jobs import CancelFn, Cancelled, ProgressFn
from tilewright.engine.plan.budget import estimate
from tilewright.studio.workers import Job

BACKGROUND_DEVICES = 1024  # at this size one elaboration takes ~50 ms; the canvas asks for several
BUILDING = "building the device graph"
MEASURING = "measuring the memories"
LAYING_OUT = "laying out the pipeline stages"
FREEZE_EVERY_S = 0.05


def opens_in_background(project: Project) -> bool:
    """True when building ``project``'s canvas would take long enough to freeze the window."""
    return project.hardware.device_count() > BACKGROUND_DEVICES


def too_large_to_open(project: Project) -> list[Problem]:
    """The size limits ``project`` is past in what drawing it builds (its devices, its layers)."""
    return [p for p in estimate(project).problems() if p.path in ("hardware", "workload")]


def _components(root: Component) -> Iterator[Component]:
    yield root
    for child in root.children:
        yield from _components(child)


@contextmanager
def frozen_as_built() -> Iterator[None]:
    """Freeze the heap every ``FREEZE_EVERY_S`` while the block runs, and once at its end."""
    done = threading.Event()

    def freeze() -> None:
        while not done.wait(FREEZE_EVERY_S):
            gc.freeze()

    freezer = threading.Thread(target=freeze, name="layout-freezer", daemon=True)
    freezer.start()
    try:
        yield
    finally:
        done.set()
        freezer.join()
        gc.freeze()


def prepare_layout(project: Project, *, progress: ProgressFn, cancel: CancelFn) -> Project:
    """Build and cache, on this (worker) thread, what drawing ``project`` needs; returns ``project``."""
    with frozen_as_built():
        return _prepare(project, progress, cancel)


def _prepare(project: Project, progress: ProgressFn, cancel: CancelFn) -> Project:
    from tilewright.studio.mapping import display_hardware, elaborated, stage_layout
    from tilewright.studio.model.level_cells import level_cells
    from tilewright.studio.summary import instance_memory, remember_instances

    def step(fraction: float, text: str) -> None:
        if cancel():
            raise Cancelled("opening cancelled")
        progress(fraction, text)

    step(0.0, BUILDING)
    layout = stage_layout(project)  # the whole system's graph, grown to the mapping's devices
    if not layout.problem:  # every design's memory caption from that one graph, not one elaboration each
        remember_instances(elaborated(project.hardware, project.mapping.devices))
    components = list(_components(project.hardware))
    for i, component in enumerate(components):
        step(0.8 + 0.1 * i / len(components), MEASURING)
        instance_memory(component)  # one instance of each design, as its caption shows it
    step(0.9, LAYING_OUT)
    hardware = display_hardware(project)  # the canvas opens on the root level
    level_cells(hardware, hardware.name, hardware.name, layout.devices)
    progress(1.0, LAYING_OUT)
    return project


def opening_job(project: Project) -> Job:
    return Job(prepare_layout, project)
