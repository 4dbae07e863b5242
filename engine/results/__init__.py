"""Simulation results: metrics, timeline, link and memory series."""

from engine.results.result import MEMORY_CATEGORIES, TIME_CATEGORIES, MemoryTrack, OutOfMemory, Result, Series
from engine.results.timeline import CATEGORIES, Lane, Timeline

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
