"""Result-view logic without widgets: Gantt rows and level of detail, hit testing, summary text with
units, run comparison, project edits between runs, progress estimates."""

from __future__ import annotations

import numpy as np
import pytest
from tilewright.engine.results import CATEGORIES
from tilewright.studio.model.gantt_data import GanttData, link_name, time_digits
from tilewright.studio.ui.results.compare import compare_rows, signed_delta
from tilewright.studio.ui.results.progress import eta_text, human_duration
from tilewright.studio.ui.results.project_diff import project_changes
from tilewright.studio.ui.results.summary import format_bytes, format_metric, headline, result_tables
from tilewright.studio.ui.results.synthetic import synthetic_timeline, tiny_result

COMPUTE, TP, NET = CATEGORIES.index("compute"), CATEGORIES.index("tp_comm"), CATEGORIES.index("network")


@pytest.fixture(scope="module")
def tiny_gantt():
    return GanttData(tiny_result().timeline)


def test_rows_are_grouped_under_headers(tiny_gantt):
    texts = [r.text for r in tiny_gantt.rows]
    assert texts == ["COMPUTE · 2 lanes", "stage 0 · 2 devices", "stage 1 · 1 device", "LINKS · 1 lane",
                     "node[0]/gpu[0] → switch"]  # the system name common to every node id is dropped
    assert [r.is_header for r in tiny_gantt.rows] == [True, False, False, True, False]
    assert tiny_gantt.lane_row.tolist() == [1, 2, 4]


def test_exact_bars_when_zoomed_in(tiny_gantt):
    bars = tiny_gantt.bars("category", 0.0, 10.0, pixel_s=0.01)
    x, w, y = bars[COMPUTE]
    assert sorted(zip(x.tolist(), w.tolist(), y.tolist(), strict=True)) == [(0.0, 4.0, 1.0), (2.0, 4.0, 2.0),
                                                                            (6.0, 2.0, 1.0)]
    assert bars[TP][0].tolist() == [4.0] and bars[NET][2].tolist() == [4.0]
    stage = tiny_gantt.bars("stage", 0.0, 10.0, pixel_s=0.01)
    assert set(stage) == {-1, 0, 1}  # the link slice has no stage
    assert tiny_gantt.bars("category", 8.5, 9.5, pixel_s=0.01) == {}  # nothing runs then


def test_zoomed_out_cells_take_the_colour_covering_most():
    """Sub-pixel slices alternate compute (3 units) and tp_comm (1 unit): zoomed out, every pixel column
    is compute; zoomed in, the tp_comm slices show again."""
    from tilewright.engine.results import Timeline

    tl = Timeline()
    lane = tl.lane("stage 0", "compute")
    for i in range(1000):
        tl.add(lane, i * 4e-3, 3e-3, "compute", "f")
        tl.add(lane, i * 4e-3 + 3e-3, 1e-3, "tp_comm", "ar")
    data = GanttData(tl)
    out = data.bars("category", 0.0, 4.0, pixel_s=0.04)  # 10 slices per pixel
    assert set(out) == {COMPUTE}
    assert out[COMPUTE][1].sum() == pytest.approx(4.0)  # one merged run covering the lane
    zoomed = data.bars("category", 0.0, 0.04, pixel_s=1e-4)
    assert set(zoomed) == {COMPUTE, TP} and len(zoomed[TP][0]) == 10


def test_million_slices_reduce_to_what_a_screen_can_show():
    data = GanttData(synthetic_timeline(1_000_000))
    assert len(data) == 1_000_000
    pixel = data.span / 1500
    bars = data.bars("category", 0.0, data.span, pixel, rows=(0, 30))
    count = sum(len(x) for x, _, _ in bars.values())
    assert 0 < count <= 31 * 1501  # at most one bar per visible row and pixel column
    widths = np.concatenate([w for _, w, _ in bars.values()])
    assert widths.min() >= pixel * (1 - 1e-9)  # nothing narrower than a pixel


def test_hover_finds_slice_and_describes_it_with_units(tiny_gantt):
    i = tiny_gantt.slice_at(0, 4.5)
    text = tiny_gantt.describe(i)
    assert text.splitlines()[0] == "all-reduce block0"
    assert "tp comm · stage 0 · layer 0 · micro-batch 0" in text
    assert "start 4 s · duration 1 s · end 5 s" in text
    assert tiny_gantt.slice_at(0, 5.5) is None
    assert tiny_gantt.slice_at(0, 5.5, tolerance=0.6) is not None  # near enough to a neighbour
    assert tiny_gantt.slice_at(7, 1.0) is None


def test_times_keep_enough_digits_to_show_a_short_slice():
    assert time_digits(0.105, 92e-6) >= 5  # "104.965 ms", not "105 ms"
    assert time_digits(4.0, 1.0) == 3
    port = "die[4,0]/dram@west[0]/ctrl → die[4,0]/dram@west[0]"
    assert link_name(port) == "die[4,0]/dram@west[0]/ctrl → …/dram@west[0]"
    assert link_name("node[1]/gpu[0] → switch") == "node[1]/gpu[0] → switch"


def test_every_summary_number_carries_a_unit():
    tables = dict(result_tables(tiny_result()))
    run = dict(tables["Run"])
    assert run["iteration time"] == "10 s"
    assert run["throughput"] == "0.8 samples/s"
    assert run["token throughput"] == "819 tokens/s"
    assert run["MFU"] == "100.0 %"
    assert run["peak memory"] == "70 GiB"
    assert dict(tables["Time per iteration"])["tp comm"] == "1 s"
    assert dict(tables["OUT OF MEMORY"])["sys/node[1]/gpu[0]"] == "needs 22 GiB, has 16 GiB"
    for _title, rows in result_tables(tiny_result()):
        for label, value in rows:
            if any(ch.isdigit() for ch in value) and label not in ("engine", "mode"):
                assert any(u in value for u in ("s", "B", "%", "FLOP", "devices", "events")), (label, value)
    assert format_metric("ttft_s", None) == "—"
    assert format_bytes(192 * 2**20) == "192 MiB"


def test_headline_leads_with_out_of_memory():
    text = headline(tiny_result())
    assert text.startswith("<span style='color:#c0392b'><b>OUT OF MEMORY</b> on sys/node[1]/gpu[0]")
    assert "<b>10 s</b> per iteration" in text and "MFU 100.0 %" in text and "peak memory 70 GiB" in text


def test_compare_rows_have_signed_deltas_in_units_and_judge_direction():
    a = {"iteration_time_s": 12.8, "tokens_per_s": 10_230.0, "mfu": 0.551, "peak_memory_bytes": 64 * 2**30,
         "time_breakdown_s": {"compute": 9.9, "bubble": 0.6}}
    b = {"iteration_time_s": 11.2, "tokens_per_s": 11_700.0, "mfu": 0.60, "peak_memory_bytes": 70 * 2**30,
         "time_breakdown_s": {"compute": 9.9, "bubble": 0.2}, "oom": {"device": "x"}}
    rows = {r.label: r for r in compare_rows(a, b)}
    assert (rows["iteration time"].delta, rows["iteration time"].relative, rows["iteration time"].better) == (
        "−1.6 s", "−12.5 %", True)
    assert rows["MFU"].delta == "+4.9 pp" and rows["MFU"].better is True
    assert rows["peak memory"].delta == "+6 GiB" and rows["peak memory"].better is False
    assert rows["time: bubble"].delta == "−400 ms"
    assert rows["time: compute"].better is None
    assert (rows["out of memory"].a, rows["out of memory"].b, rows["out of memory"].better) == ("no", "yes", False)
    assert signed_delta("tokens_per_s", 1470.0) == "+1.47 ktokens/s"


def test_project_changes_name_the_edit_and_ignore_canvas_layout():
    from tilewright.studio.samples import dgx_project

    before = dgx_project()
    after = before.model_copy(update={"mapping": before.mapping.model_copy(update={"tp": 4})})
    assert project_changes(before, after) == ["mapping.tp: 8 → 4"]
    moved = before.model_copy(update={"canvas": before.canvas.model_copy(update={"notes": "moved"})})
    assert project_changes(before, moved) == []


def test_time_left_estimate():
    assert eta_text(0.1, 0.5) == "estimating the time left…"
    assert eta_text(2.0, 0.01) == "estimating the time left…"
    assert eta_text(3.0, 0.25) == "about 9 s left"
    assert eta_text(60.0, 0.1) == "about 9 min 0 s left"
    assert human_duration(0.42) == "420 ms"
    assert human_duration(4000) == "1 h 6 min"
