"""Text that keeps its size on screen whatever the zoom: names and figures must stay readable both on a
single chip and on a zoomed-out 64 × 64 wafer.

The item ignores the view's transformations; its anchor (where it is placed in the scene) is one of its
corners or its centre, so a caption can sit *above* or *below* a box regardless of the zoom level.
"""

from __future__ import annotations

from enum import Enum

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFontMetricsF, QPainter
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem, QWidget
from tilewright.studio.ui.canvas import style


class Anchor(Enum):
    top_left = "top-left"  # text hangs below the anchor
    bottom_left = "bottom-left"  # text sits above the anchor
    top_right = "top-right"
    center = "center"


class PixelLabel(QGraphicsItem):
    """A bold first line and normal following lines, on a soft backdrop so lines behind stay readable."""

    PAD = 3.0

    def __init__(
        self,
        lines: list[str],
        anchor: Anchor = Anchor.top_left,
        parent: QGraphicsItem | None = None,
        backdrop: bool = True,
        point_delta: float = 0.0,
    ):
        super().__init__(parent)
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIgnoresTransformations)
        self.setAcceptedMouseButtons(Qt.MouseButton.NoButton)
        self._lines = lines
        self._anchor = anchor
        self._backdrop = backdrop
        self._bold = style.label_font(True, point_delta)
        self._plain = style.label_font(False, point_delta)
        self._max_width: float | None = None  # pixels; longer lines end in "…" (the tooltip has them whole)
        self._max_lines: int | None = None  # lines drawn at most (a short canvas): the rest are in the tooltip
        self._shown = list(lines)  # the lines as drawn: elided to ``_max_width``
        self._rect = self._measure()

    @property
    def lines(self) -> list[str]:
        return list(self._lines)

    def text(self) -> str:
        return "\n".join(self._lines)

    @property
    def shown_lines(self) -> list[str]:
        """The lines as drawn: elided with "…" where longer than the width allowed (``set_max_width``)."""
        return list(self._shown)

    def set_max_width(self, pixels: float | None) -> None:
        """At most ``pixels`` wide (None: as wide as its text): a caption never wider than the canvas."""
        if pixels != self._max_width:
            self.prepareGeometryChange()
            self._max_width = pixels
            self._rect = self._measure()
            self.update()

    def set_max_lines(self, lines: int | None) -> None:
        """Draw at most ``lines`` lines (None: all); the last one drawn ends in "…" when some are left out."""
        if lines != self._max_lines:
            self.prepareGeometryChange()
            self._max_lines = lines
            self._rect = self._measure()
            self.update()

    def set_lines(self, lines: list[str]) -> None:
        if lines != self._lines:
            self.prepareGeometryChange()
            self._lines = list(lines)
            self._rect = self._measure()
            self.update()

    def _measure(self) -> QRectF:
        width = height = 0.0
        room = None if self._max_width is None else max(self._max_width - 2 * self.PAD, 12.0)
        self._shown = []
        kept = self._lines if self._max_lines is None else self._lines[: max(self._max_lines, 1)]
        for i, line in enumerate(kept):
            fm = QFontMetricsF(self._bold if i == 0 else self._plain)
            if i == len(kept) - 1 and len(kept) < len(self._lines):
                line += " …"  # lines left out: the tooltip has them
            if room is not None and fm.horizontalAdvance(line) > room:
                line = fm.elidedText(line, Qt.TextElideMode.ElideRight, room)
            self._shown.append(line)
            width = max(width, fm.horizontalAdvance(line))
            height += fm.height()
        w, h = width + 2 * self.PAD, height + 2 * self.PAD
        if self._anchor is Anchor.bottom_left:
            return QRectF(0, -h, w, h)
        if self._anchor is Anchor.center:
            return QRectF(-w / 2, -h / 2, w, h)
        if self._anchor is Anchor.top_right:
            return QRectF(-w, 0, w, h)
        return QRectF(0, 0, w, h)

    def boundingRect(self) -> QRectF:
        return self._rect

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None) -> None:
        if self._backdrop:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(255, 255, 255, 215))
            painter.drawRoundedRect(self._rect, 3, 3)
        y = self._rect.top() + self.PAD
        for i, line in enumerate(self._shown):
            font = self._bold if i == 0 else self._plain
            painter.setFont(font)
            painter.setPen(style.TEXT if i == 0 else style.MUTED_TEXT)
            fm = QFontMetricsF(font)
            painter.drawText(QPointF(self._rect.left() + self.PAD, y + fm.ascent()), line)
            y += fm.height()
