"""Where a stage tag goes when its stage's cells have no free place: the nearest free spot in the view.

At 1280 × 720 the canvas is ~600 × 240 px and a node of eight GPUs or a 5 × 4 wafer of dies is drawn a
few dozen pixels wide: eight or twenty tags cannot all sit on their cells, and dropping them left stages
with no tag (the GPT-3 node showed three of eight, the PaLM wafer three of twenty). The fallback puts the
tag in the nearest free spot of the view — clear of captions, of other tags and of the floating legend,
preferably off every component's cells too — and the caller draws a leader line from the tag to its
stage. The search is vectorised (candidates × obstacles in numpy) because it runs on every repaint.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, QRectF

EDGE = 2.0  # px kept between a tag and the view's edge
CLEARANCE = 1.0  # px between two boxes: their 2-px rims must not touch
CHUNK = 256  # candidates whose leaders are tested at a time


def rect_array(rects: list[QRectF]) -> np.ndarray:
    """Rects as rows of (left, top, right, bottom), for the vectorised tests below."""
    if not rects:
        return np.zeros((0, 4))
    return np.array([(r.left(), r.top(), r.right(), r.bottom()) for r in rects], dtype=float)


def _clear_of(lefts: np.ndarray, tops: np.ndarray, w: float, h: float, rects: np.ndarray) -> np.ndarray:
    """Which candidate boxes (top-left corners, size w × h) overlap none of ``rects`` (grown by CLEARANCE)."""
    if len(rects) == 0:
        return np.ones(len(lefts), dtype=bool)
    g = CLEARANCE
    overlap = (
        (lefts[:, None] < rects[None, :, 2] + g)
        & (lefts[:, None] + w > rects[None, :, 0] - g)
        & (tops[:, None] < rects[None, :, 3] + g)
        & (tops[:, None] + h > rects[None, :, 1] - g)
    )
    return ~overlap.any(axis=1)


def _segments_cross(target: QPointF, cx: np.ndarray, cy: np.ndarray, p: QPointF, q: QPointF) -> np.ndarray:
    """Which segments from ``target`` to each (cx, cy) properly cross the segment p–q (orientation test;
    touching at an end point — two leaders from one stage's centre — is no crossing)."""
    ax, ay, px, py, qx, qy = target.x(), target.y(), p.x(), p.y(), q.x(), q.y()

    def side(x1, y1, x2, y2, x3, y3):
        return (x2 - x1) * (y3 - y1) - (y2 - y1) * (x3 - x1)

    d1, d2 = side(px, py, qx, qy, ax, ay), side(px, py, qx, qy, cx, cy)
    d3, d4 = side(ax, ay, cx, cy, px, py), side(ax, ay, cx, cy, qx, qy)
    return (d1 * d2 < 0) & (d3 * d4 < 0)


def _boxes_on_line(lefts: np.ndarray, tops: np.ndarray, w: float, h: float, p: QPointF, q: QPointF) -> np.ndarray:
    """Which candidate boxes an earlier leader p–q passes through: a tag put there would hide that line."""
    rects = np.stack([lefts - CLEARANCE, tops - CLEARANCE, lefts + w + CLEARANCE, tops + h + CLEARANCE], axis=1)
    return _crossings(p, np.array([q.x()]), np.array([q.y()]), rects)[0]


def _leader_crosses(target: QPointF, cx: np.ndarray, cy: np.ndarray, rects: np.ndarray) -> np.ndarray:
    """Which leaders (segments from ``target`` to each candidate centre) pass through one of ``rects``: a
    leader struck through a caption or hidden under another tag misleads. Exact (slab clipping of each
    segment against each rect, all at once), so a thin caption is never slipped between test points."""
    x, y = target.x(), target.y()
    # One the leader starts under (a caption over the stage's centre) is crossed by every leader alike.
    rects = rects[~((rects[:, 0] <= x) & (x <= rects[:, 2]) & (rects[:, 1] <= y) & (y <= rects[:, 3]))]
    if len(rects) == 0:
        return np.zeros(len(cx), dtype=bool)
    return _crossings(target, cx, cy, rects).any(axis=1)


def _crossings(target: QPointF, cx: np.ndarray, cy: np.ndarray, rects: np.ndarray) -> np.ndarray:
    """[candidate, rect]: whether the segment from ``target`` to the candidate passes through the rect."""
    x, y = target.x(), target.y()
    enter, leave = np.zeros((len(cx), len(rects))), np.ones((len(cx), len(rects)))
    for d, origin, low, high in ((cx - x, x, rects[:, 0], rects[:, 2]), (cy - y, y, rects[:, 1], rects[:, 3])):
        moving = d[:, None] != 0
        step = np.where(moving, d[:, None], 1.0)
        t1, t2 = (low[None, :] - origin) / step, (high[None, :] - origin) / step
        still_inside = (low[None, :] < origin) & (origin < high[None, :])  # a leader along this slab
        enter = np.maximum(enter, np.where(moving, np.minimum(t1, t2), np.where(still_inside, 0.0, np.inf)))
        leave = np.minimum(leave, np.where(moving, np.maximum(t1, t2), np.where(still_inside, 1.0, -np.inf)))
    return enter < leave


def nearest_free(
    target: QPointF,
    size: tuple[float, float],
    view: QRectF,
    blocked: np.ndarray,
    cells: list[QRectF],
    uncrossed: np.ndarray | None = None,
    lines: list[tuple[QPointF, QPointF]] | None = None,
    outward: QPointF | None = None,
) -> QRectF | None:
    """The ``size`` box nearest ``target`` inside ``view`` that overlaps none of ``blocked`` (rows of left,
    top, right, bottom: captions, tags, the legend, other stages' centres); None when the view has no free
    place at all. Among free places, one off every component's ``cells`` (a tag there would hide what it
    names) and whose leader line crosses none of ``uncrossed`` (default: ``blocked``) wins over a nearer one
    that does not: each fault costs more than any distance in the view. Candidates lie on a half-tag-height
    grid: finer than that only moves a tag by a pixel or two. ``lines`` are earlier leaders: no box goes on
    one (it would hide it), and a leader crossing one costs a fault too (crossed leaders are hard to follow).
    ``outward`` (a direction: from the middle of the stages' grid to this stage) bends the choice towards
    places out along it, up to half again the distance: tags round a crowded grid then fan out in the order
    of their stages, like a pie chart's labels, and their leaders do not cross."""
    w, h = size
    inner = view.adjusted(EDGE, EDGE, -EDGE - w, -EDGE - h)  # where a box's top-left corner may be
    if inner.width() < 0 or inner.height() < 0:
        return None
    step = max(h / 2, 4.0)
    xs = np.arange(inner.left(), inner.right() + 0.5, step)
    ys = np.arange(inner.top(), inner.bottom() + 0.5, step)
    lefts, tops = (a.ravel() for a in np.meshgrid(xs, ys))
    walls = blocked.reshape(-1, 4)
    uncrossing = walls if uncrossed is None else uncrossed.reshape(-1, 4)
    free = _clear_of(lefts, tops, w, h, walls)
    for p, q in lines or []:
        free &= ~_boxes_on_line(lefts, tops, w, h, p, q)
    if not free.any():
        return None
    cx, cy = lefts[free] + w / 2, tops[free] + h / 2
    fault = np.hypot(view.width(), view.height())  # more than any distance inside the view
    base = np.hypot(cx - target.x(), cy - target.y())
    if outward is not None and (outward.x() or outward.y()):
        norm = np.hypot(outward.x(), outward.y())
        cos = ((cx - target.x()) * outward.x() + (cy - target.y()) * outward.y()) / np.maximum(base * norm, 1e-9)
        base = base * (1.0 + 0.5 * (1.0 - cos))
    base += fault * ~_clear_of(cx - w / 2, cy - h / 2, w, h, rect_array(cells))
    order = np.argsort(base, kind="stable")
    # Leaders are tested in chunks, nearest first: a candidate's full cost is at least its base, so once
    # the best full cost found is no more than the next base, no later candidate can beat it.
    best, best_cost = -1, np.inf
    for at in range(0, len(order), CHUNK):
        chunk = order[at:at + CHUNK]
        # crossing text is the worst fault: twice a leader crossed or cells covered
        cost = base[chunk] + 2 * fault * _leader_crosses(target, cx[chunk], cy[chunk], uncrossing)
        for p, q in lines or []:
            cost += fault * _segments_cross(target, cx[chunk], cy[chunk], p, q)
        i = int(np.argmin(cost))
        if cost[i] < best_cost:
            best, best_cost = int(chunk[i]), float(cost[i])
        if at + CHUNK >= len(order) or best_cost <= base[order[at + CHUNK]]:
            break
    return QRectF(float(cx[best] - w / 2), float(cy[best] - h / 2), w, h)


def leader_end(box: QRectF, target: QPointF) -> QPointF:
    """The point of ``box``'s outline nearest ``target``: where a leader line from the stage meets its tag."""
    x = min(max(target.x(), box.left()), box.right())
    y = min(max(target.y(), box.top()), box.bottom())
    return QPointF(x, y)
