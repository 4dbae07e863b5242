"""The canvas as the main window sees it: breadcrumb bar and demo bar over the view of one level, the
colour legend floating on the view.

The overlay controller colours the level (pipeline stages, or the heat of the last run) and the demo
bar animates it; both are reached through this widget (``show_result``, ``set_time_cursor``), so the
main window never wires canvas internals.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QRectF
from PySide6.QtWidgets import QVBoxLayout, QWidget
from tilewright.engine.results.result import Result
from tilewright.studio.document import ProjectDocument
from tilewright.studio.model.link_carriage import LinkCarriage
from tilewright.studio.ui.canvas.breadcrumb import Breadcrumb
from tilewright.studio.ui.canvas.legend import Legend
from tilewright.studio.ui.canvas.overlay_controller import OverlayController
from tilewright.studio.ui.canvas.scene import LevelScene
from tilewright.studio.ui.canvas.view import CanvasView
from tilewright.studio.ui.demo import DemoBar
from tilewright.studio.ui.results.time_cursor import TimeCursor
from tilewright.studio.ui.selection import Selection


class CanvasWidget(QWidget):
    def __init__(self, doc: ProjectDocument, selection: Selection, parent: QWidget | None = None):
        super().__init__(parent)
        self.scene = LevelScene(doc, selection)
        self.view = CanvasView(self.scene, self)
        self.overlay = OverlayController(self.scene)
        self.scene.overlay = self.overlay
        self.breadcrumb = Breadcrumb(doc, selection, self)
        self.demo = DemoBar(self.overlay, self)
        self.demo.opChosen.connect(self._caption_changed)
        self.legend = Legend(self.overlay, self.view)
        self.view.installEventFilter(self)
        self.view.fit_reserve = self._legend_room
        self.scene.covered = self._legend_rects
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.breadcrumb)
        layout.addWidget(self.demo)
        layout.addWidget(self.view, 1)

    def _legend_room(self) -> tuple[int, int]:
        """Pixels (right, top) zoom-to-fit keeps free for the legend: it never covers the level."""
        return self.legend.room()

    def _legend_rects(self) -> list[QRectF]:
        """The legend's rect in viewport pixels (empty when hidden): layer tags keep out from under it."""
        if self.legend.isHidden() or not self.legend.text():
            return []
        return [QRectF(self.legend.geometry().translated(-self.view.viewport().pos()))]

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.view and event.type() == QEvent.Type.Resize:
            self.legend.refresh()  # the key shrinks or grows with the view, before the view refits
        return super().eventFilter(watched, event)

    def zoom_to_fit(self) -> None:
        self.view.zoom_to_fit()

    def _caption_changed(self, _use: object) -> None:
        """Choosing an op adds lines to its device's caption: the frame grows around them (and, unless
        the user zoomed, the level is fitted again), so the caption never spills out of the frame."""
        self.scene.refresh_geometry()  # first: zoom-to-fit reads the frame as it stands
        if self.view.auto_fit:
            self.view.zoom_to_fit()

    def show_result(self, result: Result | None, carriage: LinkCarriage | None = None) -> None:
        """A run finished (``carriage``: what its links carried, prepared by the worker), or None."""
        self.demo.show_result(result, carriage)

    def set_time_cursor(self, cursor: TimeCursor) -> None:
        self.demo.set_time_cursor(cursor)

    def set_snap(self, on: bool) -> None:
        self.scene.snap_to_grid = on

    def set_link_mode(self, on: bool) -> None:
        """Plain drags draw links instead of moving components (Shift-drag always draws)."""
        self.scene.link_mode = on

    def set_presentation(self, on: bool) -> None:
        """Presenting: no editing hints, the demo controls up front (fonts grow with the application's)."""
        self.breadcrumb.hint.setVisible(not on)
        self.demo.set_presentation(on)
