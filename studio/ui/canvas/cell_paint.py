"""Painting a grid item's overlay (stage colours or heat): whole cells, the devices inside cells, neighbour
links and the far-out block — batched by colour so a frame costs a few ``drawRects`` calls.

Level of detail: a cell smaller than ``RASTER_CELL_PX`` per device shows its dominant colour; larger, it
shows each device (a die's 4 × 4 tiles, a node's 8 GPUs); a grid drawn as one block shows an image with
one pixel per device.
"""

from __future__ import annotations

from collections import defaultdict

from PySide6.QtCore import QLineF, QRectF, Qt
from PySide6.QtGui import QPainter
from tilewright.studio.ui.canvas import style
from tilewright.studio.ui.canvas.layout import GridShape
from tilewright.studio.ui.canvas.overlay import CellColours

RASTER_CELL_PX = 4.0  # pixels per device needed before the devices of a cell are drawn one by one
STEP = style.CELL + style.GAP
INSET = 0.06  # of a device's sub-cell: a hairline of the cell's own colour between devices


def paint_cells(painter: QPainter, shape: GridShape, colours: CellColours, plane: int,
                visible: tuple[int, int, int, int], cell_px: float, count: int) -> None:
    r0, r1, c0, c1 = visible
    _, rh, rw = colours.pixels.shape
    per_device = cell_px / max(rh, rw) >= RASTER_CELL_PX and rh * rw > 1
    first = plane * shape.rows * shape.cols
    batches: dict[int, list[QRectF]] = defaultdict(list)
    sub_w, sub_h = style.CELL / rw, style.CELL / rh
    for r in range(r0, r1 + 1):
        for c in range(c0, c1 + 1):
            i = first + r * shape.cols + c
            if i >= count:
                continue
            x, y = c * STEP, r * STEP
            if not per_device:
                idx = int(colours.cells[i])
                if idx >= 0:
                    batches[idx].append(QRectF(x, y, style.CELL, style.CELL))
                continue
            px = colours.pixels[i]
            for a in range(rh):
                for b in range(rw):
                    idx = int(px[a, b])
                    if idx >= 0:
                        batches[idx].append(QRectF(x + b * sub_w, y + a * sub_h, sub_w, sub_h).adjusted(
                            sub_w * INSET, sub_h * INSET, -sub_w * INSET, -sub_h * INSET))
    painter.setPen(Qt.PenStyle.NoPen)
    for idx, rects in batches.items():
        painter.setBrush(colours.palette[idx % len(colours.palette)])
        painter.drawRects(rects)


def link_segments(shape: GridShape, plane: int, visible: tuple[int, int, int, int],
                  links: dict[tuple[int, int], int]) -> dict[int, list[QLineF]]:
    """Gap segments of the neighbour links with a heat value, batched by palette index."""
    r0, r1, c0, c1 = visible
    n = shape.rows * shape.cols
    out: dict[int, list[QLineF]] = defaultdict(list)
    for (a, b), idx in links.items():
        pa, ra, ca = shape.locate(a)
        pb, rb, cb = shape.locate(b)
        if pa != plane or pb != plane or not (r0 <= min(ra, rb) <= r1 + 1 and c0 <= min(ca, cb) <= c1 + 1):
            continue
        if a >= (plane + 1) * n or b >= (plane + 1) * n:
            continue
        if ra == rb and abs(ca - cb) == 1:
            c, y = min(ca, cb), ra * STEP + style.CELL / 2
            out[idx].append(QLineF(c * STEP + style.CELL, y, (c + 1) * STEP, y))
        elif ca == cb and abs(ra - rb) == 1:
            r, x = min(ra, rb), ca * STEP + style.CELL / 2
            out[idx].append(QLineF(x, r * STEP + style.CELL, x, (r + 1) * STEP))
    return out


def paint_links(painter: QPainter, shape: GridShape, colours: CellColours, plane: int,
                visible: tuple[int, int, int, int], cell_px: float) -> None:
    if not colours.links:
        return
    width = max(2.5, min(9.0, cell_px * 0.12))
    for idx, lines in link_segments(shape, plane, visible, colours.links).items():
        if idx <= 0:
            continue
        pen = style.cosmetic_pen(colours.palette[idx % len(colours.palette)], width)
        pen.setCapStyle(Qt.PenCapStyle.FlatCap)
        painter.setPen(pen)
        painter.drawLines(lines)


def paint_block(painter: QPainter, shape: GridShape, colours: CellColours, plane: int, kind: str) -> None:
    rect = QRectF(0, 0, shape.plane_width, shape.size()[1])
    painter.drawImage(rect, colours.image(shape, plane, style.kind_fill(kind)))
    painter.setBrush(Qt.BrushStyle.NoBrush)
    painter.setPen(style.cosmetic_pen(style.kind_edge(kind), 1.5))
    painter.drawRect(rect)
