"""The Gantt's rows in a small results dock: every row shown gets its label when there is room, the rows
not shown are reachable by a visible scroll bar, and where labels must be thinned (zoomed out) the title
says so and hovering a row names it."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.studio.model.gantt_data import GanttData  # noqa: E402
from tilewright.studio.ui.results.gantt import MIN_ROWS, GanttView  # noqa: E402
from tilewright.studio.ui.results.lane_axis import LINE_PX  # noqa: E402
from tilewright.studio.ui.results.lane_scroll import STEPS_PER_ROW  # noqa: E402
from tilewright.studio.ui.results.synthetic import synthetic_timeline  # noqa: E402
from tilewright.studio.ui.results.time_cursor import TimeCursor  # noqa: E402


@pytest.fixture
def small(qtbot):
    """84 rows (20 compute and 64 link lanes, two headers) in a dock about as tall as at 1280 × 720."""
    view = GanttView(TimeCursor())
    qtbot.addWidget(view)
    view.resize(1200, 190)
    view.show()
    qtbot.waitExposed(view)
    view.set_data(GanttData(synthetic_timeline(20_000, compute_lanes=20, link_lanes=64)))
    qtbot.wait(30)
    yield view
    view.release()


def _rows_shown(view: GanttView) -> tuple[float, float]:
    (_x0, _x1), (y0, y1) = view.viewbox.viewRange()
    return min(y0, y1), max(y0, y1)


def test_every_row_shown_has_room_for_its_label(small):
    top, bottom = _rows_shown(small)
    px_per_row = small.viewbox.height() / (bottom - top)
    assert px_per_row >= LINE_PX  # ten rows squeezed into ~110 px labelled every other lane
    ticks = small.axis.tickValues(top, bottom, small.viewbox.height())[0][1]
    shown = [r for r in range(len(small.data.rows)) if top <= r <= bottom]
    assert sorted(int(t) for t in ticks) == shown  # every row in view labelled, headers and lanes
    assert not small.labels_thinned()


def test_the_rows_below_are_reachable_by_a_visible_scroll_bar(small, qtbot):
    rows = len(small.data.rows)
    top, bottom = _rows_shown(small)
    assert bottom < rows - 1  # not everything fits
    bar = small.scroll
    assert bar.isVisible() and bar.maximum() > bar.minimum()
    assert f"of {rows}" in bar.toolTip()
    bar.setValue(bar.maximum())  # drag the handle to the end: the last rows come into view
    top2, bottom2 = _rows_shown(small)
    assert bottom2 >= rows - 1 and bottom2 - top2 == pytest.approx(bottom - top)
    small.viewbox.setYRange(10, 10 + (bottom - top), padding=0)  # scrolled by the wheel: the handle follows
    assert bar.value() == 10 * STEPS_PER_ROW


def test_a_chart_that_fits_has_no_scroll_bar(qtbot):
    view = GanttView(TimeCursor())
    qtbot.addWidget(view)
    view.resize(1200, 400)
    view.show()
    qtbot.waitExposed(view)
    view.set_data(GanttData(synthetic_timeline(2_000, compute_lanes=3, link_lanes=2)))
    assert not view.scroll.isVisible()
    top, bottom = _rows_shown(view)
    assert bottom - top >= MIN_ROWS > len(view.data.rows)  # a short chart keeps rows thin, not stretched
    view.release()


def test_zoomed_out_past_a_label_per_lane_the_title_says_so_and_hover_names_the_row(small):
    rows = len(small.data.rows)
    small.viewbox.setYRange(-0.6, rows - 0.4, padding=0)  # all 84 rows in ~110 px
    assert small.labels_thinned()
    assert "hover a row for its name" in small.title.text()
    lane_row = next(i for i, r in enumerate(small.data.rows) if not r.is_header and r.text.startswith("node[7]"))
    assert small.text_at(-1.0, float(lane_row)).splitlines()[0] == small.data.rows[lane_row].text  # no slice there
    small.fit()
    assert not small.labels_thinned() and "hover" not in small.title.text()
