"""A component's stage numbers as an inset: its cells' stages drawn as a block of tags, in the cells' own
arrangement, placed where the view is free, with one callout line from the cells to the block.

At 1280 × 720 a 5 × 4 wafer of dies is drawn ~45 px high and a grown node of eight GPUs ~60 px wide: their
numbers do not fit on the cells, and one tag per stage in the nearest free spot, each on its own leader,
scattered twenty numbers round the wafer (two far to the right, on lines across the card) and strung
GPT-3's eight along a line. An inset keeps the stages' arrangement — stage 7 is right of stage 6 in the
block as on the cells — so a reader maps them at a glance, and the view has one line, not twenty. The
positions are the stages' centres on the cells, spread apart just enough that no two tags touch.
"""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import QPointF, QRectF

MARGIN = 3.0  # px between the block's outline and its tags
GAP = 3.0  # px between two tags of the block (their 2-px rims must not touch)
MAX_STAGES = 64  # a block of more tags than this would fill the view: the legend names them instead


def spread(centres: list[QPointF], w: float, h: float) -> float | None:
    """The least factor by which the centres' offsets must grow for ``w`` × ``h`` tags on them not to
    overlap (two tags are apart when they are apart along either axis); None when two centres coincide."""
    need = 0.0
    xs = np.array([c.x() for c in centres])
    ys = np.array([c.y() for c in centres])
    for i in range(len(centres)):
        dx, dy = np.abs(xs[i + 1:] - xs[i]), np.abs(ys[i + 1:] - ys[i])
        with np.errstate(divide="ignore"):
            kx = np.where(dx > 1e-9, (w + GAP) / np.maximum(dx, 1e-12), math.inf)
            ky = np.where(dy > 1e-9, (h + GAP) / np.maximum(dy, 1e-12), math.inf)
        pair = np.minimum(kx, ky)
        if pair.size:
            worst = float(pair.max())
            if math.isinf(worst):
                return None
            need = max(need, worst)
    return need


def block_offsets(centres: list[QPointF], w: float, h: float) -> tuple[list[QPointF], QRectF] | None:
    """Top-left corners of the tags in the block, relative to the block's outline, and the outline's size
    (a rect at the origin); None when the stages cannot be told apart by position."""
    factor = spread(centres, w, h)
    if factor is None:
        return None
    left = min(c.x() for c in centres)
    top = min(c.y() for c in centres)
    corners = [QPointF(MARGIN + factor * (c.x() - left), MARGIN + factor * (c.y() - top)) for c in centres]
    width = max(p.x() for p in corners) + w + MARGIN
    height = max(p.y() for p in corners) + h + MARGIN
    return corners, QRectF(0.0, 0.0, width, height)


def callout(cells: QRectF, block: QRectF) -> tuple[QPointF, QPointF]:
    """The line from the cells to the block: between the points of each outline nearest the other's centre."""

    def nearest(rect: QRectF, to: QPointF) -> QPointF:
        return QPointF(min(max(to.x(), rect.left()), rect.right()), min(max(to.y(), rect.top()), rect.bottom()))

    return nearest(cells, block.center()), nearest(block, cells.center())
