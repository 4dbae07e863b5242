"""Where the iteration's time goes, as one horizontal stacked bar with a legend of values and shares.

Painted by hand (one ``paint`` for screen, PNG and SVG alike) instead of a plot: it has no axes to read,
only proportions and labelled numbers.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFontMetrics, QImage, QPainter, QPaintEvent
from PySide6.QtSvg import QSvgGenerator
from PySide6.QtWidgets import QSizePolicy, QWidget
from tilewright.engine.io.atomic import write_atomic
from tilewright.studio.exporting import with_generic_fonts, write_image
from tilewright.studio.model.palette import CATEGORY_COLOURS, CATEGORY_TIPS, category_label
from tilewright.studio.units import SECONDS, format_percent, format_value

BAR_H = 22
GAP = 6
SWATCH = 10
Segment = tuple[str, float, str]  # name, seconds, colour


def segments_of(breakdown: dict[str, float]) -> list[Segment]:
    return [(name, float(v), CATEGORY_COLOURS.get(name, "#888888")) for name, v in breakdown.items() if v and v > 0]


def segment_text(name: str, seconds: float, total: float) -> str:
    return f"{category_label(name)} {format_value(seconds, SECONDS)} ({format_percent(seconds / total)})"


class BreakdownBar(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.segments: list[Segment] = []
        self.title = "Time per iteration, by category"
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMouseTracking(True)

    def set_breakdown(self, breakdown: dict[str, float] | None) -> None:
        self.segments = segments_of(breakdown or {})
        self.setVisible(bool(self.segments))
        self.setToolTip("\n".join(
            segment_text(n, s, self.total) + (f" — {CATEGORY_TIPS[n]}" if n in CATEGORY_TIPS else "")
            for n, s, _ in self.segments))
        self.updateGeometry()
        self.update()

    @property
    def total(self) -> float:
        return sum(s for _, s, _ in self.segments) or 1.0

    def _legend_lines(self, width: int) -> list[list[tuple[str, str]]]:
        fm = QFontMetrics(self.font())
        lines: list[list[tuple[str, str]]] = [[]]
        x = 0
        for name, seconds, colour in self.segments:
            text = segment_text(name, seconds, self.total)
            need = SWATCH + 4 + fm.horizontalAdvance(text) + 16
            if x + need > width and lines[-1]:
                lines.append([])
                x = 0
            lines[-1].append((text, colour))
            x += need
        return lines

    def heightForWidth(self, width: int) -> int:  # noqa: N802
        fm = QFontMetrics(self.font())
        return fm.height() + GAP + BAR_H + GAP + len(self._legend_lines(width)) * (fm.height() + 2)

    def hasHeightForWidth(self) -> bool:  # noqa: N802
        return True

    def sizeHint(self) -> QSize:  # noqa: N802
        width = max(self.width(), 600)
        return QSize(width, self.heightForWidth(width))

    def paintEvent(self, _event: QPaintEvent) -> None:  # noqa: N802
        painter = QPainter(self)
        self.render_into(painter, self.width())
        painter.end()

    def render_into(self, painter: QPainter, width: int) -> None:
        """Title, bar and legend, laid out for ``width`` pixels (shared by screen and file output)."""
        if not self.segments:
            return
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        fm = QFontMetrics(self.font())
        painter.setFont(self.font())
        painter.setPen(QColor("#3d4852"))
        painter.drawText(0, fm.ascent(), self.title)
        top = fm.height() + GAP
        x = 0.0
        for name, seconds, colour in self.segments:
            w = (width - 1) * seconds / self.total
            rect = QRectF(x, top, w, BAR_H)
            painter.fillRect(rect, QColor(colour))
            label = f"{category_label(name)} {format_percent(seconds / self.total)}"
            if fm.horizontalAdvance(label) + 8 < w:
                painter.setPen(QColor("white") if QColor(colour).lightness() < 150 else QColor("#1b2631"))
                painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, label)
            x += w
        painter.setPen(QColor("#3d4852"))
        y = top + BAR_H + GAP
        for line in self._legend_lines(width):
            lx = 0
            for text, colour in line:
                painter.fillRect(QRectF(lx, y + (fm.height() - SWATCH) / 2, SWATCH, SWATCH), QColor(colour))
                painter.drawText(lx + SWATCH + 4, y + fm.ascent(), text)
                lx += SWATCH + 4 + fm.horizontalAdvance(text) + 16
            y += fm.height() + 2

    def save_png(self, path: str | Path, width: int = 1200) -> QSize:
        size = QSize(width, self.heightForWidth(width))
        image = QImage(size, QImage.Format.Format_ARGB32)
        image.fill(QColor("white"))
        painter = QPainter(image)
        self.render_into(painter, width)
        painter.end()
        write_image(image, path)  # atomic: a killed export leaves the earlier file whole
        return size

    def save_svg(self, path: str | Path, width: int = 1200) -> None:
        """The PNG's picture as vectors: the same size in CSS pixels, text at the PNG's size (the SVG's
        resolution is the PNG's: at Qt's default 72 dpi, 9 pt text came out a quarter smaller and the
        declared size in mm a third larger), on the same white."""
        height = self.heightForWidth(width)
        data = QByteArray()
        buffer = QBuffer(data)
        generator = QSvgGenerator()
        generator.setOutputDevice(buffer)
        generator.setResolution(QImage(1, 1, QImage.Format.Format_ARGB32).logicalDpiX())
        generator.setSize(QSize(width, height))
        generator.setViewBox(QRectF(0, 0, width, height))
        generator.setTitle(self.title)
        painter = QPainter(generator)
        painter.fillRect(QRectF(0, 0, width, height), QColor("white"))
        self.render_into(painter, width)
        painter.end()
        write_atomic(path, with_generic_fonts(bytes(data).decode("utf-8")))
