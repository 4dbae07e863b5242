"""Simulation results: metrics, timeline, link and memory series; their exports (``chrome_trace``, ``csv_export``)."""

from tilewright.engine.results.result import (
    MEMORY_CATEGORIES,
    TIME_CATEGORIES,
    MemoryTrack,
    OutOfMemory,
    Result,
    Series,
)
from tilewright.engine.results.timeline import CATEGORIES, Lane, Timeline

__all__ = [
    "MEMORY_CATEGORIES",
    "TIME_CATEGORIES",
    "MemoryTrack",
    "OutOfMemory",
    "Result",
    "Series",
    "CATEGORIES",
    "Lane",
    "Timeline",
]
