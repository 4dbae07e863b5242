"""Layer tags on the layout: "L12–23" written at the middle of each pipeline stage's devices.

When cells are too small for their own text, or one cell holds several stages (a die whose tile rows
are four stages), the stages are named where they are. Tags keep a fixed pixel size and are placed
greedily. A tag that would cover a caption (a component's name and figures, the level's title, a memory
port's name or load) or a tag already drawn moves up or down by its height if it stays on its component's
cells, so the tags of narrow side-by-side stages (eight GPUs of a node) stagger; with no free place it is
left out at this zoom (the legend still names every stage), so zooming in reveals more of them, never a
pile of overlapping text.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFontMetricsF, QPainter, QPainterPath
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem, QWidget
from tilewright.studio.mapping import StageLayout, format_ranges
from tilewright.studio.ui.canvas import style
from tilewright.studio.ui.canvas.grid_item import GridItem
from tilewright.studio.ui.canvas.label import PixelLabel
from tilewright.studio.ui.canvas.overlay import CellColours

STEP = style.CELL + style.GAP
PAD = 3.0
TAG_FILL = QColor(255, 255, 255, 235)
EVERYWHERE = QRectF(-1e9, -1e9, 2e9, 2e9)
MAX_TAGS = 400
NUDGES = (0.0, -1.0, 1.0)  # tag heights a tag may move off its stage's centre to clear a caption


def stage_centres(item: GridItem, colours: CellColours) -> list[tuple[QPointF, int]]:
    """(item-local centre, stage) of every stage present in the item's stage colours."""
    pixels = colours.pixels
    cells, a, b = np.nonzero(pixels >= 0)
    if cells.size == 0:
        return []
    shape = item.grid_shape
    _, rh, rw = pixels.shape
    plane, rest = np.divmod(cells, shape.rows * shape.cols)
    r, c = np.divmod(rest, shape.cols)
    x = plane * shape.plane_stride + c * STEP + (b + 0.5) * style.CELL / rw
    y = r * STEP + (a + 0.5) * style.CELL / rh
    stages = pixels[cells, a, b]
    n = int(stages.max()) + 1
    counts = np.bincount(stages, minlength=n)
    sx, sy = np.bincount(stages, x, n), np.bincount(stages, y, n)
    return [(QPointF(sx[s] / counts[s], sy[s] / counts[s]), s) for s in range(n) if counts[s]]


def tag_text(layout: StageLayout, stage: int) -> str:
    """The stage's layers, short: an interleaved stage shows its first chunk and how many more."""
    ranges = layout.stage_layers[stage] if stage < layout.stages else []
    if len(ranges) > 1:
        return f"{format_ranges(ranges[:1])} +{len(ranges) - 1}"
    return format_ranges(ranges)


def _one_stage_per_cell(colours: CellColours) -> bool:
    flat = colours.pixels.reshape(len(colours.pixels), -1)
    lo = np.where(flat >= 0, flat, np.iinfo(np.int32).max).min(axis=1)
    return bool(np.all((flat == lo[:, None]) | (flat < 0)))


class StageTags(QGraphicsItem):
    def __init__(self) -> None:
        super().__init__()
        self.setZValue(5)
        self.setAcceptedMouseButtons(Qt.MouseButton.NoButton)
        self.tags: list[tuple[GridItem, QPointF, str, int]] = []
        self.drawn = 0  # tags painted last time (tests)
        self.boxes: list[QRectF] = []  # where they were painted, in viewport pixels (tests)
        self.single: dict[GridItem, bool] = {}

    def set_tags(self, layout: StageLayout, stage_colours: dict[GridItem, CellColours]) -> None:
        self.prepareGeometryChange()
        self.tags = []
        self.single = {item: _one_stage_per_cell(colours) for item, colours in stage_colours.items()}
        for item, colours in stage_colours.items():
            for local, stage in stage_centres(item, colours)[:MAX_TAGS]:
                self.tags.append((item, local, tag_text(layout, stage), stage))
        self.update()

    def boundingRect(self) -> QRectF:
        # Tags follow moved items and keep a pixel size, so they may be anywhere on the level; a fixed
        # rect (rather than the changing scene rect) keeps the scene's index right without bookkeeping.
        return EVERYWHERE

    def shape(self) -> QPainterPath:
        return QPainterPath()  # never under the mouse: clicks and drops go to the components beneath

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None) -> None:
        self.drawn = 0
        self.boxes = []
        if not self.tags:
            return
        scale = option.levelOfDetailFromTransform(painter.worldTransform())
        font = style.label_font(True, -1.0)
        fm = QFontMetricsF(font)
        transform = painter.worldTransform()
        painter.save()
        painter.resetTransform()
        painter.setFont(font)
        captions = self._captions(transform)
        taken: list[QRectF] = []
        for item, local, text, stage in self.tags:
            if style.CELL * scale >= style.DETAIL_CELL_PX and self.single.get(item, False):
                continue  # each cell names its own stage
            centre = transform.map(item.mapToScene(local))
            w, h = fm.horizontalAdvance(text) + 2 * PAD, fm.height() + PAD
            cells = transform.mapRect(item.scene_grid_rect())
            box = self._free_box(QRectF(centre.x() - w / 2, centre.y() - h / 2, w, h), cells, captions, taken)
            if box is None:
                continue
            taken.append(box)
            self.boxes.append(QRectF(box))
            # A white tag with the stage's colour as its rim: readable on any band, never mistaken for one.
            painter.setPen(style.cosmetic_pen(style.stage_color(stage).darker(135), 2.0))
            painter.setBrush(TAG_FILL)
            painter.drawRoundedRect(box, 3, 3)
            painter.setPen(style.TEXT)
            painter.drawText(box, Qt.AlignmentFlag.AlignCenter, text)
            self.drawn += 1
        painter.restore()

    def _captions(self, transform: object) -> list[QRectF]:
        """Where the level's captions are on screen (pixels): tags keep clear of them."""
        scene = self.scene()
        if scene is None:
            return []
        return [
            label.deviceTransform(transform).mapRect(label.boundingRect())
            for label in scene.items()
            if isinstance(label, PixelLabel) and label.isVisible() and label.lines
        ]

    @staticmethod
    def _free_box(box: QRectF, cells: QRectF, captions: list[QRectF], taken: list[QRectF]) -> QRectF | None:
        """``box`` clear of earlier tags and of captions — moved up or down by its height, its centre still
        on the component's ``cells``, if a caption or a neighbour's tag is in the way (narrow neighbours' tags
        stagger); None if no place is free."""
        for nudge in NUDGES:
            moved = box.translated(0, nudge * box.height())
            if nudge and not cells.contains(moved.center()):
                continue
            if not any(moved.intersects(c) for c in captions) and not any(moved.intersects(t) for t in taken):
                return moved
        return None
