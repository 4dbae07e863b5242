"""One child component on the canvas: ``rows × cols`` instances drawn as ONE parametric item.

Level of detail keeps a 64 × 64 wafer smooth: far out the grid is a single shaded block captioned
"64 × 64 tiles"; closer in, only the cells inside the exposed rectangle are drawn (batched with
``drawRects``/``drawLines``); closer still each cell names itself and what it holds, and large cells
show a miniature of their own children. Mesh and torus links between neighbouring instances are drawn
in the gaps, by this item, for the same reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from PySide6.QtCore import QLineF, QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QFontMetricsF, QLinearGradient, QPainter
from PySide6.QtWidgets import QGraphicsItem, QGraphicsSceneHoverEvent, QStyleOptionGraphicsItem, QWidget
from tilewright.engine.ir.hardware import Component, Topology
from tilewright.studio.model.core_grid import (
    CoreUse,
    core_block_caption,
    core_caption,
    core_grid,
    core_tooltip,
    traffic_caption,
)
from tilewright.studio.summary import block_caption, headline_dtype, key_figures, title
from tilewright.studio.ui.canvas import style
from tilewright.studio.ui.canvas.cell_paint import paint_block, paint_cells, paint_links
from tilewright.studio.ui.canvas.core_paint import MCAST_WORDS, core_area, paint_cores
from tilewright.studio.ui.canvas.label import Anchor, PixelLabel
from tilewright.studio.ui.canvas.layout import GridShape
from tilewright.studio.ui.canvas.overlay import CellColours
from tilewright.studio.ui.canvas.text import draw_centred_text
from tilewright.studio.units import FLOPS, format_bytes, format_value

MAX_DETAIL_CELLS = 600  # cells with their own text per paint; beyond this text would be unreadable anyway
PREVIEW_CELL_PX = 110.0  # cells this large also show a miniature of their first child's grid
PREVIEW_SPLIT = 0.5  # top share of such a cell kept for its text
CORE_SPLIT = 0.4  # top share of a grid device's cell kept for its text, the rest shows its cores
MAX_PREVIEW = 16  # a child grid larger than this previews as one block
STEP = style.CELL + style.GAP


def cell_text(component: Component, index: int, shape: GridShape) -> list[str]:
    """Name of the instance, then what it holds, for a zoomed-in cell (most important first: lines
    that do not fit the cell are dropped from the end)."""
    plane, row, col = shape.locate(index)
    if shape.planes > 1:
        name = f"{component.name}[{plane},{row},{col}]"
    elif shape.folded:
        name = f"{component.name}[{index}]"
    elif shape.rows > 1 and shape.cols > 1:
        name = f"{component.name}[{row},{col}]"
    else:
        name = f"{component.name}[{index}]" if component.count > 1 else component.name
    if component.children:
        return [name, *(f"{c.count} × {c.name}" for c in component.children)]
    lines = [name]
    dt = headline_dtype(component)
    if component.compute is not None and dt is not None:
        lines.append(format_value(component.compute.peak(dt), FLOPS))
    lines += [f"{format_bytes(m.capacity_bytes)} {m.kind.value.upper()}" for m in component.memories]
    return lines


def label_lines(component: Component, shape: GridShape, use: CoreUse | None = None) -> list[str]:
    lines = [title(component), " · ".join(key_figures(component))]
    grid = core_grid(component)
    if grid is not None:
        lines.append(core_caption(grid))
        if use is not None:
            lines += use_caption(use, grid.cores)
            lines += [line for line in (core_block_caption(use), *traffic_caption(use, grid.rows, grid.cols)) if line]
    if shape.folded and shape.rows > 1:
        lines.append(f"drawn {shape.rows} × {shape.cols}, numbered row by row")
    elif (shape.rows, shape.cols, shape.planes) != (component.rows, component.cols, 1) and not shape.folded:
        planes = f"{shape.planes} planes of " if shape.planes > 1 else ""
        lines.append(f"drawn as the network's shape: {planes}{shape.rows} × {shape.cols}")
    return lines


def use_caption(use: CoreUse, cores: int) -> list[str]:
    """["mlp_up (stage 0, prefill): 2-D 8 × 7 · 56 of 64 cores", "A mcast along rows (red) · B …"]."""
    head = f"2-D {use.rows} × {use.cols}" if use.kind == "2d" else f"1-D {use.cols}"
    moves = []
    for operand, along in (("A", use.a_along), ("B", use.b_along)):
        where = {"rows": "along rows", "cols": "down columns", "all": "to all its cores"}.get(along)
        if where:
            moves.append(f"{operand} mcast {where} ({MCAST_WORDS[operand]})")
    first = f"{use.label}: {head}" if use.label else head
    return [f"{first} · {min(use.cores, cores)} of {cores} cores", " · ".join(moves)]


class GridItem(QGraphicsItem):
    """A child component of the viewed level; movable and selectable as a whole."""

    def __init__(self, path: str, component: Component, links: Topology | None, shape: GridShape | None = None):
        super().__init__()
        self.path = path
        self.component = component
        self.grid_shape = shape or GridShape(component.rows, component.cols)
        self.links = links if links in (Topology.mesh, Topology.torus, Topology.ring) else None
        self.width, self.height = self.grid_shape.size()
        self.on_moved: Callable[[GridItem], None] | None = None
        self.snap: Callable[[QPointF], QPointF] | None = None  # set by the scene while the user drags
        self.colours: CellColours | None = None  # stage colours or heat, set by the scene's overlay
        self.last_paint: tuple[str, int] = ("", 0)  # ("block" | "cells", cells drawn): for tests and profiling
        self.cores = core_grid(component)  # a device's own grid of cores, drawn inside each cell
        self.core_use: CoreUse | None = None  # the op whose cores are highlighted, set by the overlay
        self.last_cores: tuple[int, int] = (0, 0)  # (cores drawn, cores marked) per cell: for tests
        flags = QGraphicsItem.GraphicsItemFlag
        self.setFlags(
            flags.ItemIsSelectable | flags.ItemIsMovable | flags.ItemSendsGeometryChanges
            | flags.ItemUsesExtendedStyleOption
        )
        lines = label_lines(component, self.grid_shape)
        self.setToolTip("\n".join(lines))
        self.core_areas: list[QRectF] = []  # where each cell's cores were last painted (item coordinates)
        self.setAcceptHoverEvents(self.cores is not None)  # a core's tooltip names its block of the op
        self.label = PixelLabel(lines, Anchor.top_left, self)
        self.label.setPos(0, self.height + style.GAP * 0.4)

    # -- geometry -----------------------------------------------------------------------------------
    def grid_rect(self) -> QRectF:
        return QRectF(0, 0, self.width, self.height)

    def scene_grid_rect(self) -> QRectF:
        return self.mapRectToScene(self.grid_rect())

    def boundingRect(self) -> QRectF:
        return self.grid_rect().adjusted(-style.GAP, -style.GAP, style.GAP, style.GAP)

    def instance_center(self, index: int) -> QPointF:
        """Scene position of instance ``index`` of this component."""
        return self.mapToScene(QPointF(*self.grid_shape.cell_center(index)))

    def instance_top(self, index: int) -> QPointF:
        return self.instance_center(index) - QPointF(0, style.CELL / 2)

    def instance_left(self, index: int) -> QPointF:
        return self.instance_center(index) - QPointF(style.CELL / 2, 0)

    def cell_at(self, scene_pos: QPointF) -> int | None:
        """Index of the instance whose cell is under ``scene_pos`` (gaps belong to no cell)."""
        p = self.mapFromScene(scene_pos)
        shape = self.grid_shape
        plane, x = divmod(p.x(), shape.plane_stride) if shape.planes > 1 else (0.0, p.x())
        c, r = math.floor(x / STEP), math.floor(p.y() / STEP)
        if not (0 <= plane < shape.planes and 0 <= r < shape.rows and 0 <= c < shape.cols):
            return None
        if x - c * STEP > style.CELL or p.y() - r * STEP > style.CELL:
            return None
        index = int(plane) * shape.rows * shape.cols + r * shape.cols + c
        return index if index < self.component.count else None

    def set_colours(self, colours: CellColours | None) -> None:
        self.colours = colours
        self.update()

    def set_core_use(self, use: CoreUse | None) -> None:
        """Highlight the cores an op uses (None: none) — an overlay of a run, never a model edit."""
        if self.cores is None or use == self.core_use:
            return
        self.core_use = use
        lines = label_lines(self.component, self.grid_shape, use)
        self.label.set_lines(lines)
        self.setToolTip("\n".join(lines))
        self.update()

    def core_at(self, pos: QPointF) -> tuple[int, int] | None:
        """(row, col) of the core under ``pos`` (item coordinates), as last painted; None off the cores."""
        if self.cores is None:
            return None
        for area in self.core_areas:
            raster, size = core_area(area, self.cores.rows, self.cores.cols)
            if raster.contains(pos) and size > 0:
                r = min(self.cores.rows - 1, int((pos.y() - raster.top()) / size))
                c = min(self.cores.cols - 1, int((pos.x() - raster.left()) / size))
                return r, c
        return None

    def hoverMoveEvent(self, event: QGraphicsSceneHoverEvent) -> None:
        """Over a core of a chosen op: that core's block; elsewhere the device's caption."""
        at = self.core_at(event.pos()) if self.core_use is not None else None
        if at is not None and self.cores is not None:
            self.setToolTip(core_tooltip(self.core_use, *at, self.cores.rows, self.cores.cols))
        else:
            self.setToolTip("\n".join(self.label.lines))
        super().hoverMoveEvent(event)

    def itemChange(self, change: QGraphicsItem.GraphicsItemChange, value: object) -> object:
        if change == QGraphicsItem.GraphicsItemChange.ItemPositionChange and self.snap is not None:
            return self.snap(value)  # type: ignore[arg-type]
        if change == QGraphicsItem.GraphicsItemChange.ItemPositionHasChanged and self.on_moved:
            self.on_moved(self)
        return super().itemChange(change, value)

    # -- painting -----------------------------------------------------------------------------------
    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None) -> None:
        cell_px = style.CELL * option.levelOfDetailFromTransform(painter.worldTransform())
        block = self.component.count > 1 and cell_px < style.MIN_CELL_PX
        self.last_paint = ("block", 0) if block else ("cells", 0)
        stride = self.grid_shape.plane_stride
        for plane in range(self.grid_shape.planes):
            painter.save()
            painter.translate(plane * stride, 0)
            exposed = option.exposedRect.translated(-plane * stride, 0)
            if block and self.colours is not None:
                paint_block(painter, self.grid_shape, self.colours, plane, self.component.kind.value)
            elif block:
                self._paint_block(painter)
            else:
                self._paint_plane(painter, exposed, cell_px, plane)
            painter.restore()
        if block and self.colours is None:  # coloured, the block's colours (and the legend) say more
            caption = block_caption(self.component)
            if QFontMetricsF(style.label_font(True)).horizontalAdvance(caption) < self.width * cell_px / style.CELL:
                draw_centred_text(painter, self.grid_rect().center(), [caption])
        if self.isSelected():
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.setPen(style.cosmetic_pen(style.SELECTED, 3.0))
            m = style.GAP * 0.35
            painter.drawRect(self.grid_rect().adjusted(-m, -m, m, m))

    def _plane_rect(self) -> QRectF:
        return QRectF(0, 0, self.grid_shape.plane_width, self.height)

    def _paint_block(self, painter: QPainter) -> None:
        rect = self._plane_rect()
        fill = style.kind_fill(self.component.kind.value)
        grad = QLinearGradient(rect.topLeft(), rect.bottomRight())
        grad.setColorAt(0.0, fill.lighter(115))
        grad.setColorAt(1.0, fill.darker(112))
        painter.setBrush(QBrush(grad))
        painter.setPen(style.cosmetic_pen(style.kind_edge(self.component.kind.value), 1.5))
        painter.drawRect(rect)

    def _visible_range(self, exposed: QRectF) -> tuple[int, int, int, int]:
        c0 = max(0, math.floor(exposed.left() / STEP))
        c1 = min(self.grid_shape.cols - 1, math.floor(exposed.right() / STEP))
        r0 = max(0, math.floor(exposed.top() / STEP))
        r1 = min(self.grid_shape.rows - 1, math.floor(exposed.bottom() / STEP))
        return r0, r1, c0, c1

    def _paint_plane(self, painter: QPainter, exposed: QRectF, cell_px: float, plane: int) -> None:
        r0, r1, c0, c1 = self._visible_range(exposed)
        if r1 < r0 or c1 < c0:
            return
        cell, kind = style.CELL, self.component.kind.value
        if self.links is not None:
            painter.setPen(style.cosmetic_pen(style.LINK, 2.0 if cell_px > 30 else 1.0))
            painter.drawLines(self._link_lines(r0, r1, c0, c1))
        rects = [QRectF(c * STEP, r * STEP, cell, cell) for r in range(r0, r1 + 1) for c in range(c0, c1 + 1)]
        self.last_paint = ("cells", self.last_paint[1] + len(rects))
        painter.setBrush(style.kind_fill(kind))
        painter.setPen(style.cosmetic_pen(style.kind_edge(kind), 1.0))
        painter.drawRects(rects)
        if self.colours is not None:
            visible = (r0, r1, c0, c1)
            paint_cells(painter, self.grid_shape, self.colours, plane, visible, cell_px, self.component.count)
            paint_links(painter, self.grid_shape, self.colours, plane, visible, cell_px)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.setPen(style.cosmetic_pen(style.kind_edge(kind), 1.0))
            painter.drawRects(rects)
        detail = cell_px >= style.DETAIL_CELL_PX and len(rects) <= MAX_DETAIL_CELLS
        if self.cores is not None:
            top = cell * CORE_SPLIT if detail else 0.0
            m = cell * 0.06
            self.core_areas = []
            for r in range(r0, r1 + 1):
                for c in range(c0, c1 + 1):
                    area = QRectF(c * STEP + m, r * STEP + top + m, cell - 2 * m, cell - top - 2 * m)
                    self.core_areas.append(area)
                    self.last_cores = paint_cores(painter, area, self.cores, self.core_use, cell_px)
        if not detail:
            return
        preview = cell_px >= PREVIEW_CELL_PX and bool(self.component.children) and self.colours is None
        text_h = cell * (PREVIEW_SPLIT if preview else CORE_SPLIT if self.cores is not None else 1.0)
        first = plane * self.grid_shape.rows * self.grid_shape.cols
        for r in range(r0, r1 + 1):
            for c in range(c0, c1 + 1):
                x, y = c * STEP, r * STEP
                index = first + r * self.grid_shape.cols + c
                lines = cell_text(self.component, index, self.grid_shape)
                labels = self.colours.labels if self.colours is not None else None
                if labels and index < len(labels) and labels[index]:
                    lines[1:1] = labels[index].split("\n")  # the placement matters more than the figures
                draw_centred_text(
                    painter, QPointF(x + cell / 2, y + text_h / 2), lines,
                    max_px=cell_px - 6, max_height=text_h * cell_px / cell - 4,
                )
                if preview:
                    area = QRectF(x, y + text_h, cell, cell - text_h)
                    self._paint_preview(painter, area.adjusted(cell * 0.08, 0, -cell * 0.08, -cell * 0.08))

    def _paint_preview(self, painter: QPainter, area: QRectF) -> None:
        """A glimpse of what one instance holds (its first child's grid), so a node shows its 8 GPUs
        before anyone opens it."""
        child = self.component.children[0]
        rows, cols = child.rows, child.cols
        painter.setBrush(style.kind_fill(child.kind.value))
        painter.setPen(style.cosmetic_pen(style.kind_edge(child.kind.value), 1.0))
        if rows > MAX_PREVIEW or cols > MAX_PREVIEW:
            painter.drawRect(area)
            return
        size = min(area.width() / (cols * 1.25), area.height() / (rows * 1.25))
        gap = size * 0.25
        left = area.center().x() - (cols * size + (cols - 1) * gap) / 2
        top = area.center().y() - (rows * size + (rows - 1) * gap) / 2
        painter.drawRects([
            QRectF(left + j * (size + gap), top + i * (size + gap), size, size)
            for i in range(rows) for j in range(cols)
        ])

    def _link_lines(self, r0: int, r1: int, c0: int, c1: int) -> list[QLineF]:
        """Neighbour links in the gaps of one plane; torus and ring wrap-arounds as stubs past the
        plane's edge (a ring over a 2-D grid is drawn like a torus: the caption names it exactly)."""
        cell, gap = style.CELL, style.GAP
        rows, cols = self.grid_shape.rows, self.grid_shape.cols
        width = self.grid_shape.plane_width
        lines: list[QLineF] = []
        for r in range(r0, r1 + 1):
            y = r * STEP + cell / 2
            for c in range(c0, min(c1 + 1, cols - 1)):
                lines.append(QLineF(c * STEP + cell, y, (c + 1) * STEP, y))
        for c in range(c0, c1 + 1):
            x = c * STEP + cell / 2
            for r in range(r0, min(r1 + 1, rows - 1)):
                lines.append(QLineF(x, r * STEP + cell, x, (r + 1) * STEP))
        if self.links in (Topology.torus, Topology.ring):
            for r in range(r0, r1 + 1):
                y = r * STEP + cell / 2
                lines += [QLineF(-gap * 0.8, y, 0, y), QLineF(width, y, width + gap * 0.8, y)]
            for c in range(c0, c1 + 1):
                x = c * STEP + cell / 2
                lines += [QLineF(x, -gap * 0.8, x, 0), QLineF(x, self.height, x, self.height + gap * 0.8)]
        return lines
