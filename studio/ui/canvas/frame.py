"""The outline of the viewed component around its children, titled with its figures, with its edge
memories (DRAM ports on the west and east die edges, say) drawn as port boxes on the frame's sides."""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem, QWidget
from tilewright.engine.ir.hardware import Component, Edge, Memory
from tilewright.studio.summary import interconnect_caption, key_figures, memory_caption, own_ports
from tilewright.studio.ui.canvas import style
from tilewright.studio.ui.canvas.label import Anchor, PixelLabel

PORT_DEPTH_CELLS = 0.45  # port boxes are this many cells deep (or 4 % of a large level)


def frame_lines(level: Component, shown: str | None = None) -> list[str]:
    """Title lines of a level: what it is, its figures, what joins its children, its edge memories.
    ``shown`` names the instance drawn ("die[2,1]"), since the frame shows ONE instance's inside."""
    name = shown if shown and level.count > 1 else level.name
    lines = [f"{name} · {level.kind.value}" + (f" · one of {level.count}" if level.count > 1 else "")]
    figures = key_figures(level)
    if figures:
        lines.append(" · ".join(figures))
    if level.interconnect is not None:
        lines.append(f"links: {interconnect_caption(level.interconnect)}")
    for m in level.memories:
        if m.attach:
            edges = ", ".join(e.value for e in m.attach)
            lines.append(f"edge memory ({edges}): {memory_caption(m, own_ports(level, m))}")
    return lines


PADDING_PX = 28.0  # between the frame and what it holds, in pixels at the current zoom
COMPACT_PADDING_PX = 10.0  # the same in a short canvas, where every pixel of height goes to the cells


class FrameItem(QGraphicsItem):
    def __init__(self, level: Component, shown: str | None = None):
        super().__init__()
        self.setZValue(-2)
        self.setAcceptedMouseButtons(Qt.MouseButton.NoButton)
        self.level = level
        self.rect = QRectF()
        self.ports: list[tuple[QRectF, Memory]] = []
        self.port_depth = style.CELL * PORT_DEPTH_CELLS
        self.port_labels: list[PixelLabel] = []
        self.port_names: list[str] = []  # "dram@west[0]", as the elaborated graph names each port box
        self.heat: dict[str, float] | None = None
        self.loads: dict[str, str] = {}  # after a run: bytes and utilisation per port name
        self.load_labels: list[PixelLabel] = []
        self.title = PixelLabel(frame_lines(level, shown), Anchor.bottom_left, self, backdrop=False, point_delta=0.5)
        self.padding_px = PADDING_PX  # less in a short canvas (``LevelScene.set_caption_lines``)

    def boundingRect(self) -> QRectF:
        d = self.port_depth
        return self.rect.adjusted(-d, -d, d, d)

    def fit_around(self, content: QRectF, view_scale: float) -> None:
        """Enclose ``content`` (grids, bar and their captions) with a padding that looks the same at
        any zoom, since the captions inside are sized in pixels too."""
        self.prepareGeometryChange()
        self.port_depth = max(style.CELL * PORT_DEPTH_CELLS, 0.04 * max(content.width(), content.height()))
        pad = self.padding_px / view_scale
        # Edges carrying memory ports get extra room, so the half of a port box inside never covers a grid,
        # nor the inner half of its name or load label (sized in pixels) a caption.
        extra = {e: max(self.port_depth / 2, self._label_reach(e) / view_scale)
                 if any(e in m.attach for m in self.level.memories) else 0.0 for e in Edge}
        self.rect = content.adjusted(
            -pad - extra[Edge.west], -pad - extra[Edge.north], pad + extra[Edge.east], pad + extra[Edge.south]
        )
        self.title.setPos(self.rect.topLeft())
        self.ports = self._port_rects()
        self.port_names = self._port_names()
        self._label_ports()
        self._label_loads()
        self.update()

    def _label_reach(self, edge: Edge) -> float:
        """Pixels the port labels (centred on ``edge``) reach inside the frame, and a gap."""
        labels = self.port_labels + self.load_labels
        if not labels:
            return 0.0
        half = max((lb.boundingRect().width() if edge in (Edge.west, Edge.east) else lb.boundingRect().height())
                   for lb in labels) / 2
        return half + 4.0

    def set_port_loads(self, loads: dict[str, str] | None) -> None:
        """Each port's traffic over the run ("R 35.9 TB · W 0 B · 57.6 %"), or None to take them away."""
        loads = loads or {}
        if loads != self.loads:
            self.loads = loads
            self._label_loads()

    def _label_loads(self) -> None:
        """A load label on each port box: bytes read, bytes written, utilisation, one per line."""
        for label in self.load_labels:
            label.setParentItem(None)
            if label.scene() is not None:
                label.scene().removeItem(label)
        self.load_labels = []
        for (box, _m), name in zip(self.ports, self.port_names, strict=False):
            text = self.loads.get(name)
            if not text:
                continue
            label = PixelLabel(text.split(" · "), Anchor.center, self, point_delta=-1.5)  # inside its box
            label.setPos(box.center())
            self.load_labels.append(label)

    def _label_ports(self) -> None:
        """One name per memory and edge, centred on its group of port boxes."""
        for label in self.port_labels:
            label.setParentItem(None)
            if label.scene() is not None:
                label.scene().removeItem(label)
        self.port_labels = []
        groups: dict[tuple[str, float, float], QRectF] = {}
        for box, m in self.ports:
            vertical = box.height() > box.width()
            key = (m.name, box.center().x() if vertical else -1.0, box.center().y() if not vertical else -1.0)
            groups[key] = groups.get(key, QRectF()).united(box)
        for (name, _x, _y), area in groups.items():
            label = PixelLabel([name], Anchor.center, self, point_delta=-1.0)
            label.setPos(area.center())
            self.port_labels.append(label)

    def _port_rects(self) -> list[tuple[QRectF, Memory]]:
        """Each edge memory gets a share of its edge, split into one box per port."""
        out: list[tuple[QRectF, Memory]] = []
        r, d = self.rect, self.port_depth
        for edge in Edge:
            mems = [m for m in self.level.memories if edge in m.attach]
            if not mems:
                continue
            vertical = edge in (Edge.west, Edge.east)
            length = (r.height() if vertical else r.width()) * 0.8
            start = (r.top() if vertical else r.left()) + (r.height() if vertical else r.width()) * 0.1
            slots = [(m, p) for m in mems for p in range(m.ports_per_edge)]
            share = length / len(slots)
            for i, (m, _port) in enumerate(slots):
                a = start + i * share + share * 0.1
                span = share * 0.8
                if edge is Edge.west:
                    box = QRectF(r.left() - d / 2, a, d, span)
                elif edge is Edge.east:
                    box = QRectF(r.right() - d / 2, a, d, span)
                elif edge is Edge.north:
                    box = QRectF(a, r.top() - d / 2, span, d)
                else:
                    box = QRectF(a, r.bottom() - d / 2, span, d)
                out.append((box, m))
        return out

    def _port_names(self) -> list[str]:
        """Names in the same order as ``_port_rects`` makes the boxes."""
        return [f"{m.name}@{edge.value}[{p}]" for edge in Edge for m in self.level.memories if edge in m.attach
                for p in range(m.ports_per_edge)]

    def set_heat(self, values: dict[str, float] | None) -> None:
        """Utilisation per memory port name, or None (or nothing recorded) for the plain colours."""
        values = values or None
        if values != self.heat:
            self.heat = values
            self.update()

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None) -> None:
        painter.setBrush(style.FRAME_FILL)
        painter.setPen(style.cosmetic_pen(style.FRAME_EDGE, 1.5))
        radius = style.CELL * 0.25
        painter.drawRoundedRect(self.rect, radius, radius)
        painter.setBrush(style.MEMORY_FILL)
        painter.setPen(style.cosmetic_pen(style.MEMORY_EDGE, 1.2))
        palette = style.heat_palette()
        for i, (box, _m) in enumerate(self.ports):
            if self.heat is not None and i < len(self.port_names):
                level = round(min(1.0, max(0.0, self.heat.get(self.port_names[i], 0.0))) * (len(palette) - 1))
                painter.setBrush(palette[level])
            painter.drawRect(box)
