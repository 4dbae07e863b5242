"""Layer tags on the layout: "L12–23" written at the middle of each pipeline stage's devices.

When cells are too small for their own text, or one cell holds several stages (a die whose tile rows
are four stages), the stages are named where they are. Tags keep a fixed pixel size and are placed
greedily. A tag that would cover a caption (a component's name and figures, the level's title, a memory
port's name or load), a tag already drawn or another stage's centre moves up or down by its height if it
stays on its component's cells, so the tags of narrow side-by-side stages (eight GPUs of a node) stagger.
A stage whose cells still leave its tag no place gets one in the nearest free spot of the view, with a
leader line to its centre (``tag_places``): at 1280 × 720 dropping them left the GPT-3 node with three
tags for eight stages and the PaLM wafer with three for twenty. Every stage whose centre is in view is
named at least once; only a view with no free place left drops a tag (the legend still names every stage)."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFontMetricsF, QPainter, QPainterPath, QTransform
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem, QWidget
from tilewright.studio.mapping import StageLayout, format_ranges
from tilewright.studio.ui.canvas import style
from tilewright.studio.ui.canvas.grid_item import GridItem
from tilewright.studio.ui.canvas.label import PixelLabel
from tilewright.studio.ui.canvas.overlay import CellColours
from tilewright.studio.ui.canvas.tag_places import CLEARANCE, leader_end, nearest_free, rect_array

STEP = style.CELL + style.GAP
PAD = 3.0
TAG_FILL = QColor(255, 255, 255, 235)
EVERYWHERE = QRectF(-1e9, -1e9, 2e9, 2e9)
MAX_TAGS = 400
DOT = 2.5  # px: radius of the dot a leader line starts from (a stage's centre)
MAX_LEADERS = 48  # tags placed off their cells, at most (each a search of the view)
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


def _numbers(rect: QRectF) -> tuple[float, float, float, float]:
    """A rect as plain numbers, comparable in the placement cache's key."""
    return rect.left(), rect.top(), rect.width(), rect.height()


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
        self.box_stages: list[int] = []  # the stage of each of ``boxes`` (tests)
        self.leaders: list[tuple[int, QPointF, QPointF]] = []  # (stage, its centre, tag edge) of tags off their cells
        self.named: list[int] = []  # stages named last paint, by a tag or by their own cells (tests)
        self.single: dict[GridItem, bool] = {}
        self._placed_key: tuple | None = None  # what the last placement depended on, and its result
        self._placed: list[tuple[QRectF, str, int, QPointF | None]] = []

    def set_tags(self, layout: StageLayout, stage_colours: dict[GridItem, CellColours]) -> None:
        self.prepareGeometryChange()
        self.tags = []
        self._placed_key = None
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
        self.box_stages = []
        self.leaders = []
        if not self.tags:
            return
        font = style.label_font(True, -1.0)
        transform = painter.worldTransform()
        view = QRectF(widget.rect()) if widget is not None else QRectF(painter.viewport())
        detail = style.CELL * option.levelOfDetailFromTransform(transform) >= style.DETAIL_CELL_PX
        placed = self._place(transform, QFontMetricsF(font), view, detail)
        painter.save()
        painter.resetTransform()
        painter.setFont(font)
        for box, _text, stage, centre in placed:  # leaders first: every tag is drawn over them
            if centre is not None:
                end = leader_end(box, centre)
                self.leaders.append((stage, QPointF(centre), end))
                ink = style.stage_color(stage).darker(150)
                painter.setPen(style.cosmetic_pen(ink, 1.5))
                painter.drawLine(centre, end)
                painter.setBrush(ink)
                painter.drawEllipse(centre, DOT, DOT)
        for box, text, stage, _centre in placed:
            self.boxes.append(QRectF(box))
            self.box_stages.append(stage)
            # A white tag with the stage's colour as its rim: readable on any band, never mistaken for one.
            painter.setPen(style.cosmetic_pen(style.stage_color(stage).darker(135), 2.0))
            painter.setBrush(TAG_FILL)
            painter.drawRoundedRect(box, 3, 3)
            painter.setPen(style.TEXT)
            painter.drawText(box, Qt.AlignmentFlag.AlignCenter, text)
            self.drawn += 1
        painter.restore()

    def _place(
        self, transform: QTransform, fm: QFontMetricsF, view: QRectF, detail: bool
    ) -> list[tuple[QRectF, str, int, QPointF | None]]:
        """(box, text, stage, leader start or None) of every tag drawn, in viewport pixels.

        First each tag on its stage's cells (nudged up or down), where it covers no caption, no tag and no
        other stage's centre (a stage whose middle is hidden cannot be pointed at); then every stage still
        without a tag and with its centre in view gets the nearest free spot, with a leader line."""
        captions = self._captions(transform) + self._covered()
        grids = self._grid_rects(transform)
        # Repaints (hover, selection, the time cursor) mostly change nothing a tag depends on: reuse.
        key = (detail, _numbers(view), tuple(_numbers(r) for r in captions + grids), tuple(
            transform.map(QPointF(*xy)).toTuple() for xy in ((0.0, 0.0), (1.0, 1.0))))
        if key == self._placed_key:
            return self._placed
        todo = []
        named: set[int] = set()  # stages with a tag (or cells that name them)
        for item, local, text, stage in self.tags:
            if detail and self.single.get(item, False):
                named.add(stage)  # each cell names its own stage
                continue
            if not text:
                continue  # a stage with no layers (more stages than layers): an empty tag says nothing
            centre = transform.map(item.mapToScene(local))
            w, h = fm.horizontalAdvance(text) + 2 * PAD, fm.height() + PAD
            todo.append((item, centre, text, stage, QRectF(centre.x() - w / 2, centre.y() - h / 2, w, h)))
        # Every stage's centre as a small box (x0, y0, x1, y1), with its stage: a tag covers no other's.
        centres = np.array([(c.x(), c.y()) for _i, c, _t, _s, _b in todo]).reshape(-1, 2)
        dots = np.hstack([centres - DOT, centres + DOT])
        dot_stage = np.array([s for _i, _c, _t, s, _b in todo], dtype=int)
        placed: list[tuple[QRectF, str, int, QPointF | None]] = []
        waiting: dict[int, tuple[QPointF, str, QRectF]] = {}  # stages with no place on their cells
        taken: list[QRectF] = []
        for item, centre, text, stage, box in todo:
            others = dots[dot_stage != stage]
            found = self._free_box(box, transform.mapRect(item.scene_grid_rect()), captions, taken, others)
            if found is None:
                if view.contains(centre):
                    waiting.setdefault(stage, (centre, text, box))
                continue
            taken.append(found)
            named.add(stage)
            placed.append((found, text, stage, None))
        leaders = 0
        for stage, (centre, text, box) in sorted(waiting.items()):
            if stage in named:
                continue  # another of its components carries its tag
            if leaders == MAX_LEADERS:
                break  # past this many, lines from everywhere to everywhere: the legend names the rest
            fixed = rect_array(captions + taken)  # leaders may pass other stages' dots, not text or tags
            walls = np.vstack([fixed, dots[dot_stage != stage]])
            found = nearest_free(centre, (box.width(), box.height()), view, walls, grids, uncrossed=fixed)
            leaders += 1
            if found is not None:
                taken.append(found)
                named.add(stage)
                placed.append((found, text, stage, centre))
        self.named = sorted(named)
        self._placed_key, self._placed = key, placed
        return placed

    def _covered(self) -> list[QRectF]:
        """Viewport rects covered by widgets floating on the view (the legend): a tag there is hidden."""
        scene = self.scene()
        covered = getattr(scene, "covered", None)
        return list(covered()) if callable(covered) else []

    def _grid_rects(self, transform: QTransform) -> list[QRectF]:
        """Every component's cells on screen: a tag placed off its own cells keeps off these if it can."""
        scene = self.scene()
        if scene is None:
            return []
        return [transform.mapRect(g.scene_grid_rect()) for g in scene.items() if isinstance(g, GridItem)]

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
    def _free_box(
        box: QRectF, cells: QRectF, captions: list[QRectF], taken: list[QRectF], dots: np.ndarray
    ) -> QRectF | None:
        """``box`` clear of earlier tags, of captions and of other stages' centres (``dots``, rows of x0, y0,
        x1, y1) — moved up or down by its height, its centre still on the component's ``cells``, if one is in
        the way (narrow neighbours' tags stagger); None if no place is free."""
        for nudge in NUDGES:
            moved = box.translated(0, nudge * box.height())
            if nudge and not cells.contains(moved.center()):
                continue
            grown = moved.adjusted(-CLEARANCE, -CLEARANCE, CLEARANCE, CLEARANCE)  # rims must not touch
            if any(grown.intersects(c) for c in captions) or any(grown.intersects(t) for t in taken):
                continue
            if not np.any((dots[:, 0] < grown.right()) & (dots[:, 2] > grown.left())
                          & (dots[:, 1] < grown.bottom()) & (dots[:, 3] > grown.top())):
                return moved
        return None
