"""A device's own grid of cores on the canvas (``Compute.grid``) and, after a run, which cores an op's
spatial split uses and how its operands are multicast — the raster, the caption and the op chooser."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.simulate import simulate  # noqa: E402
from tilewright.studio.app import load_initial_project  # noqa: E402
from tilewright.studio.document import ProjectDocument  # noqa: E402
from tilewright.studio.model.core_grid import (  # noqa: E402
    core_caption,
    core_grid,
    multicast_lines,
    parse_split,
    used_mask,
)
from tilewright.studio.samples import dgx_project  # noqa: E402
from tilewright.studio.ui.canvas import CanvasWidget  # noqa: E402
from tilewright.studio.ui.selection import Selection  # noqa: E402
from tilewright.studio.units import format_bytes  # noqa: E402

PROJECT = "wormhole-n150-llama2-7b-inference"


@pytest.fixture(scope="module")
def n150_run():
    project = load_initial_project(PROJECT)[0]
    return project, simulate(project)


@pytest.fixture
def make_canvas(qtbot):
    def make(project):
        doc = ProjectDocument(project)
        widget = CanvasWidget(doc, Selection(doc))
        qtbot.addWidget(widget)
        widget.resize(1100, 750)
        widget.show()
        qtbot.waitExposed(widget)
        widget.zoom_to_fit()
        return widget

    return make


def _chip(widget):
    (item,) = [g for g in widget.scene.grids.values() if g.cores is not None]
    return item


# -- Qt-free ------------------------------------------------------------------------------------------
def test_parse_split_reads_the_engines_description():
    two = parse_split("2-D 8×7, 16×50 tiles/core, K-block 8, L1 block 4×25, A mcast rows, B mcast cols")
    assert (two.kind, two.rows, two.cols, two.cores, two.a_along, two.b_along) == ("2d", 8, 7, 56, "rows", "cols")
    one = parse_split("1-D 58, 1×6 tiles/core, K-block 1, A mcast to all, B split")
    assert (one.kind, one.cores, one.a_along, one.b_along) == ("1d", 58, "all", "")
    mirror = parse_split("1-D 64, 2×1 tiles/core, K-block 1, B mcast to all, A split")
    assert (mirror.a_along, mirror.b_along) == ("", "all")
    assert parse_split("2-D 4×4, 1×1 tiles/core, K-block 1, K-split 2, A mcast rows, B mcast cols").cores == 32
    assert parse_split("vector op") is None


def test_used_mask_and_multicast_lines():
    two = parse_split("2-D 8×7, 16×50 tiles/core, K-block 8, A mcast rows, B mcast cols")
    mask = used_mask(8, 8, two)
    assert mask.sum() == 56 and not mask[:, 7].any()
    lines = multicast_lines(mask, two)
    assert sum(op == "A" for op, *_ in lines) == 8  # one per used row
    assert sum(op == "B" for op, *_ in lines) == 7  # one per used column
    one = parse_split("1-D 58, 1×6 tiles/core, K-block 1, A mcast to all, B split")
    mask = used_mask(8, 8, one)
    assert mask.sum() == 58 and mask[7, :2].all() and not mask[7, 2:].any()
    assert used_mask(8, 8, None).sum() == 0


def test_core_caption_has_units(n150_run):
    project, _ = n150_run
    grid = core_grid(project.hardware.children[0])
    assert core_caption(grid) == f"8 × 8 cores · {format_bytes(grid.l1_bytes)} L1 each"  # binary, as capacities are
    assert format_bytes(grid.l1_bytes) == f"{grid.l1_bytes / 2**20:.3g} MiB"


# -- canvas -------------------------------------------------------------------------------------------
def test_grid_device_draws_its_cores(make_canvas, n150_run):
    project, _ = n150_run
    widget = make_canvas(project)
    chip = _chip(widget)
    widget.view.viewport().grab()
    assert chip.last_cores == (64, 0)  # a raster of 8 × 8 cores, none marked before a run
    assert f"8 × 8 cores · {format_bytes(core_grid(project.hardware.children[0]).l1_bytes)} L1 each" in chip.label.lines
    assert not widget.demo.op_box.isVisibleTo(widget)  # nothing to choose before a run


def test_choosing_an_op_marks_its_cores(make_canvas, n150_run):
    project, result = n150_run
    widget = make_canvas(project)
    widget.show_result(result)
    box = widget.demo.op_box
    assert box.isVisibleTo(widget) and box.count() == 1 + len(result.spatial_splits)
    index = next(i for i in range(box.count()) if "2-D 8×7" in box.itemText(i))
    box.setCurrentIndex(index)
    chip = _chip(widget)
    assert chip.core_use is not None and chip.core_use.cores == 56
    widget.view.viewport().grab()
    assert chip.last_cores == (64, 56)
    assert any("56 of 64 cores" in line for line in chip.label.lines)
    assert any("A mcast along rows" in line and "B mcast down columns" in line for line in chip.label.lines)
    assert widget.scene.doc.undo_stack.count() == 0  # an overlay, not an edit
    box.setCurrentIndex(0)
    widget.view.viewport().grab()
    assert chip.core_use is None and chip.last_cores == (64, 0)
    widget.show_result(None)  # the run forgotten: the chooser goes, so does the highlight
    assert chip.core_use is None and not box.isVisibleTo(widget)


def test_device_without_a_grid_draws_as_before(make_canvas):
    widget = make_canvas(dgx_project())
    widget.view.viewport().grab()
    for item in widget.scene.grids.values():
        assert item.cores is None and item.last_cores == (0, 0)
        assert not any("cores ·" in line for line in item.label.lines)
