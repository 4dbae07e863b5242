"""Painting the grid of cores inside a device's cell (``Compute.grid``) and, after a run, which cores the
chosen op uses and how its operands are multicast — a raster of batched rects, never one item per core.

Level of detail: below ``MIN_CORE_PX`` pixels per core the raster is one shaded block (the used share
filled); above, every core is a rect, the used ones highlighted, with the multicast lines (A along rows,
B down columns) and an arrowhead at their far end.
"""

from __future__ import annotations

from functools import lru_cache

from PySide6.QtCore import QLineF, QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QPainter
from tilewright.engine.ir.tile_grid import TileGrid
from tilewright.engine.results.split_traffic import SplitRecord
from tilewright.studio.model.core_grid import CoreUse, multicast_lines, used_mask
from tilewright.studio.model.split_traffic import core_blocks, link_totals
from tilewright.studio.ui.canvas import style

Cell = tuple[int, int]
MIN_CORE_PX = 2.0
BLOCK_TEXT_PX = 26.0  # a core this large on screen shows its output block "row,col"
LINK_HEAT_PX = 6.0  # a core this large shows each multicast link coloured by the bytes it carries
CORE_IDLE = QColor("#f8f9f9")
CORE_EDGE = QColor("#7f8c8d")
CORE_USED = QColor("#f5b041")
# operand arrows in hues the heat ramp (grey-blue … red) never takes; the label names the colours too
MCAST = {"A": QColor("#7d3c98"), "B": QColor("#1a5276")}
MCAST_WORDS = {"A": "purple", "B": "dark blue"}


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
    if use is not None and use.record is not None and px >= LINK_HEAT_PX:
        _paint_link_heat(painter, area, size, rows, cols, use, px)
    if use is not None and px >= 4:
        _paint_multicast(painter, area, size, mask, use, px)
    if use is not None and use.record is not None and px >= BLOCK_TEXT_PX:
        _paint_blocks(painter, area, size, rows, cols, use, px)
    return rows * cols, used


def _paint_link_heat(painter: QPainter, area: QRectF, size: float, rows: int, cols: int, use: CoreUse,
                     px: float) -> None:
    """Each NoC link between neighbouring cores that a multicast tree uses, in the heat colours of its
    bytes (relative to the op's busiest link), drawn in the gap between the cores."""
    width = max(3.0, min(9.0, px * 0.25))
    by_colour: dict[int, list[QLineF]] = {}
    for level, a, b in _link_levels(use.record):  # type: ignore[arg-type]
        p = QPointF(area.left() + (a[1] + 0.5) * size, area.top() + (a[0] + 0.5) * size)
        q = QPointF(area.left() + (b[1] + 0.5) * size, area.top() + (b[0] + 0.5) * size)
        mid, half = (p + q) / 2, (q - p) * 0.17  # a bar across the gap between the two cores
        by_colour.setdefault(level, []).append(QLineF(mid - half, mid + half))
    palette = style.heat_palette()
    for level, lines in sorted(by_colour.items()):
        pen = style.cosmetic_pen(palette[level], width)
        pen.setCapStyle(Qt.PenCapStyle.FlatCap)
        painter.setPen(pen)
        painter.drawLines(lines)


@lru_cache(maxsize=64)
def _link_levels(rec: SplitRecord) -> tuple[tuple[int, Cell, Cell], ...]:
    """(heat level, core, neighbour) per link the op's multicast trees use: the engine's bytes per link
    (both operands where they share one) relative to the busiest link — once per op, not once per cell."""
    per_link = link_totals(rec)
    top = max(per_link.values(), default=0.0)
    if top <= 0:
        return ()
    return tuple((max(1, round((style.HEAT_LEVELS - 1) * v / top)), a, b) for (a, b), v in per_link.items())


def _paint_blocks(painter: QPainter, area: QRectF, size: float, rows: int, cols: int, use: CoreUse,
                  px: float) -> None:
    """Each used core's output block (block row, block column; ", k g" for a K-split group)."""
    blocks = core_blocks(rows, cols, use.record)  # type: ignore[arg-type]
    font = QFont(painter.font())
    font.setPointSizeF(max(6.0, min(9.0, px * 0.15)))
    painter.save()
    painter.setFont(font)
    scale = size / px  # scene units per screen pixel: text is laid out in pixels, drawn in scene units
    painter.setPen(QColor("#1b2631"))
    for r in range(rows):
        for c in range(cols):
            br, bc, g = (int(v) for v in blocks[r, c])
            if br < 0:
                continue
            text = f"{br},{bc}" + (f" k{g}" if use.record.split.k_split > 1 else "")  # type: ignore[union-attr]
            # right of the B arrow (left of centre) and below the A arrow (above centre)
            centre = QPointF(area.left() + (c + 0.58) * size, area.top() + (r + 0.56) * size)
            painter.save()
            painter.translate(centre)
            painter.scale(scale, scale)
            painter.drawText(QRectF(-px * 0.22, -px * 0.15, px * 0.44, px * 0.3), Qt.AlignmentFlag.AlignCenter, text)
            painter.restore()
    painter.restore()


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
