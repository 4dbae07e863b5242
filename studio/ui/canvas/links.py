"""The interconnect of the viewed level, where it is not drawn by the grids themselves.

A switch (or fat-tree, dragonfly, H-tree) is a bar with a spoke to every instance — or, past
``MAX_SPOKES`` instances, one bundled spoke per grid so a wafer-sized level stays light. Fully connected
and explicit edge lists are arcs between instance centres. Mesh, torus and ring are drawn inside each
grid (``GridItem``), since their links join neighbouring cells.
"""

from __future__ import annotations

from PySide6.QtCore import QLineF, QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem, QWidget
from tilewright.engine.ir.hardware import Interconnect, Topology
from tilewright.studio.model.palette import CATEGORY_COLOURS
from tilewright.studio.ui.canvas import style
from tilewright.studio.ui.canvas.grid_item import GridItem
from tilewright.studio.ui.canvas.label import Anchor, PixelLabel
from tilewright.studio.ui.canvas.traffic import shares

MAX_SPOKES = 128
MAX_ARCS = 2000
BAR_TOPOLOGIES = (Topology.switch, Topology.fat_tree, Topology.dragonfly, Topology.htree)
BAR_THICKNESS = style.CELL * 0.28
BAR_CLEARANCE = style.CELL * 1.1  # between the bar and the grids its spokes reach
TRAFFIC_BAR_FILL = QColor("#d5dbe1")  # a neutral bar under the traffic colours


def bar_clearance(ic: Interconnect | None) -> float:
    """Room the scene leaves above (or left of) the grids for a bar."""
    if ic is None or ic.topology not in BAR_TOPOLOGIES:
        return 0.0
    return BAR_CLEARANCE + BAR_THICKNESS


class LinksItem(QGraphicsItem):
    """Drawn behind the grids; ``refresh`` recomputes its geometry after any grid moved."""

    def __init__(self, interconnect: Interconnect | None):
        super().__init__()
        self.setZValue(-1)
        self.setAcceptedMouseButtons(Qt.MouseButton.NoButton)
        self.ic = interconnect
        self.bar = QRectF()
        self.spokes: list[QLineF] = []
        self.arcs = QPainterPath()
        self.bundled = False
        self.caption: PixelLabel | None = None
        self.spoke_keys: list[tuple[str, int]] = []  # (grid path, instance; −1 when bundled) per spoke
        self.heat: dict[tuple[str, int], float] | None = None
        self.traffic: dict[tuple[str, int], dict[str, float]] | None = None  # busy seconds by category per spoke
        self._bounds = QRectF()

    def boundingRect(self) -> QRectF:
        return self._bounds

    def refresh(self, grids: list[GridItem]) -> None:
        self.prepareGeometryChange()
        self.bar, self.spokes, self.arcs, self.spoke_keys = QRectF(), [], QPainterPath(), []
        if self.ic is not None and grids:
            if self.ic.topology in BAR_TOPOLOGIES:
                self._bar_and_spokes(grids)
            elif self.ic.topology in (Topology.fully_connected, Topology.edges):
                self._arcs(grids)
        bounds = self.arcs.boundingRect().united(self.bar)
        for line in self.spokes:
            bounds = bounds.united(QRectF(line.p1(), line.p2()).normalized())
        self._bounds = bounds.adjusted(-4, -4, 4, 4)
        self._place_caption()
        self.update()

    def _bar_and_spokes(self, grids: list[GridItem]) -> None:
        area = QRectF()
        for g in grids:
            area = area.united(g.scene_grid_rect())
        horizontal = area.width() >= area.height() * 0.8
        t, gap = BAR_THICKNESS, BAR_CLEARANCE
        if horizontal:
            self.bar = QRectF(area.left(), area.top() - gap - t, area.width(), t)
        else:
            self.bar = QRectF(area.left() - gap - t, area.top(), t, area.height())
        total = sum(g.component.count for g in grids)
        self.bundled = total > MAX_SPOKES
        for g in grids:
            if self.bundled:
                r = g.scene_grid_rect()
                end = QPointF(r.center().x(), r.top()) if horizontal else QPointF(r.left(), r.center().y())
                ends = [end]
                self.spoke_keys.append((g.path, -1))
            else:
                ends = [
                    (g.instance_top(i) if horizontal else g.instance_left(i)) for i in range(g.component.count)
                ]
                self.spoke_keys += [(g.path, i) for i in range(g.component.count)]
            for end in ends:
                start = QPointF(end.x(), self.bar.bottom()) if horizontal else QPointF(self.bar.right(), end.y())
                self.spokes.append(QLineF(start, end))

    def _arcs(self, grids: list[GridItem]) -> None:
        centres: list[QPointF] = [g.instance_center(i) for g in grids for i in range(g.component.count)]
        if self.ic is None:
            return
        if self.ic.topology is Topology.edges:
            pairs = list(self.ic.edge_list or [])
        else:
            pairs = [(a, b) for a in range(len(centres)) for b in range(a + 1, len(centres))]
        for a, b in pairs[:MAX_ARCS]:
            if a >= len(centres) or b >= len(centres):
                continue
            p, q = centres[a], centres[b]
            mid = (p + q) / 2
            normal = QPointF(-(q - p).y(), (q - p).x()) * 0.18
            self.arcs.moveTo(p)
            self.arcs.quadTo(mid + normal, q)

    def _place_caption(self) -> None:
        if self.caption is not None:
            self.caption.setParentItem(None)
            if self.caption.scene() is not None:
                self.caption.scene().removeItem(self.caption)
            self.caption = None
        if self.ic is None or self.bar.isNull():
            return
        text = self.ic.topology.value
        if self.bundled:
            text += " · spokes bundled per grid"
        self.caption = PixelLabel([text], Anchor.center, self, point_delta=-0.5)
        self.caption.setPos(self.bar.center())

    def set_heat(self, values: dict[tuple[str, int], float] | None) -> None:
        """Utilisation per spoke (keyed like ``spoke_keys``), or None to draw the plain network. No value
        at all means the run recorded none of these links (it keeps its busiest): plain, not "0 %"."""
        values = values or None
        if values is not None and self.bundled:
            bundled: dict[tuple[str, int], float] = {}
            for (path, _i), v in values.items():
                bundled[(path, -1)] = max(v, bundled.get((path, -1), 0.0))
            values = bundled
        if values != self.heat:
            self.heat = values
            self.update()

    def set_traffic(self, traffic: dict[tuple[str, int], dict[str, float]] | None) -> None:
        """Busy seconds by category per spoke (keyed like ``spoke_keys``, bundled already), or None for the
        plain network: each spoke is then drawn as its categories' shares stacked along it."""
        traffic = traffic or None
        if traffic != self.traffic:
            self.traffic = traffic
            self.update()

    def spoke_segments(self, line: QLineF, key: tuple[str, int]) -> list[tuple[QLineF, str]]:
        """One spoke cut into pieces along its length, one per category it carried, each as long as its
        share of the spoke's busy time, with the category's colour (from the bar end towards the grid)."""
        if not self.traffic or key not in self.traffic:
            return []
        out, start = [], 0.0
        for category, share in shares(self.traffic[key]):
            end = start + share
            out.append((QLineF(line.pointAt(start), line.pointAt(end)), CATEGORY_COLOURS.get(category, "#bab0ac")))
            start = end
        return out

    def _heat_level(self, value: float) -> int:
        return round(min(1.0, max(0.0, value)) * (style.HEAT_LEVELS - 1))

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None) -> None:
        painter.setPen(style.cosmetic_pen(style.LINK, 3.0 if self.bundled else 1.2))
        if self.spokes:
            painter.drawLines(self.spokes)
        if self.heat:
            palette = style.heat_palette()
            for line, key in zip(self.spokes, self.spoke_keys, strict=False):
                level = self._heat_level(self.heat.get(key, 0.0))
                if level > 0:
                    painter.setPen(style.cosmetic_pen(palette[level], 5.0))
                    painter.drawLine(line)
        if self.traffic:
            for line, key in zip(self.spokes, self.spoke_keys, strict=False):
                for piece, colour in self.spoke_segments(line, key):
                    pen = style.cosmetic_pen(QColor(colour), 5.0)
                    pen.setCapStyle(Qt.PenCapStyle.FlatCap)
                    painter.setPen(pen)
                    painter.drawLine(piece)
        if not self.arcs.isEmpty():
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.setPen(style.cosmetic_pen(style.LINK, 1.2))
            painter.drawPath(self.arcs)
        if not self.bar.isNull():
            hottest = max(self.heat.values(), default=0.0) if self.heat else 0.0
            fill = style.heat_palette()[self._heat_level(hottest)] if self.heat is not None else style.SWITCH_FILL
            if self.traffic:  # the switch's own yellow would read as the expert all-to-all's
                fill = TRAFFIC_BAR_FILL
            painter.setBrush(fill)
            painter.setPen(style.cosmetic_pen(style.SWITCH_EDGE, 1.5))
            painter.drawRoundedRect(self.bar, BAR_THICKNESS / 4, BAR_THICKNESS / 4)
