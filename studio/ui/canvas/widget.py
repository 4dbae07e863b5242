"""The canvas as the main window sees it: breadcrumb bar over the view of one level.

Later overlays (heat map of a run, mapping drag-and-drop) attach to ``scene`` and ``view`` here.
"""

from __future__ import annotations

from PySide6.QtWidgets import QVBoxLayout, QWidget

from studio.document import ProjectDocument
from studio.ui.canvas.breadcrumb import Breadcrumb
from studio.ui.canvas.scene import LevelScene
from studio.ui.canvas.view import CanvasView
from studio.ui.selection import Selection


class CanvasWidget(QWidget):
    def __init__(self, doc: ProjectDocument, selection: Selection, parent: QWidget | None = None):
        super().__init__(parent)
        self.scene = LevelScene(doc, selection)
        self.view = CanvasView(self.scene, self)
        self.breadcrumb = Breadcrumb(doc, selection, self)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.breadcrumb)
        layout.addWidget(self.view, 1)

    def zoom_to_fit(self) -> None:
        self.view.zoom_to_fit()
