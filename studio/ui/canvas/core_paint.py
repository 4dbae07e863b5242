"""Painting the grid of cores inside a device's cell (``Compute.grid``) and, after a run, which cores the
chosen op uses and how its operands are multicast — a raster of batched rects, never one item per core.

Level of detail: below ``MIN_CORE_PX`` pixels per core the raster is one shaded block (the used share
filled); above, every core is a rect, the used ones highlighted, with the multicast lines (A along rows,
B down columns) and an arrowhead at their far end.
"""

from __future__ import annotations

from PySide6.QtCore import QLineF, QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter
from tilewright.engine.ir.tile_grid import TileGrid
from tilewright.studio.model.core_grid import CoreUse, multicast_lines, used_mask
from tilewright.studio.ui.canvas import style

MIN_CORE_PX = 2.0
CORE_IDLE = QColor("#f8f9f9")
CORE_EDGE = QColor("#7f8c8d")
CORE_USED = QColor("#f5b041")
MCAST = {"A": QColor("#c0392b"), "B": QColor("#1f618d")}  # the label names the colours too
MCAST_WORDS = {"A": "red", "B": "blue"}


def core_area(cell: QRectF, rows: int, cols: int) -> tuple[QRectF, float]:
    """The square-celled raster centred in ``cell``, and the side of one core (scene units)."""
    size = min(cell.width() / cols, cell.height() / rows)
    w, h = size * cols, size * rows
    return QRectF(cell.center().x() - w / 2, cell.center().y() - h / 2, w, h), size


def paint_cores(painter: QPainter, cell: QRectF, grid: TileGrid, use: CoreUse | None,
                cell_px: float) -> tuple[int, int]:
    """Draw ``grid`` inside ``cell``; returns (cores drawn, cores marked used)."""
    rows, cols = grid.rows, grid.cols
    area, size = core_area(cell, rows, cols)
    mask = used_mask(rows, cols, use)
    used = int(mask.sum())
    px = size * cell_px / style.CELL
    painter.setPen(style.cosmetic_pen(CORE_EDGE, 1.0))
    if px < MIN_CORE_PX:
        painter.setBrush(CORE_IDLE)
        painter.drawRect(area)
        if used:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(CORE_USED)
            painter.drawRect(QRectF(area.left(), area.top(), area.width(), area.height() * used / mask.size))
        return rows * cols, used
    inset = size * 0.12 if px >= 5 else 0.0
    idle, busy = [], []
    for r in range(rows):
        for c in range(cols):
            rect = QRectF(area.left() + c * size + inset / 2, area.top() + r * size + inset / 2,
                          size - inset, size - inset)
            (busy if mask[r, c] else idle).append(rect)
    painter.setBrush(CORE_IDLE)
    painter.drawRects(idle)
    painter.setBrush(CORE_USED)
    painter.drawRects(busy)
    if use is not None and px >= 4:
        _paint_multicast(painter, area, size, mask, use, px)
    return rows * cols, used


def _paint_multicast(painter: QPainter, area: QRectF, size: float, mask, use: CoreUse, px: float) -> None:
    def centre(rc: tuple[int, int]) -> QPointF:
        return QPointF(area.left() + (rc[1] + 0.5) * size, area.top() + (rc[0] + 0.5) * size)

    head = size * 0.35
    by_operand: dict[str, list[QLineF]] = {"A": [], "B": []}
    for operand, a, b in multicast_lines(mask, use):
        p, q = centre(a), centre(b)
        # A runs a little above the centre line, B a little left of it, so both stay visible
        off = QPointF(0, -size * 0.18) if operand == "A" else QPointF(-size * 0.18, 0)
        p, q = p + off, q + off
        line = QLineF(p, q)
        by_operand[operand].append(line)
        unit = line.unitVector()
        d = QPointF(unit.dx(), unit.dy()) * head
        n = QPointF(-d.y(), d.x()) * 0.6
        by_operand[operand] += [QLineF(q, q - d + n), QLineF(q, q - d - n)]
    width = 2.0 if px >= 8 else 1.2
    for operand, lines in by_operand.items():
        if lines:
            pen = style.cosmetic_pen(MCAST[operand], width)
            pen.setCapStyle(Qt.PenCapStyle.RoundCap)
            painter.setPen(pen)
            painter.drawLines(lines)
