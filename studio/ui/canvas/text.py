"""Text painted inside cells at a fixed pixel size: wrapped to the cell, cut to what fits.

Painted with the painter's transform reset, so the letters do not scale with the zoom (a 10 px cell
gets no text at all rather than 1 px letters; a 200 px cell gets several readable lines).
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QFont, QFontMetricsF, QPainter
from tilewright.studio.ui.canvas import style


def wrap_text(line: str, fm: QFontMetricsF, max_px: float) -> list[str]:
    """Break ``line`` to fit ``max_px``: at spaces ("312 TFLOP/s" → "312", "TFLOP/s"), or before an
    index ("chiplet[0,1]" → "chiplet", "[0,1]"); a part that alone is too long is elided."""
    words: list[str] = []
    for word in line.split(" "):
        head, sep, tail = word.partition("[")
        if sep and head and fm.horizontalAdvance(word) > max_px:
            words += [head, sep + tail]
        else:
            words.append(word)
    out: list[str] = []
    current = ""
    for word in words:
        candidate = f"{current} {word}" if current and not word.startswith("[") else current + word
        if fm.horizontalAdvance(candidate) <= max_px or not current:
            current = candidate
        else:
            out.append(current)
            current = word
    out.append(current)
    return [fm.elidedText(part, Qt.TextElideMode.ElideRight, int(max_px)) for part in out]


def draw_centred_text(
    painter: QPainter,
    centre: QPointF,
    lines: list[str],
    bold_first: bool = True,
    max_px: float = 100000.0,
    max_height: float = 100000.0,
) -> int:
    """Draw ``lines`` centred on ``centre`` (scene coordinates); returns how many lines were drawn."""
    wrapped: list[tuple[str, QFont]] = []
    for i, line in enumerate(ln for ln in lines if ln):
        font = style.label_font(True) if bold_first and i == 0 else style.label_font(False, -1.0)
        wrapped += [(part, font) for part in wrap_text(line, QFontMetricsF(font), max_px)]
    total = 0.0
    for n, (_text, font) in enumerate(wrapped):
        height = QFontMetricsF(font).height()
        if total + height > max_height:
            wrapped = wrapped[:n]
            break
        total += height
    if not wrapped:
        return 0
    where = painter.worldTransform().map(centre)
    painter.save()
    painter.resetTransform()
    painter.setPen(style.TEXT)
    y = where.y() - total / 2
    for text, font in wrapped:
        fm = QFontMetricsF(font)
        painter.setFont(font)
        painter.drawText(QPointF(where.x() - fm.horizontalAdvance(text) / 2, y + fm.ascent()), text)
        y += fm.height()
    painter.restore()
    return len(wrapped)
