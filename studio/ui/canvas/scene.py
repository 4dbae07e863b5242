"""The scene of one hierarchy level: the viewed component's frame, a grid item per child, its links.

It follows the document (rebuilds on structural change, repositions on canvas change) and the shared
``Selection``; user gestures become undo commands — a drag is one ``MoveOnCanvas`` pushed on release,
never a model edit per mouse move.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QKeyEvent, QTransform
from PySide6.QtWidgets import QGraphicsScene, QGraphicsSceneMouseEvent
from tilewright.engine.ir.hardware import Component
from tilewright.engine.ir.project import Project
from tilewright.studio.commands import MoveOnCanvas
from tilewright.studio.document import ProjectDocument
from tilewright.studio.mapping import display_hardware
from tilewright.studio.model.level_cells import instance_name, level_instance
from tilewright.studio.ui.canvas import style
from tilewright.studio.ui.canvas.frame import COMPACT_PADDING_PX, PADDING_PX, FrameItem
from tilewright.studio.ui.canvas.grid_item import GridItem
from tilewright.studio.ui.canvas.layout import auto_positions, display_shape
from tilewright.studio.ui.canvas.links import LinksItem
from tilewright.studio.ui.canvas.stage_tags import StageTags
from tilewright.studio.ui.selection import Selection


class LevelScene(QGraphicsScene):
    rebuilt = Signal(bool)  # True when the level itself changed (the view then zooms to fit)
    message = Signal(str)

    def __init__(self, doc: ProjectDocument, selection: Selection):
        super().__init__()
        self.doc = doc
        self.selection = selection
        self.grids: dict[str, GridItem] = {}
        self.links: LinksItem | None = None
        self.frame: FrameItem | None = None
        self.tags: StageTags | None = None
        self._syncing = False
        self._pressed_at: dict[str, QPointF] = {}
        self._shown_level = ""
        self.view_scale = 1.0  # pixels per scene unit, told by the view: captions are sized in pixels
        self.caption_width: float | None = None  # pixels a caption may take, told by the view (it elides past)
        self.caption_lines: int | None = None  # lines a component's caption may draw, told by the view
        self.instance_choice: dict[str, int] = {}  # level path → which of its instances is shown inside
        self.snap_to_grid = True
        self.link_mode = False  # plain drags draw links (Shift-drag always does)
        self.overlay: Any = None  # the OverlayController colouring this scene (set by the canvas widget)
        self.gesture: object | None = None  # a gesture in progress (link drawing) gets the mouse first
        # Viewport rects hidden by widgets floating on the view (the legend), told by the canvas widget:
        # layer tags keep clear of them.
        self.covered: Callable[[], list[QRectF]] = lambda: []
        self._display: tuple[Project, Component] | None = None
        self.setBackgroundBrush(style.BACKGROUND)
        # A level holds a handful of items (a grid per child, not a cell per instance): a BSP index buys
        # nothing, and items sized in pixels (captions, layer tags) would only confuse it.
        self.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.NoIndex)
        doc.projectReplaced.connect(self.rebuild)
        doc.structureChanged.connect(self.rebuild)
        doc.componentChanged.connect(self._on_component_changed)
        doc.canvasChanged.connect(self.reposition)
        selection.levelChanged.connect(self.rebuild)
        selection.changed.connect(self._apply_selection)
        self.selectionChanged.connect(self._on_scene_selection)
        self.rebuild()

    # -- building -----------------------------------------------------------------------------------
    @property
    def hardware(self) -> Component:
        """What is drawn: the model's hardware, a growable cluster grown to the devices the run uses."""
        project = self.doc.project
        if self._display is None or self._display[0] is not project:
            self._display = (project, display_hardware(project))
        return self._display[1]

    @property
    def level(self) -> Component:
        found = self.hardware.find(self.selection.level)
        return found if found is not None else self.hardware

    @property
    def level_node(self) -> str:
        """Node id of the instance whose inside is shown (``palm-wafer/die[2,1]``)."""
        return level_instance(self.hardware, self.selection.level, self.instance_choice)

    def rebuild(self) -> None:
        self._syncing = True
        self.clear()
        self.grids, self.links, self.frame, self.tags = {}, None, None, None
        level, level_path = self.level, self.selection.level
        topology = level.interconnect.topology if level.interconnect else None
        children = {c.name: c for c in level.children}
        for place in auto_positions(level, level_path, self.doc.project.canvas.positions):
            child = children[place.path.rpartition("/")[2]]
            item = GridItem(place.path, child, topology, display_shape(level, child))
            item.setPos(place.x, place.y)
            self.addItem(item)
            self.grids[place.path] = item
        self.links = LinksItem(level.interconnect)
        self.addItem(self.links)
        self.frame = FrameItem(level, self.level_node.rpartition("/")[2] if "/" in level_path else None)
        self.addItem(self.frame)
        self.tags = StageTags()
        self.addItem(self.tags)
        self.addItem(self.tags.lines)
        self._limit_captions()
        self._refresh_geometry()
        self._syncing = False
        for item in self.grids.values():
            item.on_moved = self._on_item_moved
        self._apply_selection(self.selection.paths)
        changed = level_path != self._shown_level
        self._shown_level = level_path
        self.rebuilt.emit(changed)

    def refresh_geometry(self) -> None:
        """Refit the frame around the children and their captions (a caption's lines changed)."""
        self._refresh_geometry()

    def _refresh_geometry(self) -> None:
        grids = list(self.grids.values())
        if self.links is not None:
            self.links.refresh(grids)
        content = QRectF()
        for g in grids:
            content = content.united(g.scene_grid_rect())
            size = g.label.boundingRect().size() / self.view_scale
            content = content.united(QRectF(g.label.scenePos(), size))
        if self.links is not None and not self.links.bar.isNull():
            content = content.united(self.links.bar)
        if content.isNull():
            content = QRectF(0, 0, style.CELL, style.CELL)
        if self.frame is not None:
            self.frame.fit_around(content, self.view_scale)
        rect = self.content_rect()
        margin = 3 * max(rect.width(), rect.height()) + 2000
        self.setSceneRect(rect.adjusted(-margin, -margin, margin, margin))

    def set_caption_width(self, pixels: float | None) -> None:
        """Captions wider than ``pixels`` (the canvas's room) end in "…", so the level always fits the view."""
        if pixels != self.caption_width:
            self.caption_width = pixels
            self._limit_captions()
            self._refresh_geometry()

    def set_caption_lines(self, lines: int | None) -> None:
        """Components' captions and the level's title draw at most ``lines`` lines (None: all), and the frame
        pads them less: a short canvas's height goes to the cells (``CanvasView.zoom_to_fit``)."""
        if lines != self.caption_lines:
            self.caption_lines = lines
            self._limit_captions()
            self._refresh_geometry()

    def _limit_captions(self) -> None:
        for item in self.grids.values():
            item.label.set_max_width(self.caption_width)
            item.label.set_max_lines(self.caption_lines)
        if self.frame is not None:
            self.frame.title.set_max_width(self.caption_width)
            self.frame.title.set_max_lines(self.caption_lines)
            self.frame.padding_px = PADDING_PX if self.caption_lines is None else COMPACT_PADDING_PX

    def set_view_scale(self, scale: float) -> None:
        """The view zoomed: refit the frame around captions whose scene size just changed."""
        if scale > 0 and abs(scale / self.view_scale - 1.0) > 0.01:
            self.view_scale = scale
            self._refresh_geometry()

    def content_rect(self) -> QRectF:
        """What zoom-to-fit shows: the frame and its edge ports (text is sized in pixels, handled by the view)."""
        if self.frame is None:
            return QRectF()
        return self.frame.mapRectToScene(self.frame.boundingRect())

    def reposition(self) -> None:
        """Saved positions changed (a move, or its undo): move the items, keep everything else."""
        placements = auto_positions(self.level, self.selection.level, self.doc.project.canvas.positions)
        for place in placements:
            item = self.grids.get(place.path)
            if item is not None and (item.x(), item.y()) != (place.x, place.y):
                item.setPos(place.x, place.y)
        self._refresh_geometry()

    def _on_component_changed(self, path: str) -> None:
        level = self.selection.level
        if path == level or path.startswith(level + "/") or level.startswith(path + "/"):
            self.rebuild()

    def _on_item_moved(self, _item: GridItem) -> None:
        self._refresh_geometry()

    # -- selection ----------------------------------------------------------------------------------
    def _apply_selection(self, paths: list[str]) -> None:
        self._syncing = True
        try:
            for path, item in self.grids.items():
                item.setSelected(path in paths)
        finally:
            self._syncing = False

    def _on_scene_selection(self) -> None:
        if self._syncing:
            return
        self.selection.select([g.path for g in self.grids.values() if g.isSelected()])

    def select_all(self) -> None:
        self.selection.select(list(self.grids))

    def grid_at(self, scene_pos: QPointF) -> GridItem | None:
        for item in self.items(scene_pos):
            while item is not None and not isinstance(item, GridItem):
                item = item.parentItem()
            if isinstance(item, GridItem):
                return item
        return None

    def snapped(self, pos: QPointF) -> QPointF:
        """``pos`` on the snap grid (a quarter of a cell step), when snapping is on."""
        if not self.snap_to_grid:
            return pos
        return QPointF(round(pos.x() / style.SNAP) * style.SNAP, round(pos.y() / style.SNAP) * style.SNAP)

    # -- gestures -----------------------------------------------------------------------------------
    def mousePressEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        from tilewright.studio.ui.canvas.link_gesture import LinkGesture

        if LinkGesture.starts(self, event):
            self.gesture = LinkGesture(self, event.scenePos())
            event.accept()
            return
        self._pressed_at = {p: g.pos() for p, g in self.grids.items()}
        if event.button() == Qt.MouseButton.LeftButton and not self.doc.read_only:
            for g in self.grids.values():
                g.snap = self.snapped
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        if self.gesture is not None:
            self.gesture.move(event.scenePos())  # type: ignore[attr-defined]
            event.accept()
            return
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        if self.gesture is not None:
            gesture, self.gesture = self.gesture, None
            gesture.finish(event.scenePos())  # type: ignore[attr-defined]
            event.accept()
            return
        super().mouseReleaseEvent(event)
        for g in self.grids.values():
            g.snap = None
        moves = {
            p: (g.x(), g.y()) for p, g in self.grids.items() if p in self._pressed_at and g.pos() != self._pressed_at[p]
        }
        self._pressed_at = {}
        if moves and not self.doc.read_only:
            self.doc.push(MoveOnCanvas(self.doc, moves))
        elif moves:
            self.reposition()

    def mouseDoubleClickEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        item = self.itemAt(event.scenePos(), QTransform())
        while item is not None and not isinstance(item, GridItem):
            item = item.parentItem()
        if isinstance(item, GridItem):
            # Deferred: rebuilding deletes the item under the mouse, which Qt still uses in this event.
            path, cell = item.path, item.cell_at(event.scenePos())
            QTimer.singleShot(0, lambda: self.drill_into(path, cell))
            event.accept()
            return
        super().mouseDoubleClickEvent(event)

    def drill_into(self, path: str, instance: int | None = None) -> bool:
        """Show the inside of ``path``; ``instance`` picks which of its instances (the one clicked)."""
        comp = self.hardware.find(path)
        if comp is None:
            return False
        if not comp.children:
            name = instance_name(comp, instance) if instance is not None else comp.name
            self.message.emit(f"{name} is a device: it has nothing inside to open")
            return False
        if instance is not None:
            self.instance_choice[path] = instance
        self.selection.set_level(path)
        self.selection.select([])
        return True

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Backspace:
            parent = self.selection.level.rpartition("/")[0]
            if parent:
                self.selection.set_level(parent)
                return
        super().keyPressEvent(event)
