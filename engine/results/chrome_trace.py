"""Chrome Trace Event JSON for Perfetto / chrome://tracing.

``ts``/``dur`` in microseconds, computed in integer nanoseconds: every slice's start and end are rounded
to whole nanoseconds first, and ``ts = start_ns / 1000``, ``dur = (end_ns - start_ns) / 1000`` are written
as exact decimals (at most three decimal places). Perfetto rounds ``ts`` and ``dur`` to nanoseconds
separately, so float microseconds made back-to-back slices overlap by 1 ns and it dropped them
(``slice_drop_overlapping_complete_event``); in whole nanoseconds its rounding changes nothing.

Complete events (``X``) must nest strictly per (pid, tid), so slices that overlap on one lane are spread
over sub-lanes (greedy interval partitioning in integer ns, each its own tid). Counters (``C``) carry
link utilisation and memory occupancy; metadata (``M``) names every pid and tid. Text is UTF-8.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from tilewright.engine.io.atomic import write_atomic
from tilewright.engine.results.result import Result, Series, window_means
from tilewright.engine.results.timeline import CATEGORIES

PIDS = {"compute": 1, "links": 2, "memory": 3}
PROCESS_NAMES = {1: "Compute (device groups)", 2: "Links", 3: "Memory ports", 4: "Counters"}
NS = 1e9

# Counter tracks for the busiest links only: the result holds every link that carried traffic (for the
# heat map), which on a large system would make the trace too big for Perfetto to open comfortably.
TRACE_LINK_COUNTERS = 64
# Counter points for those links at full resolution, busiest first; past this budget a link's counter is
# its mean over COARSE_COUNTER_WINDOWS equal windows (the same average, coarser in time).
TRACE_LINK_POINTS = 200_000
COARSE_COUNTER_WINDOWS = 512


def to_ns(seconds: np.ndarray | list[float]) -> np.ndarray:
    """Seconds → whole nanoseconds (int64), rounded to nearest."""
    return np.rint(np.asarray(seconds, dtype=np.float64) * NS).astype(np.int64)


def us(ns: int) -> float:
    """Whole nanoseconds as microseconds: the nearest double, which JSON writes as the exact decimal."""
    return ns / 1000


def _sub_lanes(starts: np.ndarray, ends: np.ndarray) -> list[int]:
    """Assign each interval (integer ns, sorted by start) the first sub-lane whose last slice has ended."""
    lane_end: list[int] = []
    out = []
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        for i, last in enumerate(lane_end):
            if last <= s:
                lane_end[i] = e
                out.append(i)
                break
        else:
            lane_end.append(e)
            out.append(len(lane_end) - 1)
    return out


def _slices(result: Result) -> list[dict[str, Any]]:
    tl = result.timeline
    arr = tl.arrays()
    events: list[dict[str, Any]] = []
    next_tid = {pid: 1 for pid in PIDS.values()}
    start_all = to_ns(arr["start"])
    end_all = to_ns(arr["start"] + arr["dur"])
    for li, lane in enumerate(tl.lanes):
        pid = PIDS.get(lane.group, 1)
        mask = arr["lane"] == li
        if not mask.any():
            continue
        start, end = start_all[mask], end_all[mask]
        order = np.argsort(start, kind="stable")  # sorted by float start already; rounding keeps it
        subs = _sub_lanes(start[order], end[order])
        sub_of = np.empty(len(order), dtype=np.int64)
        sub_of[order] = subs
        base = next_tid[pid]
        n_sub = max(subs) + 1
        next_tid[pid] += n_sub
        for k in range(n_sub):
            label = lane.name if n_sub == 1 else f"{lane.name} #{k + 1}"
            events.append({"ph": "M", "pid": pid, "tid": base + k, "name": "thread_name", "args": {"name": label}})
        cats, labels = arr["category"][mask], arr["label"][mask]
        stage, mb, layer = arr["stage"][mask], arr["micro_batch"][mask], arr["layer"][mask]
        start_l, end_l, sub_l = start.tolist(), end.tolist(), sub_of.tolist()
        for i in range(len(start_l)):
            args = {}
            if stage[i] >= 0:
                args["stage"] = int(stage[i])
            if mb[i] >= 0:
                args["micro_batch"] = int(mb[i])
            if layer[i] >= 0:
                args["layer"] = int(layer[i])
            events.append(
                {
                    "ph": "X",
                    "pid": pid,
                    "tid": base + sub_l[i],
                    "name": tl.labels[labels[i]],
                    "cat": CATEGORIES[cats[i]],
                    "ts": us(start_l[i]),
                    "dur": us(end_l[i] - start_l[i]),
                    "args": args,
                }
            )
    return events


def _counter_points(series: Series, full: bool, end: float) -> tuple[list[int], list[float]]:
    """A link's counter: its series at full resolution, or its means over equal windows. Points that
    fall on one nanosecond keep the last value (Perfetto would keep one of them at random)."""
    if full or not series.times:
        times, values = np.asarray(series.times, dtype=np.float64), np.asarray(series.values, dtype=np.float64)
    else:
        edges = np.linspace(0.0, max(end, series.times[-1]), COARSE_COUNTER_WINDOWS + 1)
        times, values = edges[:-1], window_means(series.times, series.values, edges)
    ns = to_ns(times)
    keep = np.append(ns[1:] != ns[:-1], True) if len(ns) else np.zeros(0, dtype=bool)
    return ns[keep].tolist(), values[keep].tolist()


def _counters(result: Result) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    budget = TRACE_LINK_POINTS
    for series in result.link_utilisation[:TRACE_LINK_COUNTERS]:  # busiest first
        budget -= len(series.times)
        times, values = _counter_points(series, budget >= 0, result.iteration_time_s)
        for t, v in zip(times, values, strict=True):
            events.append({"ph": "C", "pid": 4, "tid": 0, "name": series.name, "ts": us(t), "args": {"utilisation": v}})
    for track in result.memory:
        ns = to_ns(track.times).tolist()
        for i, t in enumerate(ns):
            if i + 1 < len(ns) and ns[i + 1] == t:
                continue
            args = {cat: vals[i] / 2**30 for cat, vals in track.by_category.items()}
            events.append(
                {"ph": "C", "pid": 4, "tid": 0, "name": f"memory GiB {track.device}", "ts": us(t), "args": args}
            )
    return events


def trace_events(result: Result) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": name}}
        for pid, name in PROCESS_NAMES.items()
    ]
    return events + _slices(result) + _counters(result)


def write_chrome_trace(result: Result, path: str | Path) -> None:
    doc = {"traceEvents": trace_events(result), "displayTimeUnit": "ms", "otherData": result.metrics_json()}
    write_atomic(path, json.dumps(doc, separators=(",", ":"), ensure_ascii=False))
