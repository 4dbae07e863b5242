"""The canvas viewport: wheel zoom about the cursor, middle-button pan, rubber-band selection and a
zoom-to-fit that leaves room in *pixels* for the captions (which do not scale with the zoom)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import (
    QDragEnterEvent,
    QDragMoveEvent,
    QDropEvent,
    QMouseEvent,
    QPainter,
    QResizeEvent,
    QTransform,
    QWheelEvent,
)
from PySide6.QtWidgets import QGraphicsView, QWidget
from tilewright.studio.ui.canvas import drops
from tilewright.studio.ui.canvas.frame import PADDING_PX
from tilewright.studio.ui.canvas.scene import LevelScene

MIN_SCALE = 1e-3
MAX_SCALE = 40.0
MAX_FIT_SCALE = 2.5  # a one-chip level should not be blown up to fill a 4K screen
FIT_MARGINS = (24, 14, 24, 14)  # left, top, right, bottom pixels, added to the frame title's height
CAPTION_INSET = 2 * PADDING_PX + 8  # a caption inside the frame is this much narrower than the room
SHORT_VIEW_PX = 300  # a canvas lower than this (1280 × 720 with results open) may trim captions to one line
CELL_FOR_TAG_PX = 22.0  # a cell narrower than this cannot hold a stage's number ("19") on its own


class CanvasView(QGraphicsView):
    def __init__(self, scene: LevelScene, parent: QWidget | None = None):
        super().__init__(scene, parent)
        self.level_scene = scene
        self.setRenderHints(QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing)
        self.setDragMode(QGraphicsView.DragMode.RubberBandDrag)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setResizeAnchor(QGraphicsView.ViewportAnchor.AnchorViewCenter)
        self.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.SmartViewportUpdate)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFrameShape(QGraphicsView.Shape.NoFrame)
        self._pan_from: QPoint | None = None
        self.auto_fit = True  # until the user zooms or pans, resizing keeps the level fitted
        self.setAcceptDrops(True)
        self.fit_reserve: Callable[[], tuple[int, int]] = lambda: (0, 0)  # (right, top) pixels kept free (the legend)
        scene.rebuilt.connect(self._on_rebuilt)

    @property
    def zoom(self) -> float:
        return self.transform().m11()

    def zoom_to_fit(self) -> None:
        """Fit the level. In a short canvas whose cells come out smaller than a stage's number, the
        components' captions keep their first line only (the rest is in their tooltip and the inspector):
        at 1280 × 720 a wafer's caption lines left its 5 × 4 dies ~45 px high, too small for their numbers,
        which then scattered round the card on leader lines."""
        self.level_scene.set_caption_lines(None)
        self._fit()
        if self.viewport().height() < SHORT_VIEW_PX and self._smallest_cell_px() < CELL_FOR_TAG_PX:
            self.level_scene.set_caption_lines(1)
            self._fit()

    def _smallest_cell_px(self) -> float:
        """The level's smallest cell pitch on screen (a component's grid cell), in pixels."""
        grids = list(self.level_scene.grids.values())
        if not grids:
            return float("inf")
        return min(min(g.scene_grid_rect().width() / max(g.grid_shape.cols, 1),
                       g.scene_grid_rect().height() / max(g.grid_shape.rows, 1)) for g in grids) * self.zoom

    def _fit(self) -> None:
        # Captions are sized in pixels: one wider than the room would keep the level from fitting at any zoom.
        left, _top, right, _bottom = FIT_MARGINS
        room = max(self.viewport().width(), 50) - left - right - self.fit_reserve()[0]
        self.level_scene.set_caption_width(max(room - CAPTION_INSET, 80.0))
        # The frame's size depends on the zoom (it pads pixel-sized captions), so settle in a few rounds.
        for _ in range(4):
            rect = self.level_scene.content_rect()
            if rect.isEmpty():
                return
            left, top, right, bottom = FIT_MARGINS
            reserve_right, reserve_top = self.fit_reserve()
            right, top = right + reserve_right, top + reserve_top
            if self.level_scene.frame is not None:
                top += self.level_scene.frame.title.boundingRect().height()
            vw, vh = max(self.viewport().width(), 50), max(self.viewport().height(), 50)
            s = min((vw - left - right) / rect.width(), (vh - top - bottom) / rect.height(), MAX_FIT_SCALE)
            s = max(s, MIN_SCALE)
            self.setTransform(QTransform.fromScale(s, s))
            # A frame title wider than the frame hangs out to the right: centre frame and title together
            # (so the title stays clear of the legend on the right), or start at the left margin if they
            # are wider than the room.
            frame_w = rect.width() * s
            block_w = max(frame_w, self._title_width())
            frame_cx = left + max(0.0, (vw - left - right - block_w) / 2) + frame_w / 2
            frame_cy = top + (vh - top - bottom) / 2
            self.centerOn(rect.center() + QPointF((vw / 2 - frame_cx) / s, (vh / 2 - frame_cy) / s))
            settled = abs(s / self.level_scene.view_scale - 1.0) <= 0.01
            self.level_scene.set_view_scale(s)
            if settled:
                break
        self.auto_fit = True

    def _title_width(self) -> float:
        frame = self.level_scene.frame
        return frame.title.boundingRect().width() if frame is not None else 0.0

    def zoom_by(self, factor: float) -> None:
        target = min(MAX_SCALE, max(MIN_SCALE, self.zoom * factor))
        factor = target / self.zoom
        if factor != 1.0:
            self.scale(factor, factor)
            self.level_scene.set_view_scale(self.zoom)
        self.auto_fit = False

    def _on_rebuilt(self, level_changed: bool) -> None:
        if level_changed or self.auto_fit:
            self.zoom_to_fit()

    # -- events -------------------------------------------------------------------------------------
    def wheelEvent(self, event: QWheelEvent) -> None:
        delta = event.angleDelta().y() or event.pixelDelta().y()
        if delta:
            self.zoom_by(1.0015**delta)
        event.accept()

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.MiddleButton:
            self._pan_from = event.position().toPoint()
            self.viewport().setCursor(Qt.CursorShape.ClosedHandCursor)
            event.accept()
            return
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        if self._pan_from is not None:
            pos = event.position().toPoint()
            delta = pos - self._pan_from
            self._pan_from = pos
            self.pan_by(delta.x(), delta.y())
            event.accept()
            return
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.MiddleButton and self._pan_from is not None:
            self._pan_from = None
            self.viewport().unsetCursor()
            event.accept()
            return
        super().mouseReleaseEvent(event)

    # Drops (library templates, layer ranges) are handled here rather than by items: what a drop does
    # depends on the whole level (selection, placement), not on the one item under the cursor.
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if drops.accepts(event.mimeData()) and not self.level_scene.doc.read_only:
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:
        self.dragEnterEvent(event)  # type: ignore[arg-type]

    def dropEvent(self, event: QDropEvent) -> None:
        pos = self.mapToScene(event.position().toPoint())
        if drops.accepts(event.mimeData()) and drops.drop(self.level_scene, event.mimeData(), pos):
            event.acceptProposedAction()
        else:
            event.ignore()

    def pan_by(self, dx: int, dy: int) -> None:
        """Move the content by (dx, dy) pixels, as a hand drag would."""
        self.horizontalScrollBar().setValue(self.horizontalScrollBar().value() - dx)
        self.verticalScrollBar().setValue(self.verticalScrollBar().value() - dy)
        self.auto_fit = False

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self.auto_fit:
            self.zoom_to_fit()
