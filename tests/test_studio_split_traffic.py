"""Which core holds which block of an op, the op's NoC multicast bytes per link and its DRAM bytes — read back
from the engine's split and checked against the engine's own cost model; and what the canvas, the link view
and the main window show of them after a run."""

from __future__ import annotations

import os
from dataclasses import replace

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import QEvent, QPointF  # noqa: E402
from PySide6.QtWidgets import QGraphicsSceneHoverEvent  # noqa: E402
from tilewright.engine.perf.spatial_chip import grid_chip  # noqa: E402
from tilewright.engine.perf.spatial_cost import gemm_cost  # noqa: E402
from tilewright.engine.perf.spatial_traffic import restreams  # noqa: E402
from tilewright.engine.results.split_traffic import SplitReader, parse_split  # noqa: E402
from tilewright.engine.simulate import simulate  # noqa: E402
from tilewright.studio.app import load_initial_project  # noqa: E402
from tilewright.studio.document import ProjectDocument  # noqa: E402
from tilewright.studio.model.core_grid import (  # noqa: E402
    core_block_caption,
    grid_device,
    multicast_lines,
    op_uses,
    traffic_caption,
    used_mask,
)
from tilewright.studio.model.core_grid import parse_split as parse_split_use  # noqa: E402
from tilewright.studio.model.split_traffic import (  # noqa: E402
    block_bytes,
    core_blocks,
    format_traffic,
    link_totals,
    multicast_loads,
)
from tilewright.studio.model.traffic_rows import op_rows  # noqa: E402
from tilewright.studio.ui.canvas import CanvasWidget  # noqa: E402
from tilewright.studio.ui.canvas.core_paint import core_area  # noqa: E402
from tilewright.studio.ui.results.links_view import LinksView  # noqa: E402
from tilewright.studio.ui.results.time_cursor import TimeCursor  # noqa: E402
from tilewright.studio.ui.selection import Selection  # noqa: E402
from tilewright.studio.units import BYTES_PER_S, format_value  # noqa: E402

PROJECT = "wormhole-n150-llama2-7b-inference"


@pytest.fixture(scope="module")
def n150_run():
    project = load_initial_project(PROJECT)[0]
    return project, simulate(project)


def _use(project, result, op: str, where: str):
    return next(
        use for text, use in op_uses(project, result.spatial_splits) if f"{where} · " in text and f"× {op}:" in text
    )


def _device(project):
    device = grid_device(project.hardware)
    return device, device.compute.grid


# -- Qt-free: the split read back by the engine, and the studio draws the engine's numbers -------------
def test_parse_split_reads_every_field():
    s, sharded = parse_split(
        "2-D 8×7, 16×50 tiles/core, K-block 8, L1 block 4×25, K-split 2, A mcast rows, B mcast cols"
    )
    assert (s.kind, s.rows, s.cols, s.per_m, s.per_n, s.block_k, s.out_h, s.out_w, s.k_split) == (
        "2d", 8, 7, 16, 50, 8, 4, 25, 2
    )
    assert not sharded and restreams(s) == (2, 4)  # re-streams when the block does not fit L1
    one, sharded = parse_split("1-D 64, 1×6 tiles/core, K-block 1, A mcast to all, B split")
    assert (one.kind, one.rows * one.cols, one.out_h, one.out_w, sharded) == ("1d_in0", 64, 1, 6, False)
    mirror, _ = parse_split("1-D 64, 2×1 tiles/core, K-block 1, B mcast to all, A split")
    assert (mirror.kind, mirror.rows, mirror.cols) == ("1d_in1", 64, 1)
    assert parse_split("1-D 64, 1×6 tiles/core, K-block 1, A mcast to all, B split, B DRAM-sharded")[1]
    assert parse_split("input grad 2-D 8×8, 1×1 tiles/core, K-block 1; weight grad 2-D …") is None
    text = "2-D 8×7, 16×50 tiles/core, K-block 8, L1 block 4×25, K-split 2, A mcast rows, B mcast cols"
    assert parse_split(text)[0].describe() == text  # the inverse of the engine's own description


def test_dram_bytes_are_the_cost_models(n150_run):
    """The op's DRAM bytes the studio shows equal what ``gemm_cost`` counts for that split and GEMM."""
    project, result = n150_run
    device, grid = _device(project)
    chip = grid_chip(device.compute, device.memories[0])
    for op in ("qkv", "mlp_up"):
        rec = _use(project, result, op, "prefill").record
        cost = gemm_cost(chip, rec.problem, rec.split)
        assert rec.traffic.dram.read == cost.dram_read_bytes
        assert rec.traffic.dram.write == cost.dram_write_bytes
        mt, kt, nt = rec.problem.tiles(grid.tile)
        assert rec.traffic.dram.write == mt * nt * chip.tile_bytes("bf16")  # C written once, activations bf16


def test_multicast_crosses_each_link_once(n150_run):
    project, result = n150_run
    _, grid = _device(project)
    rec = _use(project, result, "mlp_up", "prefill").record  # 2-D 8×7 on the 8×8 grid
    s = rec.split
    loads = multicast_loads(rec)
    a = [ld for ld in loads if ld.operand == "A"]
    b = [ld for ld in loads if ld.operand == "B"]
    assert len(a) == s.rows * (s.cols - 1) and len(b) == s.cols * (s.rows - 1)
    assert len({(ld.src, ld.dst) for ld in a}) == len(a)  # one tree, each link once
    assert all(ld.src[0] == ld.dst[0] and ld.dst[1] == ld.src[1] + 1 for ld in a)  # east along rows
    assert all(ld.src[1] == ld.dst[1] and ld.dst[0] == ld.src[0] + 1 for ld in b)  # south down columns
    exact = _use(project, result, "out_proj", "prefill").record  # 2-D 8×8 on whole blocks
    s, d = exact.split, exact.traffic.dram
    loads = multicast_loads(exact)  # each row's A panel is read once from DRAM and crosses the row's cols - 1 links
    assert sum(ld.nbytes for ld in loads if ld.operand == "A") == pytest.approx(d.read_a * (s.cols - 1))
    assert sum(ld.nbytes for ld in loads if ld.operand == "B") == pytest.approx(d.read_b * (s.rows - 1))
    one = _use(project, result, "qkv", "decode").record  # 1-D over 64 cores: one tree reaching every core
    tree = multicast_loads(one)
    assert len(tree) == one.split.cols - 1 and {ld.operand for ld in tree} == {"A"}
    assert all(ld.nbytes == pytest.approx(one.traffic.dram.read_a) for ld in tree)
    assert {(ld.src, ld.dst) for ld in tree} == set(link_totals(one))  # the heat map's links are the tree's


def test_the_arrows_are_the_engines_trees(n150_run):
    """The canvas's multicast arrows follow the engine's trees: one per row (A) and column (B) of a 2-D
    split, and K-split groups apart — two groups side by side are two A lines per row, not one."""
    project, result = n150_run
    use = _use(project, result, "mlp_up", "prefill")
    lines = multicast_lines(used_mask(8, 8, use), use)
    s = use.record.split
    assert sorted(ln for ln in lines if ln[0] == "A") == [("A", (r, 0), (r, s.cols - 1)) for r in range(s.rows)]
    assert sorted(ln for ln in lines if ln[0] == "B") == [("B", (0, c), (s.rows - 1, c)) for c in range(s.cols)]
    text = "2-D 2×4, 1×2 tiles/core, K-block 4, K-split 2, A mcast rows, B mcast cols"
    rec = SplitReader(project).record("mlp_up", text)
    ksplit = replace(parse_split_use(text, "mlp_up"), record=rec)
    mask = used_mask(8, 8, ksplit)
    assert mask.sum() == 16 and mask[:2].all() and not mask[2:].any()
    a = sorted(ln for ln in multicast_lines(mask, ksplit) if ln[0] == "A")
    assert a == [("A", (0, 0), (0, 3)), ("A", (0, 4), (0, 7)), ("A", (1, 0), (1, 3)), ("A", (1, 4), (1, 7))]
    assert len(rec.traffic.link_loads("A")) == 2 * 2 * 3  # two groups × two rows × three links


def test_the_studio_shows_the_engines_json_numbers(n150_run):
    """What ``--json`` carries per split (the run's rows) is what the studio's record holds: one source."""
    project, result = n150_run
    checked = 0
    for text, use in op_uses(project, result.spatial_splits):
        row = next(r for r in result.spatial_splits if text.endswith(f"× {r['op']}: {r['split']}")
                   and text.startswith(r["where"]))
        if use.record is None:  # not a GEMM split (attention streamed over the cores): no trees, no traffic
            assert "traffic" not in row
            continue
        assert row["traffic"] == use.record.traffic.summary()
        checked += 1
    assert checked >= 10


def test_a_dram_sharded_b_reads_at_the_bank_adjacent_rate(n150_run):
    project, result = n150_run
    use = _use(project, result, "qkv", "decode")
    assert use.record.b_sharded
    rows = {r.what: r for r in op_rows(use)}
    chip = use.record.chip
    local, interleaved = chip.dram_read_Bps(interleaved=False), chip.dram_read_Bps()
    assert local > interleaved > 0  # bank-adjacent readers beat interleaved pages
    assert f"at {format_value(local, BYTES_PER_S)}" in rows["DRAM read B"].rate
    assert f"at {format_value(interleaved, BYTES_PER_S)}" in rows["DRAM read A"].rate
    assert "DRAM-sharded" in rows["DRAM read B"].note
    plain = replace(use, record=replace(use.record, b_sharded=False))
    assert f"at {format_value(interleaved, BYTES_PER_S)}" in {r.what: r for r in op_rows(plain)}["DRAM read B"].rate


def test_every_used_core_holds_its_own_block(n150_run):
    project, result = n150_run
    _, grid = _device(project)
    for _text, use in op_uses(project, result.spatial_splits):
        if use.record is None:  # attention streamed over the cores: which cores, no blocks of a GEMM
            assert used_mask(grid.rows, grid.cols, use).sum() == min(use.cores, grid.rows * grid.cols)
            continue
        blocks = core_blocks(grid.rows, grid.cols, use.record)
        used = [tuple(b) for b in blocks.reshape(-1, 3) if b[0] >= 0]
        assert len(used) == len(set(used)) == min(use.cores, grid.rows * grid.cols)
        assert (blocks[..., 0] >= 0).tolist() == used_mask(grid.rows, grid.cols, use).tolist()
        s = use.record.split
        assert block_bytes(use.record) == s.per_m * s.per_n * grid.tile**2 * 2  # bf16 output tiles


def test_captions_carry_units(n150_run):
    project, result = n150_run
    _, grid = _device(project)
    use = _use(project, result, "out_proj", "prefill")
    s = use.record.split
    caption = core_block_caption(use)
    assert f"{s.per_m} × {s.per_n} tiles" in caption
    assert f"{s.per_m * grid.tile} × {s.per_n * grid.tile} elements" in caption
    assert format_traffic(block_bytes(use.record)) in caption and caption.split()[-2].endswith("B")
    lines = traffic_caption(use, grid.rows, grid.cols)
    top_a = max(ld.nbytes for ld in multicast_loads(use.record) if ld.operand == "A")
    assert f"A {format_traffic(top_a)}/link" in lines[0]
    assert f"busiest link {format_traffic(max(link_totals(use.record).values()))}" in lines[0]
    assert lines[-1].startswith("DRAM per op: read A")
    assert format_traffic(use.record.traffic.dram.write) in lines[-1]


# -- the canvas, the link view, the main window ---------------------------------------------------------
def test_canvas_caption_lists_blocks_and_traffic(qtbot, n150_run):
    project, result = n150_run
    doc = ProjectDocument(project)
    widget = CanvasWidget(doc, Selection(doc))
    qtbot.addWidget(widget)
    widget.resize(1100, 750)
    widget.show()
    qtbot.waitExposed(widget)
    widget.show_result(result)
    box = widget.demo.op_box
    index = next(i for i in range(box.count()) if "prefill · 32 × mlp_up" in box.itemText(i))
    box.setCurrentIndex(index)
    (chip,) = [g for g in widget.scene.grids.values() if g.cores is not None]
    use = box.currentData()
    assert use.record is not None and chip.core_use == use
    widget.view.zoom_by(4.0)  # cores large enough for their block labels and link bars
    widget.view.centerOn(chip.sceneBoundingRect().center())
    widget.view.viewport().grab()
    assert chip.last_cores == (64, 56)
    assert core_block_caption(use) in chip.label.lines
    for line in traffic_caption(use, 8, 8):
        assert line in chip.label.lines
    assert doc.undo_stack.count() == 0  # an overlay of a run, never an edit
    # hovering core (2, 3): its tooltip names the block it holds, from the split, with sizes and units
    raster, size = core_area(chip.core_areas[0], 8, 8)
    event = QGraphicsSceneHoverEvent(QEvent.Type.GraphicsSceneHoverMove)
    event.setPos(QPointF(raster.left() + 3.5 * size, raster.top() + 2.5 * size))
    chip.hoverMoveEvent(event)
    tip = chip.toolTip()
    s, t = use.record.split, use.record.chip.tile
    assert tip.startswith("core (2, 3): output block (2, 3) of mlp_up")
    assert f"C rows {2 * s.per_m * t}–{3 * s.per_m * t - 1}, columns {3 * s.per_n * t}–{4 * s.per_n * t - 1}" in tip
    assert core_block_caption(use) in tip
    event.setPos(QPointF(raster.left() + 7.5 * size, raster.top() + 0.5 * size))  # column 7: not in the 8×7 split
    chip.hoverMoveEvent(event)
    assert chip.toolTip().startswith("core (0, 7): idle in mlp_up")


def test_link_view_lists_the_ops_traffic(qtbot, n150_run):
    project, result = n150_run
    view = LinksView(TimeCursor())
    qtbot.addWidget(view)
    view.set_result(result)
    use = _use(project, result, "qkv", "prefill")
    view.set_op(use, (8, 8))
    group = view.traffic.topLevelItem(0)
    rows = {group.child(i).text(0): group.child(i) for i in range(group.childCount())}
    loads = multicast_loads(use.record)
    a = rows[f"NoC multicast A ({use.record.problem.fmt_a})"]
    assert a.text(1) == f"{format_traffic(max(ld.nbytes for ld in loads if ld.operand == 'A'))} per link"
    assert a.text(2).startswith(f"{sum(ld.operand == 'A' for ld in loads)} links")
    dram = rows["DRAM read B"]
    assert dram.text(1) == format_traffic(use.record.traffic.dram.read_b) and "GB/s" in dram.text(2)
    busiest = rows["NoC busiest link"]
    assert busiest.text(1) == format_traffic(max(link_totals(use.record).values()))
    assert "s at" in dram.text(2)  # a time with its unit, at a bandwidth with its unit
    view.set_op(None)
    assert not view.traffic.topLevelItem(0).text(0).startswith("op ")  # the op's group goes with the choice


def test_choosing_an_op_on_the_canvas_reaches_the_link_view(make_window, n150_run):
    project, result = n150_run
    window = make_window(project, persist=False)
    window.results.show_result(result, 0.1)
    window.results.flush()
    window.canvas.show_result(result)
    box = window.canvas.demo.op_box
    box.setCurrentIndex(next(i for i in range(box.count()) if "decode · 32 × mlp_down" in box.itemText(i)))
    assert window.results.links.op_use == box.currentData()
    assert window.results.links.grid_shape == (8, 8)
    box.setCurrentIndex(0)
    assert window.results.links.op_use is None
