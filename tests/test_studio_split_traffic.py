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
from tilewright.engine.perf.spatial_cost import GemmProblem, Split, gemm_cost  # noqa: E402
from tilewright.engine.simulate import simulate  # noqa: E402
from tilewright.studio.app import load_initial_project  # noqa: E402
from tilewright.studio.document import ProjectDocument  # noqa: E402
from tilewright.studio.model.core_grid import core_block_caption, grid_device, op_uses, traffic_caption  # noqa: E402
from tilewright.studio.model.split_traffic import (  # noqa: E402
    block_bytes,
    core_blocks,
    format_traffic,
    multicast_loads,
    op_dram,
    parse_shape,
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


# -- Qt-free: the split read back, and the engine's cost model agrees ------------------------------------
def test_parse_shape_reads_every_field():
    s = parse_shape("2-D 8×7, 16×50 tiles/core, K-block 8, L1 block 4×25, K-split 2, A mcast rows, B mcast cols")
    assert (s.kind, s.rows, s.cols, s.per_m, s.per_n, s.block_k, s.out_h, s.out_w, s.k_split) == (
        "2d",
        8,
        7,
        16,
        50,
        8,
        4,
        25,
        2,
    )
    assert (s.a_reads, s.b_reads) == (2, 4)  # re-streams when the block does not fit L1
    one = parse_shape("1-D 64, 1×6 tiles/core, K-block 1, A mcast to all, B split")
    assert (one.kind, one.cols, one.out_h, one.out_w) == ("1d_in0", 64, 1, 6)
    assert parse_shape("1-D 64, 2×1 tiles/core, K-block 1, B mcast to all, A split").kind == "1d_in1"
    assert not one.b_sharded
    assert parse_shape("1-D 64, 1×6 tiles/core, K-block 1, A mcast to all, B split, B DRAM-sharded").b_sharded
    assert parse_shape("input grad 2-D 8×8, 1×1 tiles/core, K-block 1; weight grad 2-D …") is None


def test_dram_bytes_are_the_cost_models(n150_run):
    """The op's DRAM bytes read back from its split equal what ``gemm_cost`` counts for that split."""
    project, result = n150_run
    device, grid = _device(project)
    chip = grid_chip(device.compute, device.memories[0])
    for op in ("qkv", "mlp_up"):
        use = _use(project, result, op, "prefill")
        s, g = use.shape, use.gemm
        split = Split(s.kind, s.rows, s.cols, s.per_m, s.per_n, s.block_k, s.out_h, s.out_w, 1, 1, s.k_split)
        problem = GemmProblem(
            g.m_tiles * grid.tile, g.k_tiles * grid.tile, g.n_tiles * grid.tile, g.fmt_a, g.fmt_b, g.fmt_a, "HiFi2"
        )
        cost = gemm_cost(chip, problem, split)
        d = op_dram(s, g)
        assert d.read_a + d.read_b == pytest.approx(cost.dram_read_bytes)
        assert d.write == pytest.approx(cost.dram_write_bytes)


def test_multicast_crosses_each_link_once(n150_run):
    project, result = n150_run
    _, grid = _device(project)
    use = _use(project, result, "mlp_up", "prefill")  # 2-D 8×7 on the 8×8 grid
    s, g = use.shape, use.gemm
    loads = multicast_loads(grid.rows, grid.cols, s, g)
    a = [ld for ld in loads if ld.operand == "A"]
    b = [ld for ld in loads if ld.operand == "B"]
    assert len(a) == s.rows * (s.cols - 1) and len(b) == s.cols * (s.rows - 1)
    assert len({(ld.src, ld.dst) for ld in a}) == len(a)  # one tree, each link once
    assert all(ld.src[0] == ld.dst[0] and ld.dst[1] == ld.src[1] + 1 for ld in a)  # east along rows
    assert all(ld.src[1] == ld.dst[1] and ld.dst[0] == ld.src[0] + 1 for ld in b)  # south down columns
    exact = _use(project, result, "qkv", "prefill")  # 2-D 8×8 on whole blocks: the panels are the operands
    s, g = exact.shape, exact.gemm
    loads = multicast_loads(grid.rows, grid.cols, s, g)
    d = op_dram(s, g)  # each row's A panel is read once from DRAM and crosses the row's cols - 1 links
    assert sum(ld.nbytes for ld in loads if ld.operand == "A") == pytest.approx(d.read_a * (s.cols - 1))
    assert sum(ld.nbytes for ld in loads if ld.operand == "B") == pytest.approx(d.read_b * (s.rows - 1))
    one = _use(project, result, "qkv", "decode")  # 1-D over 64 cores: one tree reaching every core
    tree = multicast_loads(grid.rows, grid.cols, one.shape, one.gemm)
    assert len(tree) == one.shape.cols - 1 and {ld.operand for ld in tree} == {"A"}
    assert all(ld.nbytes == pytest.approx(op_dram(one.shape, one.gemm).read_a) for ld in tree)


def test_a_dram_sharded_b_reads_at_the_bank_adjacent_rate(n150_run):
    project, result = n150_run
    use = _use(project, result, "qkv", "decode")
    sharded = replace(use, shape=replace(use.shape, b_sharded=True))
    rows = {r.what: r for r in op_rows(sharded, 8, 8)}
    assert use.dram_local_bps > use.dram_read_bps > 0  # bank-adjacent readers beat interleaved pages
    assert f"at {format_value(use.dram_local_bps, BYTES_PER_S)}" in rows["DRAM read B"].rate
    assert f"at {format_value(use.dram_read_bps, BYTES_PER_S)}" in rows["DRAM read A"].rate
    assert "DRAM-sharded" in rows["DRAM read B"].note


def test_every_used_core_holds_its_own_block(n150_run):
    project, result = n150_run
    _, grid = _device(project)
    for _text, use in op_uses(project, result.spatial_splits):
        blocks = core_blocks(grid.rows, grid.cols, use.shape)
        used = [tuple(b) for b in blocks.reshape(-1, 3) if b[0] >= 0]
        assert len(used) == len(set(used)) == min(use.cores, grid.rows * grid.cols)
        assert block_bytes(use.shape, use.gemm) == use.shape.per_m * use.shape.per_n * use.gemm.out_tile_bytes


def test_captions_carry_units(n150_run):
    project, result = n150_run
    _, grid = _device(project)
    use = _use(project, result, "qkv", "prefill")
    caption = core_block_caption(use)
    assert f"{use.shape.per_m} × {use.shape.per_n} tiles" in caption
    assert f"{use.shape.per_m * grid.tile} × {use.shape.per_n * grid.tile} elements" in caption
    assert format_traffic(block_bytes(use.shape, use.gemm)) in caption and caption.split()[-2].endswith("B")
    lines = traffic_caption(use, grid.rows, grid.cols)
    top_a = max(ld.nbytes for ld in multicast_loads(grid.rows, grid.cols, use.shape, use.gemm) if ld.operand == "A")
    assert f"A {format_traffic(top_a)}/link" in lines[0]
    assert lines[-1].startswith("DRAM per op: read A")
    assert format_traffic(op_dram(use.shape, use.gemm).write) in lines[-1]


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
    assert use.gemm is not None and chip.core_use == use
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
    s, t = use.shape, use.gemm.tile
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
    loads = multicast_loads(8, 8, use.shape, use.gemm)
    a = rows[f"NoC multicast A ({use.gemm.fmt_a})"]
    assert a.text(1) == f"{format_traffic(max(ld.nbytes for ld in loads if ld.operand == 'A'))} per link"
    assert a.text(2).startswith(f"{sum(ld.operand == 'A' for ld in loads)} links")
    dram = rows["DRAM read B"]
    assert dram.text(1) == format_traffic(op_dram(use.shape, use.gemm).read_b) and "GB/s" in dram.text(2)
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
