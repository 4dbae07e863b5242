"""Layer tags on the layout: "L12–23" written at the middle of each pipeline stage's devices.

When cells are too small for their own text, or one cell holds several stages (a die whose tile rows
are four stages), the stages are named where they are. Tags keep a fixed pixel size and are placed
greedily. A tag that would cover a caption (a component's name and figures, the level's title, a memory
port's name or load), the level's link bar, the frame's edge, a tag already drawn or another stage's
centre moves up or down by its height if it stays on its component's cells.

If some stage in view finds no place that way, the level writes every stage short — its number, which
the legend spells out — on its cells where it fits, and a stage whose cells still leave its number no
place gets the nearest free spot of the view with a leader line to its centre (``tag_places``). At
1280 × 720 long tags on leaders crowded the canvas: the GPT-3 cluster's "L5–8 +2" lay across the
system's frame and the fat-tree bar, PaLM's twenty crossed one another and the die caption. Later tags
keep off earlier leaders; the lines are drawn beneath the components (``LeaderLines``), so one that
must pass a caption runs under its backdrop, and the stage's dot and the tag are drawn on top. Every
stage whose centre is in view is named at least once; only a view with no free place left drops a tag
(the legend still names every stage)."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFontMetricsF, QPainter, QPainterPath, QTransform
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem, QWidget
from tilewright.studio.mapping import StageLayout, format_ranges
from tilewright.studio.ui.canvas import style
from tilewright.studio.ui.canvas import tag_inset as inset
from tilewright.studio.ui.canvas.grid_item import GridItem
from tilewright.studio.ui.canvas.label import PixelLabel
from tilewright.studio.ui.canvas.overlay import CellColours
from tilewright.studio.ui.canvas.tag_places import CLEARANCE, leader_end, nearest_free, rect_array

STEP = style.CELL + style.GAP
PAD = 3.0
TAG_FILL = QColor(255, 255, 255, 235)
INSET_FILL = QColor(250, 250, 250, 235)
INSET_RIM = QColor(120, 130, 140)
EVERYWHERE = QRectF(-1e9, -1e9, 2e9, 2e9)
MAX_TAGS = 400
DOT = 2.5  # px: radius of the dot a leader line starts from (a stage's centre)
MAX_LEADERS = 48  # tags placed off their cells, at most (each a search of the view)
NUDGES = (0.0, -1.0, 1.0)  # tag heights a tag may move off its stage's centre to clear a caption
EDGE_PX = 1.0  # half the thickness of a frame edge as tags keep off it


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
        self._insets_placed: list[tuple[QRectF, QPointF, QPointF]] = []  # (block outline, callout start, end)
        self.insets: list[QRectF] = []  # the blocks' outlines painted last time, in viewport pixels (tests)
        self.lines = LeaderLines(self)  # the scene adds it beside this item
        self.short = False  # last paint wrote the stages' numbers (the legend spells them out), not their layers
        self._dots = np.zeros((0, 4))
        self._dot_stage = np.zeros(0, dtype=int)

    def update(self, *args) -> None:  # type: ignore[override]
        super().update(*args)
        self.lines.update()

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

    def placement(
        self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None
    ) -> list[tuple[QRectF, str, int, QPointF | None]]:
        """The tags as placed for this paint (cached while nothing they depend on moved): the tags and
        their leader lines (``LeaderLines``, painted first, beneath the components) share it."""
        if not self.tags:
            return []
        transform = painter.worldTransform()
        view = QRectF(widget.rect()) if widget is not None else QRectF(painter.viewport())
        detail = style.CELL * option.levelOfDetailFromTransform(transform) >= style.DETAIL_CELL_PX
        return self._place(transform, QFontMetricsF(style.label_font(True, -1.0)), view, detail)

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None) -> None:
        self.drawn = 0
        self.boxes = []
        self.box_stages = []
        self.leaders = []
        self.insets = []
        if not self.tags:
            return
        placed = self.placement(painter, option, widget)
        painter.save()
        painter.resetTransform()
        painter.setFont(style.label_font(True, -1.0))
        for outline, _start, _end in self._insets_placed:  # a block's backdrop: the tags in it read as one
            self.insets.append(QRectF(outline))
            painter.setPen(style.cosmetic_pen(INSET_RIM, 1.0))
            painter.setBrush(INSET_FILL)
            painter.drawRoundedRect(outline, 4, 4)
        for box, _text, stage, centre in placed:  # the line is beneath (``LeaderLines``); its dot marks the stage
            if centre is not None:
                self.leaders.append((stage, QPointF(centre), leader_end(box, centre)))
                ink = style.stage_color(stage).darker(150)
                painter.setPen(style.cosmetic_pen(ink, 1.0))
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

        First every tag with its layers ("L12–23") on its stage's cells (nudged up or down), where it covers
        no caption, no tag, no link bar, no frame edge and no other stage's centre. If some stage in view is
        left without one, the tags of the level are all written short instead — the stage's number, which
        the legend spells out ("5  L21–24") — on their cells where they fit, and each stage still without a
        place gets the nearest free spot of the view with a leader line. Long tags on leaders were what
        crowded a small canvas: twenty of them round the PaLM wafer crossed one another, the die caption and
        the wafer's frame; a number is a fifth of their width. Later tags keep off earlier leaders, and a
        leader crosses no caption, tag or earlier leader when any place allows it."""
        captions = self._captions(transform) + self._covered()
        walls = self._bars(transform) + self._frame_edges(transform)
        grids = self._grid_rects(transform)
        # Repaints (hover, selection, the time cursor) mostly change nothing a tag depends on: reuse.
        key = (detail, _numbers(view), tuple(_numbers(r) for r in captions + walls + grids), tuple(
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
            todo.append((item, transform.map(item.mapToScene(local)), text, stage))
        in_view = {stage for _i, centre, _t, stage in todo if view.contains(centre)}
        placed, long_named = self._on_cells(todo, transform, fm, captions + walls, short=False)
        insets: list[tuple[QRectF, QPointF, QPointF]] = []
        if in_view <= long_named:
            self.short = False
        else:
            self.short = True
            placed, short_named = self._on_cells(todo, transform, fm, captions + walls, short=True)
            if not in_view <= short_named:
                placed, insets = self._insets(todo, placed, short_named, fm, view, transform, captions, walls, grids)
                short_named = {stage for _b, _t, stage, _c in placed}
            placed += self._with_leaders(todo, placed, short_named, fm, view, transform, captions, walls, grids)
        named |= {stage for _b, _t, stage, _c in placed}
        self.named = sorted(named)
        self._placed_key, self._placed, self._insets_placed = key, placed, insets
        return placed

    def _insets(
        self, todo: list, placed: list, named: set[int], fm: QFontMetricsF, view: QRectF, transform: QTransform,
        captions: list[QRectF], walls: list[QRectF], grids: list[QRectF],
    ) -> tuple[list[tuple[QRectF, str, int, QPointF | None]], list[tuple[QRectF, QPointF, QPointF]]]:
        """Each component with a stage in view still unnamed gets its stages as an inset (``tag_inset``): a
        block of short tags in the cells' arrangement, in the nearest free spot, with one callout line.
        Its on-cell tags go (the block names them all); a component whose block finds no place keeps them,
        and its stages still unnamed get leaders (``_with_leaders``)."""
        by_item: dict[GridItem, list[tuple[QPointF, int]]] = {}
        for item, centre, _text, stage in todo:
            by_item.setdefault(item, []).append((centre, stage))
        boxes = list(placed)
        insets: list[tuple[QRectF, QPointF, QPointF]] = []
        lines: list[tuple[QPointF, QPointF]] = []
        h = fm.height() + PAD
        for item, entries in by_item.items():
            waiting = [s for c, s in entries if s not in named and view.contains(c)]
            if not waiting or len(entries) > inset.MAX_STAGES:
                continue
            stages = {s for _c, s in entries}
            w = max(max(fm.horizontalAdvance(str(s)) + 2 * PAD, h) for s in stages)
            shape = inset.block_offsets([c for c, _s in entries], w, h)
            if shape is None:
                continue
            corners, size = shape
            others = [b for b, _t, s, _c in boxes if s not in stages]  # this component's own tags are replaced
            fixed = rect_array(captions + others + [r for r, _a, _b in insets])
            blocked = np.vstack([fixed, rect_array(walls)])
            cells = transform.mapRect(item.scene_grid_rect())
            found = nearest_free(cells.center(), (size.width(), size.height()), view, blocked, grids,
                                 uncrossed=fixed, lines=lines)
            if found is None:
                continue
            boxes = [b for b in boxes if b[2] not in stages]
            for corner, (_c, stage) in zip(corners, entries, strict=True):
                boxes.append((QRectF(found.left() + corner.x(), found.top() + corner.y(), w, h), str(stage), stage,
                              None))
            start, end = inset.callout(cells, found)
            insets.append((found, start, end))
            lines.append((start, end))
        return boxes, insets

    def _box(self, fm: QFontMetricsF, centre: QPointF, text: str) -> QRectF:
        h = fm.height() + PAD
        w = max(fm.horizontalAdvance(text) + 2 * PAD, h)  # a lone digit's tag is square, not a sliver
        return QRectF(centre.x() - w / 2, centre.y() - h / 2, w, h)

    def _on_cells(
        self, todo: list, transform: QTransform, fm: QFontMetricsF, blocked: list[QRectF], short: bool
    ) -> tuple[list[tuple[QRectF, str, int, QPointF | None]], set[int]]:
        """Tags placed on their own stage's cells (long: the layers; short: the stage's number)."""
        centres = np.array([(c.x(), c.y()) for _i, c, _t, _s in todo]).reshape(-1, 2)
        self._dots = np.hstack([centres - DOT, centres + DOT])  # a tag covers no other stage's centre
        self._dot_stage = np.array([s for _i, _c, _t, s in todo], dtype=int)
        placed: list[tuple[QRectF, str, int, QPointF | None]] = []
        taken: list[QRectF] = []
        for item, centre, text, stage in todo:
            shown = str(stage) if short else text
            box = self._box(fm, centre, shown)
            others = self._dots[self._dot_stage != stage]
            found = self._free_box(box, transform.mapRect(item.scene_grid_rect()), blocked, taken, others)
            if found is not None:
                taken.append(found)
                placed.append((found, shown, stage, None))
        return placed, {stage for _b, _t, stage, _c in placed}

    def _with_leaders(
        self, todo: list, placed: list, named: set[int], fm: QFontMetricsF, view: QRectF, transform: QTransform,
        captions: list[QRectF], walls: list[QRectF], grids: list[QRectF],
    ) -> list[tuple[QRectF, str, int, QPointF | None]]:
        """Short tags in the nearest free spots of the view for the stages in view still without one."""
        waiting: dict[int, QPointF] = {}
        middle: dict[int, QPointF] = {}  # the middle of the grid each waiting stage is on
        for item, centre, _text, stage in todo:
            if stage not in named and view.contains(centre):
                waiting.setdefault(stage, centre)
                middle.setdefault(stage, transform.mapRect(item.scene_grid_rect()).center())
        taken = [box for box, _t, _s, _c in placed]
        lines: list[tuple[QPointF, QPointF]] = []
        out: list[tuple[QRectF, str, int, QPointF | None]] = []
        for stage, centre in sorted(waiting.items())[:MAX_LEADERS]:
            # past MAX_LEADERS, lines from everywhere to everywhere: the legend names the rest
            box = self._box(fm, centre, str(stage))
            fixed = rect_array(captions + taken)  # leaders may pass other stages' dots and bars, not text or tags
            blocked = np.vstack([fixed, rect_array(walls), self._dots[self._dot_stage != stage]])
            found = nearest_free(centre, (box.width(), box.height()), view, blocked, grids, uncrossed=fixed,
                                 lines=lines, outward=centre - middle[stage])
            if found is not None:
                taken.append(found)
                lines.append((QPointF(centre), leader_end(found, centre)))
                out.append((found, str(stage), stage, centre))
        return out

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

    def _bars(self, transform: QTransform) -> list[QRectF]:
        """The level's link bar (a fat-tree's, a switch's) on screen: a tag on it hid the bar and its spokes."""
        links = getattr(self.scene(), "links", None)
        bar = getattr(links, "bar", None)
        if bar is None or bar.isNull():
            return []
        return [transform.mapRect(links.mapRectToScene(bar))]

    def _frame_edges(self, transform: QTransform) -> list[QRectF]:
        """The four edges of the level's frame, as thin rects: a tag is inside the frame or outside it, never
        struck through by its border (GPT-3's "L5–8" sat across the system's edge)."""
        frame = getattr(self.scene(), "frame", None)
        if frame is None or frame.rect.isNull():
            return []
        r = transform.mapRect(frame.mapRectToScene(frame.rect))
        t = EDGE_PX
        return [QRectF(r.left() - t, r.top() - t, r.width() + 2 * t, 2 * t),
                QRectF(r.left() - t, r.bottom() - t, r.width() + 2 * t, 2 * t),
                QRectF(r.left() - t, r.top() - t, 2 * t, r.height() + 2 * t),
                QRectF(r.right() - t, r.top() - t, 2 * t, r.height() + 2 * t)]

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


class LeaderLines(QGraphicsItem):
    """The leader lines of the stage tags, beneath the components and their captions (above the link bar,
    below the grids): a line that cannot avoid a caption (the bottom row of a crowded wafer, whose die
    caption sits right under it) passes under its backdrop, so the text stays readable, and runs under
    the cells from its stage's dot, which the tags' item draws on top."""

    def __init__(self, tags: StageTags) -> None:
        super().__init__()
        self.tags = tags
        self.setZValue(-0.5)
        self.setAcceptedMouseButtons(Qt.MouseButton.NoButton)

    def boundingRect(self) -> QRectF:
        return EVERYWHERE

    def shape(self) -> QPainterPath:
        return QPainterPath()

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None) -> None:
        placed = self.tags.placement(painter, option, widget)
        painter.save()
        painter.resetTransform()
        for _outline, start, end in self.tags._insets_placed:
            painter.setPen(style.cosmetic_pen(INSET_RIM, 1.5))
            painter.drawLine(start, end)
        for box, _text, stage, centre in placed:
            if centre is not None:
                painter.setPen(style.cosmetic_pen(style.stage_color(stage).darker(150), 1.5))
                painter.drawLine(centre, leader_end(box, centre))
        painter.restore()
