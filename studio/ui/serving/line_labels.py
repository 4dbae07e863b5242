"""Where a horizontal line's label goes (the SLO, the goodput target): at the left or the right end, above or
below the line — the first of those four places that no data point falls in.

A fixed place could not serve every run: "SLO 1 s" written below the line at the left sat on the first
rate's TTFT points, and "target 90.0 %" at the right end sat on the goodput curve where it falls below the
target. The label's size is measured in pixels and turned into a share of the view, so the test is the
one the eye makes at the window's size; the plots place their labels again when they are resized.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg

# (position along the line, anchor, above): left end first, then right; below the line first, as a label
# under a line near the plot's top stays inside the plot.
PLACES = (
    (0.02, (0.0, 0.0), False),
    (0.02, (0.0, 1.0), True),
    (0.98, (1.0, 0.0), False),
    (0.98, (1.0, 1.0), True),
)
FALLBACK_SHARE = (0.35, 0.12)  # the label's share of the view (width, height) before the view is laid out
MARGIN = 1.15  # the label's box grown by this much: points touching its edge read as under it
OUTSIDE = 1000  # a place past the view costs more than any number of covered points: a cut label says nothing


@dataclass(frozen=True)
class Box:
    """A rect in data coordinates."""

    left: float
    right: float
    bottom: float
    top: float

    def holds(self, xs: np.ndarray, ys: np.ndarray) -> int:
        return int(np.count_nonzero((xs >= self.left) & (xs <= self.right) & (ys >= self.bottom) & (ys <= self.top)))

    def overlaps(self, other: Box) -> bool:
        return (self.left < other.right and other.left < self.right and self.bottom < other.top
                and other.bottom < self.top)


def label_share(line: pg.InfiniteLine, view: pg.ViewBox) -> tuple[float, float]:
    """The label's width and height as shares of the view's (pixels over pixels)."""
    rect = line.label.boundingRect()
    w, h = view.width(), view.height()
    if w <= 0 or h <= 0 or rect.width() <= 0:
        return FALLBACK_SHARE
    return min(MARGIN * rect.width() / w, 1.0), min(MARGIN * rect.height() / h, 1.0)


def label_box(value: float, place: tuple, share: tuple[float, float], view: pg.ViewBox) -> Box:
    """Where the label of a line at ``value`` lies at ``place`` (one of ``PLACES``), in data coordinates."""
    (x0, x1), (y0, y1) = view.viewRange()
    position, _anchor, above = place
    width, height = share[0] * (x1 - x0), share[1] * (y1 - y0)
    at = x0 + position * (x1 - x0)
    left = at if position < 0.5 else at - width
    bottom = value if above else value - height
    return Box(left, left + width, bottom, bottom + height)


def _outside(box: Box, view: pg.ViewBox) -> bool:
    """Whether ``box`` reaches past the view (a label above a line near the top is cut off)."""
    (x0, x1), (y0, y1) = view.viewRange()
    return box.left < x0 or box.right > x1 or box.bottom < y0 or box.top > y1


def place_label(line: pg.InfiniteLine, xs: np.ndarray, ys: np.ndarray, avoid: list[Box] | None = None) -> Box:
    """Move ``line``'s label to the first of ``PLACES`` inside the view holding none of the points (``xs``,
    ``ys``) and overlapping none of ``avoid`` (other labels), else to the one with fewest; returns its box."""
    view = line.getViewBox()
    if view is None:
        return Box(0.0, 0.0, 0.0, 0.0)
    share = label_share(line, view)
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    best, best_cost, best_box = PLACES[0], None, None
    for place in PLACES:
        box = label_box(float(line.value()), place, share, view)
        cost = box.holds(xs, ys) + sum(box.overlaps(o) for o in avoid or []) + OUTSIDE * _outside(box, view)
        if best_cost is None or cost < best_cost:
            best, best_cost, best_box = place, cost, box
        if cost == 0:
            break
    position, anchor, _above = best
    line.label.anchors = [anchor, anchor]
    line.label.setPosition(position)
    line.label.updatePosition()
    return best_box if best_box is not None else Box(0.0, 0.0, 0.0, 0.0)
