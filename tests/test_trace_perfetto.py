"""Chrome traces as Perfetto imports them, and the CSV exports beside them.

Perfetto's trace processor cannot run offline here (the ``perfetto`` package downloads it at run time),
so the test applies its JSON importer's rule (``CoerceToTs``: a number of microseconds times 1000,
rounded to the nearest nanosecond, ``ts`` and ``dur`` each on its own) and its slice tracker's rule:
complete events on one (pid, tid) must nest strictly, or the later one is dropped as
``slice_drop_overlapping_complete_event``. Before integer-nanosecond export, 2,259 of 127,624 slices of
the default project were dropped.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tilewright.engine.io.presets import DEFAULT_PROJECT, load_project_preset
from tilewright.engine.results.chrome_trace import trace_events, write_chrome_trace
from tilewright.engine.results.csv_export import write_csv
from tilewright.engine.results.result import Result, Series
from tilewright.engine.results.timeline import Timeline
from tilewright.engine.simulate import simulate


def perfetto_ns(us: float) -> int:
    """Perfetto's ``CoerceToTs`` for a JSON number: llround(value × 1000)."""
    x = us * 1000.0
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def perfetto_drops(events: list[dict]) -> list[tuple]:
    """Complete events Perfetto drops: on a track, a slice that starts inside an open slice and ends
    after it. Returns the offending (track, start, end) in ns."""
    tracks: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            s = perfetto_ns(e["ts"])
            tracks[(e["pid"], e["tid"])].append((s, s + perfetto_ns(e["dur"])))
    bad = []
    for track, slices in tracks.items():
        slices.sort(key=lambda se: (se[0], -se[1]))
        open_ends: list[int] = []
        for s, e in slices:
            while open_ends and open_ends[-1] <= s:
                open_ends.pop()
            if open_ends and e > open_ends[-1]:
                bad.append((track, s, e))
                continue
            open_ends.append(e)
    return bad


def exact_decimals(value: float) -> bool:
    """A JSON number of microseconds with at most three decimals: a whole number of nanoseconds."""
    return abs(value * 1000 - round(value * 1000)) < 1e-6 * max(1.0, abs(value))


def _bare_result(timeline: Timeline, links: list[Series] | None = None) -> Result:
    return Result(project="t", mode="train", engine="event", iteration_time_s=1.0, samples_per_iteration=1,
                  tokens_per_sample=1, model_flops_per_iteration=1.0, hardware_flops_per_iteration=1.0,
                  devices=1, peak_flops_per_device=1.0, memory_breakdown_bytes={}, time_breakdown_s={},
                  timeline=timeline, link_utilisation=links or [])


def test_back_to_back_slices_with_float_error_do_not_overlap():
    # 0.1 + 0.2 != 0.3: as float microseconds the first slice ended 1 ns after the second began
    tl = Timeline()
    lane = tl.lane("stage 0", "compute")
    t = 0.0
    for k in range(2000):
        dur = 1e-7 * (1 + k % 7) + 6.1e-10  # fractions of a nanosecond: Perfetto rounds ts and dur apart
        tl.add(lane, t, dur, "compute", "op")
        t += dur
    events = trace_events(_bare_result(tl))
    xs = [e for e in events if e["ph"] == "X"]
    assert len(xs) == 2000
    assert {e["tid"] for e in xs} == {1}  # back-to-back: one lane, no sub-lanes
    assert perfetto_drops(events) == []
    assert all(exact_decimals(e["ts"]) and exact_decimals(e["dur"]) for e in xs)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 10.0), st.floats(1e-10, 1e-2)), min_size=1, max_size=80))
def test_random_overlapping_slices_import_without_drops(spans):
    tl = Timeline()
    lane = tl.lane("stage 0", "compute")
    for start, dur in spans:
        tl.add(lane, start, dur, "compute", "op")
    events = trace_events(_bare_result(tl))
    assert sum(e["ph"] == "X" for e in events) == len(spans)
    assert perfetto_drops(events) == []


@pytest.fixture(scope="module")
def default_trace(tmp_path_factory) -> tuple[Result, dict]:
    result = simulate(load_project_preset(DEFAULT_PROJECT))
    path = tmp_path_factory.mktemp("trace") / "default.json"
    write_chrome_trace(result, path)
    return result, json.loads(path.read_text(encoding="utf-8"))


def test_default_project_trace_imports_without_dropped_slices(default_trace):
    result, doc = default_trace
    events = doc["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    assert len(xs) >= len(result.timeline) > 100_000
    assert perfetto_drops(events) == []
    assert all(exact_decimals(e["ts"]) and exact_decimals(e["dur"]) and e["dur"] >= 0 for e in xs)
    # every pid and tid that carries a slice is named
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in xs} <= named


def test_trace_text_is_real_utf8(default_trace, tmp_path):
    result, _ = default_trace
    path = tmp_path / "t.json"
    write_chrome_trace(result, path)
    text = path.read_bytes().decode("utf-8")
    assert "\\u2192" not in text and " → " in text


def test_inference_trace_and_links_csv_carry_link_data(tmp_path: Path):
    result = simulate(load_project_preset("llama2-70b-h100-inference"))
    assert result.mode == "infer" and result.link_utilisation
    path = tmp_path / "infer.json"
    write_chrome_trace(result, path)
    events = json.loads(path.read_text(encoding="utf-8"))["traceEvents"]
    assert perfetto_drops(events) == []
    link_counters = {e["name"] for e in events if e["ph"] == "C" and "utilisation" in e["args"]}
    assert link_counters and all(" → " in n for n in link_counters)
    assert max(e["args"]["utilisation"] for e in events if e["ph"] == "C" and "utilisation" in e["args"]) > 0
    links_csv = write_csv(result, tmp_path / "csv")[2].read_text(encoding="utf-8").splitlines()
    assert links_csv[0] == "link,time_s,utilisation" and len(links_csv) > 100
    assert {row.split(",")[0] for row in links_csv[1:]} == {s.name for s in result.link_utilisation}
