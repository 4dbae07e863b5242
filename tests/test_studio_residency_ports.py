"""Residency per memory level (``Result.residency``, the memory view) and DRAM port load
(``Result.dram_ports``, the link view's traffic table): the views show what the engine computed, with units."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from collections import defaultdict  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from tilewright.engine.ir.hardware import Interleave  # noqa: E402
from tilewright.engine.simulate import simulate  # noqa: E402
from tilewright.studio.app import load_initial_project  # noqa: E402
from tilewright.studio.model.metrics import time_span  # noqa: E402
from tilewright.studio.model.residency_rows import HEADER, gib, level_rows, stage_of  # noqa: E402
from tilewright.studio.model.split_traffic import format_traffic  # noqa: E402
from tilewright.studio.ui.results.links_view import LinksView  # noqa: E402
from tilewright.studio.ui.results.memory_view import MemoryView  # noqa: E402
from tilewright.studio.ui.results.time_cursor import TimeCursor  # noqa: E402
from tilewright.studio.units import format_percent  # noqa: E402


@pytest.fixture(scope="module")
def n150():
    project = load_initial_project("wormhole-n150-llama2-7b-inference")[0]
    return project, simulate(project)


@pytest.fixture(scope="module")
def wse2():
    project = load_initial_project("cerebras-wse2-llama2-7b-inference")[0]
    return project, simulate(project)


@pytest.fixture(scope="module")
def palm():
    project = load_initial_project("palm-wafer-t18b")[0]
    return project, simulate(project)


def _memory_view(qtbot, result) -> MemoryView:
    view = MemoryView(TimeCursor())
    qtbot.addWidget(view)
    view.set_result(result)
    return view


# -- the result ----------------------------------------------------------------------------------------
def test_residency_without_memory_levels_is_the_devices_own_memory(n150):
    project, result = n150
    (row,) = result.residency
    assert row["memory_levels"] == {} and row["device"] == result.memory[0].device
    (level,) = row["levels"]
    gddr = project.hardware.children[0].memories[0]
    assert (level["level"], level["memory"], level["capacity_bytes"]) == ("dram", gddr.name, gddr.capacity_bytes)
    assert level["track"] in {t.device for t in result.memory}


def test_residency_follows_memory_levels(wse2):
    project, result = wse2
    assert len(result.residency) == project.mapping.pp
    tracks = {t.device for t in result.memory}
    for row in result.residency:
        assert row["memory_levels"] == dict(project.mapping.memory_levels)
        for cat, name in project.mapping.memory_levels.items():  # the named memory holds the category
            assert any(lv["memory"] == name and cat in lv["categories"] for lv in row["levels"])
        assert all(lv["track"] in tracks for lv in row["levels"])


def test_port_bytes_are_the_link_series_integrals(palm):
    _, result = palm
    span = result.iteration_time_s
    series = {(s.src, s.dst): s for s in result.link_utilisation}
    assert result.dram_ports
    for port in result.dram_ports:
        read = series.get((port["port"], f"{port['port']}/ctrl"))
        mean = read.mean(span) if read is not None else 0.0
        assert port["read_bytes"] == pytest.approx(mean * span * port["read_bandwidth_bytes_per_s"])


def test_interleaved_ports_share_evenly(palm):
    project, _ = palm
    even = project.model_copy(deep=True)
    for die in even.hardware.children:
        for memory in die.memories:
            memory.interleave = Interleave.interleaved
    result = simulate(even)
    by_owner: dict[str, list[float]] = defaultdict(list)
    for port in result.dram_ports:
        assert port["interleave"] == "interleaved"
        by_owner[port["owner"]].append(port["read_bytes"] + port["write_bytes"])
    assert any(sum(v) > 0 for v in by_owner.values())
    for totals in by_owner.values():  # every device spreads its pages over all ports of its die's memory
        assert max(totals) == pytest.approx(min(totals), rel=1e-6)


# -- the views -----------------------------------------------------------------------------------------
def test_memory_view_shows_residency_with_units(qtbot, n150):
    _, result = n150
    view = _memory_view(qtbot, result)
    assert view.residency.isVisibleTo(view) and view.residency.topLevelItemCount() == 1
    item = view.residency.topLevelItem(0)
    cells = {HEADER[i]: item.text(i) for i in range(len(HEADER))}
    track = result.memory[0]
    assert cells["capacity"] == gib(track.capacity_bytes) and cells["capacity"].endswith("GiB")
    assert cells["weights"] == gib(float(np.max(track.by_category["weights"])))
    assert cells["KV cache"] == gib(float(np.max(track.by_category["kv_cache"])))
    assert cells["bandwidth"].endswith("B/s")
    assert cells["peak used"].startswith(gib(track.peak()))
    assert "memory_levels not set" in view.setting.text()


def test_memory_view_names_the_levels_set(qtbot, wse2):
    project, result = wse2
    view = _memory_view(qtbot, result)
    text = view.setting.text()
    for cat, name in project.mapping.memory_levels.items():
        assert f"{cat} → {name}" in text
    row = stage_of(result, view.track.device)
    (level,) = level_rows(result, row)
    item = view.residency.topLevelItem(0)
    assert item.text(0) == "SRAM" == level.level and item.text(2) == gib(level.capacity)


def test_link_view_lists_every_port_with_units(qtbot, palm):
    _, result = palm
    view = LinksView(TimeCursor())
    qtbot.addWidget(view)
    view.set_result(result)
    group = view.traffic.topLevelItem(0)
    assert group.text(0).startswith(f"DRAM ports over the run — {len(result.dram_ports)} DRAM ports (nearest)")
    assert group.childCount() == len(result.dram_ports)
    span = time_span(result)
    top = max(result.dram_ports, key=lambda p: p["read_bytes"] + p["write_bytes"])
    first = group.child(0)
    util = max(
        top["read_bytes"] / (top["read_bandwidth_bytes_per_s"] * span),
        top["write_bytes"] / (top["write_bandwidth_bytes_per_s"] * span),
    )
    assert first.text(2).startswith(format_percent(util))
    total = top["read_bytes"] + top["write_bytes"]
    if top["write_bytes"] == 0:  # every DRAM stream is timed as a read: one total, no "write 0 B"
        assert first.text(1) == f"{format_traffic(total)} read + written"
        assert first.text(2).endswith("of its read channel") and "read channel" in first.text(3)
    else:
        assert first.text(1) == f"read {format_traffic(top['read_bytes'])} · write {format_traffic(top['write_bytes'])}"
    assert "write 0 B" not in " ".join(group.child(i).text(1) for i in range(group.childCount()))


def test_die_view_labels_each_port_with_its_load(qtbot, palm):
    from tilewright.studio.document import ProjectDocument
    from tilewright.studio.ui.canvas import CanvasWidget
    from tilewright.studio.ui.selection import Selection

    project, result = palm
    doc = ProjectDocument(project)
    selection = Selection(doc)
    widget = CanvasWidget(doc, selection)
    qtbot.addWidget(widget)
    widget.resize(1100, 750)
    widget.show()
    qtbot.waitExposed(widget)
    selection.set_level("palm-wafer/die")  # one die's inside: its DRAM port boxes on the west and east edges
    frame = widget.scene.frame
    assert frame.loads == {} and frame.load_labels == []  # nothing before a run
    widget.show_result(result)
    frame = widget.scene.frame
    owner = widget.scene.level_node
    mine = {p["port"].rpartition("/")[2]: p for p in result.dram_ports if p["port"].rpartition("/")[0] == owner}
    assert set(frame.loads) == set(mine) == set(frame.port_names)
    assert len(frame.load_labels) == len(mine)
    for name, port in mine.items():
        total = port["read_bytes"] + port["write_bytes"]
        assert frame.loads[name].startswith(f"{format_traffic(total)} read + written" if port["write_bytes"] == 0
                                            else f"read {format_traffic(port['read_bytes'])} · write ")
        assert frame.loads[name].endswith("% busy")
    widget.show_result(None)
    assert widget.scene.frame.load_labels == []
