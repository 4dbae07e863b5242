"""One child component on the canvas: ``rows × cols`` instances drawn as ONE parametric item.

Level of detail keeps a 64 × 64 wafer smooth: far out the grid is a single shaded block captioned
"64 × 64 tiles"; closer in, only the cells inside the exposed rectangle are drawn (batched with
``drawRects``/``drawLines``); closer still each cell names itself and what it holds. Mesh and torus
links between neighbouring instances are drawn in the gaps, by this item, for the same reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from PySide6.QtCore import QLineF, QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QFontMetricsF, QLinearGradient, QPainter
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem, QWidget

from engine.ir.hardware import Component, Topology
from studio.summary import block_caption, headline_dtype, key_figures, title
from studio.ui.canvas import style
from studio.ui.canvas.label import Anchor, PixelLabel
from studio.ui.canvas.layout import cell_center, grid_size
from studio.units import FLOPS, format_value

MAX_DETAIL_CELLS = 600  # cells with their own text per paint; beyond this text would be unreadable anyway


def cell_text(component: Component, index: int) -> tuple[str, str]:
    """(name of the instance, what it holds) for a zoomed-in cell."""
    row, col = divmod(index, component.cols)
    if component.rows > 1 and component.cols > 1:
        name = f"{component.name}[{row},{col}]"
    else:
        name = f"{component.name}[{index}]" if component.count > 1 else component.name
    if component.children:
        inside = ", ".join(f"{c.count} × {c.name}" for c in component.children)
    else:
        dt = headline_dtype(component)
        inside = f"{format_value(component.compute.peak(dt), FLOPS)}" if component.compute and dt else ""
    return name, inside


class GridItem(QGraphicsItem):
    """A child component of the viewed level; movable and selectable as a whole."""

    def __init__(self, path: str, component: Component, links: Topology | None):
        super().__init__()
        self.path = path
        self.component = component
        self.links = links if links in (Topology.mesh, Topology.torus, Topology.ring) else None
        self.width, self.height = grid_size(component.rows, component.cols)
        self.on_moved: Callable[[GridItem], None] | None = None
        flags = QGraphicsItem.GraphicsItemFlag
        self.setFlags(
            flags.ItemIsSelectable | flags.ItemIsMovable | flags.ItemSendsGeometryChanges
            | flags.ItemUsesExtendedStyleOption
        )
        self.setToolTip("\n".join([title(component), *key_figures(component)]))
        self.label = PixelLabel([title(component), " · ".join(key_figures(component))], Anchor.top_left, self)
        self.label.setPos(0, self.height + style.GAP * 0.4)

    # -- geometry -----------------------------------------------------------------------------------
    def grid_rect(self) -> QRectF:
        return QRectF(0, 0, self.width, self.height)

    def scene_grid_rect(self) -> QRectF:
        return self.mapRectToScene(self.grid_rect())

    def boundingRect(self) -> QRectF:
        return self.grid_rect().adjusted(-style.GAP, -style.GAP, style.GAP, style.GAP)

    def instance_center(self, index: int) -> QPointF:
        """Scene position of instance ``index`` (row-major) of this component."""
        x, y = cell_center(index, self.component.cols)
        return self.mapToScene(QPointF(x, y))

    def instance_top(self, index: int) -> QPointF:
        x, y = cell_center(index, self.component.cols)
        return self.mapToScene(QPointF(x, y - style.CELL / 2))

    def instance_left(self, index: int) -> QPointF:
        x, y = cell_center(index, self.component.cols)
        return self.mapToScene(QPointF(x - style.CELL / 2, y))

    def itemChange(self, change: QGraphicsItem.GraphicsItemChange, value: object) -> object:
        if change == QGraphicsItem.GraphicsItemChange.ItemPositionHasChanged and self.on_moved:
            self.on_moved(self)
        return super().itemChange(change, value)

    # -- painting -----------------------------------------------------------------------------------
    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None) -> None:
        lod = option.levelOfDetailFromTransform(painter.worldTransform())
        if self.component.count > 1 and style.CELL * lod < style.MIN_CELL_PX:
            self._paint_block(painter)
        else:
            self._paint_cells(painter, option.exposedRect, style.CELL * lod)
        if self.isSelected():
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.setPen(style.cosmetic_pen(style.SELECTED, 3.0))
            m = style.GAP * 0.35
            painter.drawRect(self.grid_rect().adjusted(-m, -m, m, m))

    def _paint_block(self, painter: QPainter) -> None:
        rect = self.grid_rect()
        fill = style.kind_fill(self.component.kind.value)
        grad = QLinearGradient(rect.topLeft(), rect.bottomRight())
        grad.setColorAt(0.0, fill.lighter(115))
        grad.setColorAt(1.0, fill.darker(112))
        painter.setBrush(QBrush(grad))
        painter.setPen(style.cosmetic_pen(style.kind_edge(self.component.kind.value), 1.5))
        painter.drawRect(rect)
        self._device_text(painter, rect.center(), [block_caption(self.component)], bold_first=True)

    def _visible_range(self, exposed: QRectF) -> tuple[int, int, int, int]:
        step = style.CELL + style.GAP
        rows, cols = self.component.rows, self.component.cols
        c0 = max(0, math.floor(exposed.left() / step))
        c1 = min(cols - 1, math.floor(exposed.right() / step))
        r0 = max(0, math.floor(exposed.top() / step))
        r1 = min(rows - 1, math.floor(exposed.bottom() / step))
        return r0, r1, c0, c1

    def _paint_cells(self, painter: QPainter, exposed: QRectF, cell_px: float) -> None:
        r0, r1, c0, c1 = self._visible_range(exposed)
        if r1 < r0 or c1 < c0:
            return
        step, cell = style.CELL + style.GAP, style.CELL
        kind = self.component.kind.value
        if self.links is not None:
            painter.setPen(style.cosmetic_pen(style.LINK, 2.0 if cell_px > 30 else 1.0))
            painter.drawLines(self._link_lines(r0, r1, c0, c1))
        rects = [QRectF(c * step, r * step, cell, cell) for r in range(r0, r1 + 1) for c in range(c0, c1 + 1)]
        painter.setBrush(style.kind_fill(kind))
        painter.setPen(style.cosmetic_pen(style.kind_edge(kind), 1.0))
        painter.drawRects(rects)
        if cell_px >= style.DETAIL_CELL_PX and len(rects) <= MAX_DETAIL_CELLS:
            cols = self.component.cols
            for r in range(r0, r1 + 1):
                for c in range(c0, c1 + 1):
                    name, inside = cell_text(self.component, r * cols + c)
                    centre = QPointF(c * step + cell / 2, r * step + cell / 2)
                    self._device_text(painter, centre, [name, inside], bold_first=True, max_px=cell_px - 6)

    def _link_lines(self, r0: int, r1: int, c0: int, c1: int) -> list[QLineF]:
        """Neighbour links in the gaps; torus and ring wrap-arounds as stubs past the grid's edge (a ring
        over a 2-D grid is drawn like a torus: the caption names the topology exactly)."""
        step, cell, gap = style.CELL + style.GAP, style.CELL, style.GAP
        rows, cols = self.component.rows, self.component.cols
        lines: list[QLineF] = []
        for r in range(r0, r1 + 1):
            y = r * step + cell / 2
            for c in range(c0, min(c1 + 1, cols - 1)):
                lines.append(QLineF(c * step + cell, y, (c + 1) * step, y))
        for c in range(c0, c1 + 1):
            x = c * step + cell / 2
            for r in range(r0, min(r1 + 1, rows - 1)):
                lines.append(QLineF(x, r * step + cell, x, (r + 1) * step))
        if self.links in (Topology.torus, Topology.ring):
            for r in range(r0, r1 + 1):
                y = r * step + cell / 2
                lines += [QLineF(-gap * 0.8, y, 0, y), QLineF(self.width, y, self.width + gap * 0.8, y)]
            for c in range(c0, c1 + 1):
                x = c * step + cell / 2
                lines += [QLineF(x, -gap * 0.8, x, 0), QLineF(x, self.height, x, self.height + gap * 0.8)]
        return lines

    def _device_text(
        self, painter: QPainter, centre: QPointF, lines: list[str], bold_first: bool, max_px: float = 100000.0
    ) -> None:
        """Draw ``lines`` centred on ``centre`` at a fixed pixel size (text must not scale with zoom)."""
        lines = [ln for ln in lines if ln]
        where = painter.worldTransform().map(centre)
        painter.save()
        painter.resetTransform()
        fonts = [style.label_font(True) if bold_first and i == 0 else style.label_font(False, -1.0) for i in range(len(lines))]
        heights = [QFontMetricsF(f).height() for f in fonts]
        y = where.y() - sum(heights) / 2
        for line, font, h in zip(lines, fonts, heights, strict=True):
            fm = QFontMetricsF(font)
            text = fm.elidedText(line, Qt.TextElideMode.ElideRight, int(max_px))
            painter.setFont(font)
            painter.setPen(style.TEXT)
            painter.drawText(QPointF(where.x() - fm.horizontalAdvance(text) / 2, y + fm.ascent()), text)
            y += h
        painter.restore()
