"""Chrome Trace Event JSON for Perfetto / chrome://tracing.

``ts``/``dur`` in microseconds. Complete events (``X``) must nest strictly per (pid, tid), so slices that
overlap on one lane are spread over sub-lanes (greedy interval partitioning, each its own tid).
Counters (``C``) carry link utilisation and memory occupancy; metadata (``M``) names every pid and tid.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from tilewright.engine.io.atomic import write_atomic
from tilewright.engine.results.result import Result
from tilewright.engine.results.timeline import CATEGORIES

PIDS = {"compute": 1, "links": 2, "memory": 3}
PROCESS_NAMES = {1: "Compute (device groups)", 2: "Links", 3: "Memory ports", 4: "Counters"}
US = 1e6

# Counter tracks for the busiest links only: the result holds every link that carried traffic (for the
# heat map), which on a large system would make the trace too big for Perfetto to open comfortably.
TRACE_LINK_COUNTERS = 64


def _sub_lanes(starts: np.ndarray, ends: np.ndarray) -> list[int]:
    """Assign each interval (sorted by start) the first sub-lane whose last slice has ended."""
    lane_end: list[float] = []
    out = []
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        for i, last in enumerate(lane_end):
            if last <= s + 1e-12:
                lane_end[i] = e
                out.append(i)
                break
        else:
            lane_end.append(e)
            out.append(len(lane_end) - 1)
    return out


def trace_events(result: Result) -> list[dict[str, Any]]:
    tl = result.timeline
    arr = tl.arrays()
    events: list[dict[str, Any]] = []
    for pid, name in PROCESS_NAMES.items():
        events.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": name}})
    next_tid = {pid: 1 for pid in PIDS.values()}
    for li, lane in enumerate(tl.lanes):
        pid = PIDS.get(lane.group, 1)
        mask = arr["lane"] == li
        if not mask.any():
            continue
        start, dur = arr["start"][mask], arr["dur"][mask]
        subs = _sub_lanes(start, start + dur)
        base = next_tid[pid]
        n_sub = max(subs) + 1
        next_tid[pid] += n_sub
        for k in range(n_sub):
            label = lane.name if n_sub == 1 else f"{lane.name} #{k + 1}"
            events.append({"ph": "M", "pid": pid, "tid": base + k, "name": "thread_name", "args": {"name": label}})
        cats, labels = arr["category"][mask], arr["label"][mask]
        stage, mb, layer = arr["stage"][mask], arr["micro_batch"][mask], arr["layer"][mask]
        for i in range(len(start)):
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
                    "tid": base + subs[i],
                    "name": tl.labels[labels[i]],
                    "cat": CATEGORIES[cats[i]],
                    "ts": float(start[i]) * US,
                    "dur": float(dur[i]) * US,
                    "args": args,
                }
            )
    for series in result.link_utilisation[:TRACE_LINK_COUNTERS]:  # busiest first
        for t, v in zip(series.times, series.values, strict=True):
            events.append(
                {"ph": "C", "pid": 4, "tid": 0, "name": series.name, "ts": t * US, "args": {"utilisation": v}}
            )
    for track in result.memory:
        for i, t in enumerate(track.times):
            args = {cat: vals[i] / 2**30 for cat, vals in track.by_category.items()}
            events.append(
                {"ph": "C", "pid": 4, "tid": 0, "name": f"memory GiB {track.device}", "ts": t * US, "args": args}
            )
    return events


def write_chrome_trace(result: Result, path: str | Path) -> None:
    doc = {"traceEvents": trace_events(result), "displayTimeUnit": "ms", "otherData": result.metrics_json()}
    write_atomic(path, json.dumps(doc, separators=(",", ":")))
