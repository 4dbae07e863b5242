"""Residency per memory level for the memory view: where one device keeps each category of state
(``Result.residency``, from ``mapping.memory_levels`` or the device's own memory) and how many bytes of
each category that level holds at its peak (the level's memory track). Text with units; no Qt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from tilewright.engine.results.result import MemoryTrack, Result
from tilewright.studio.units import BYTES_PER_S, format_value, share_of_capacity
from tilewright.studio.units import format_bytes as gib

CATEGORIES = ("weights", "kv_cache", "activations", "workspace", "gradients", "optimizer")
CATEGORY_NAMES = {"kv_cache": "KV cache"}
LEVEL_NAMES = {"sram": "SRAM", "dram": "DRAM / HBM", "host": "host memory"}


@dataclass(frozen=True)
class LevelRow:
    level: str  # "SRAM", "DRAM / HBM", "host memory"
    memory: str
    capacity: float  # bytes per device
    bandwidth: float  # bytes/s per device
    peaks: dict[str, float]  # category → its largest occupancy in this level, bytes
    peak_total: float  # the level's largest total occupancy, bytes

    def cells(self) -> list[str]:
        """Level, memory, capacity, bandwidth, one cell per category, and the peak's share of capacity."""
        share = "—"
        if self.capacity:
            share = f"{gib(self.peak_total)} ({share_of_capacity(self.peak_total, self.capacity, short=True)})"
        cats = [gib(self.peaks[c]) if self.peaks.get(c, 0.0) > 0 else "—" for c in CATEGORIES]
        return [self.level, self.memory, gib(self.capacity), format_value(self.bandwidth, BYTES_PER_S), *cats, share]


HEADER = ["level", "memory", "capacity", "bandwidth", *(CATEGORY_NAMES.get(c, c) for c in CATEGORIES), "peak used"]


def stage_of(result: Result, track_device: str) -> dict[str, Any] | None:
    """The residency row whose levels include the memory track named ``track_device``."""
    for row in result.residency:
        if any(level["track"] == track_device for level in row["levels"]):
            return row
    return None


def level_rows(result: Result, row: dict[str, Any]) -> list[LevelRow]:
    tracks = {t.device: t for t in result.memory}
    out = []
    for level in row["levels"]:
        track: MemoryTrack | None = tracks.get(level["track"])
        peaks = {c: float(np.max(track.by_category[c])) for c in CATEGORIES if track and track.by_category.get(c)}
        out.append(
            LevelRow(
                LEVEL_NAMES.get(level["level"], level["level"]),
                str(level["memory"]),
                float(level["capacity_bytes"]),
                float(level["bandwidth_bytes_per_s"]),
                peaks,
                track.peak() if track else 0.0,
            )
        )
    return out


def setting_text(row: dict[str, Any]) -> str:
    """The setting in words, e.g. "mapping.memory_levels: weights → sram, kv_cache → auto (placed in SRAM);
    …" — or that it is not set."""
    levels = row.get("memory_levels") or {}
    if not levels:
        return "mapping.memory_levels not set: every category lives in the device's own memory"
    placed = {c: lv["level"] for lv in row["levels"] for c in lv["categories"]}
    parts = []
    for cat, name in levels.items():
        if name == "auto":
            parts.append(f"{cat} → auto (placed in {LEVEL_NAMES.get(placed.get(cat, ''), placed.get(cat, '?'))})")
        else:
            parts.append(f"{cat} → {name}")
    return "mapping.memory_levels: " + ", ".join(parts) + "; categories not named stay in the device's own memory"
