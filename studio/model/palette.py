"""Colours of the result views, in one place so the Gantt, its legend, the breakdown bar and the memory
stack agree (the same category is the same colour everywhere)."""

from __future__ import annotations

from tilewright.engine.results import CATEGORIES, MEMORY_CATEGORIES

# Timeline categories (engine.results.CATEGORIES) and time-breakdown keys share names where they mean the
# same thing; "bubble", "memory_stall" and "host_wait" exist only in the breakdown.
CATEGORY_COLOURS: dict[str, str] = {
    "compute": "#4c78a8",
    "recompute": "#9ecae9",
    "tp_comm": "#f58518",
    "pp_comm": "#e45756",
    "dp_comm": "#54a24b",
    "ep_comm": "#eeca3b",
    "cp_comm": "#ff9da6",
    "optimizer": "#b279a2",
    "memory": "#9d755d",
    "network": "#72b7b2",
    "idle": "#bab0ac",
    "bubble": "#d8dce3",
    "memory_stall": "#9d755d",
    "host_wait": "#79706e",
}

# What a category is called on screen: the engine's names where they read well, plain words where the
# abbreviation would not (expert parallelism's all-to-all dispatch/combine, context parallelism's K/V ring).
CATEGORY_LABELS: dict[str, str] = {
    "ep_comm": "expert all-to-all",
    "cp_comm": "context ring",
    "memory_stall": "memory stall",
    "host_wait": "host wait",
}
CATEGORY_TIPS: dict[str, str] = {
    "ep_comm": "expert parallelism: tokens sent to their experts' devices and back (all-to-all dispatch and combine)",
    "cp_comm": "context parallelism: key/value blocks passed around the ring of context ranks",
    "host_wait": "the device idle for the host: kernels issued slower than they run, or the serving runtime's "
    "work between iterations (scheduling, sampling, output processing)",
}

MEMORY_COLOURS: dict[str, str] = {
    "weights": "#4c78a8",
    "gradients": "#f58518",
    "optimizer": "#b279a2",
    "activations": "#54a24b",
    "kv_cache": "#e45756",
    "workspace": "#bab0ac",
}

# Pipeline stages: 12 distinguishable hues, repeated for deeper pipelines; -1 (no stage) is grey.
STAGE_COLOURS = (
    "#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b",
    "#b279a2", "#ff9da6", "#9d755d", "#79706e", "#1f77b4", "#bcbd22",
)
NO_STAGE = "#bab0ac"

# Curves of the links view, one per selected link.
SERIES_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")

assert set(CATEGORIES) <= set(CATEGORY_COLOURS)
assert set(MEMORY_CATEGORIES) <= set(MEMORY_COLOURS)


def category_label(name: str) -> str:
    """The on-screen name of a time category ("ep_comm" → "expert all-to-all"); other names (stages,
    memory parts) come back with spaces for underscores."""
    return CATEGORY_LABELS.get(name, name.replace("_", " "))


def category_colour(index: int) -> str:
    return CATEGORY_COLOURS[CATEGORIES[index]]


def stage_colour(stage: int) -> str:
    return NO_STAGE if stage < 0 else STAGE_COLOURS[stage % len(STAGE_COLOURS)]


def series_colour(i: int) -> str:
    return SERIES_COLOURS[i % len(SERIES_COLOURS)]
