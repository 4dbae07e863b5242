"""The path of the viewed level above the canvas ("cluster › node › gpu"); a click goes back up."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QWidget
from tilewright.studio.document import ProjectDocument
from tilewright.studio.icons import kind_icon
from tilewright.studio.ui.selection import Selection


class Breadcrumb(QWidget):
    def __init__(self, doc: ProjectDocument, selection: Selection, parent: QWidget | None = None):
        super().__init__(parent)
        self.doc = doc
        self.selection = selection
        self.buttons: list[QToolButton] = []
        self._layout = QHBoxLayout(self)
        self._layout.setContentsMargins(6, 3, 6, 3)
        self._layout.setSpacing(2)
        self.hint = QLabel("double-click a component to open it · Backspace goes up")
        self.hint.setStyleSheet("color: #7f8c8d;")
        selection.levelChanged.connect(self.refresh)
        doc.structureChanged.connect(self.refresh)
        doc.projectReplaced.connect(self.refresh)
        self.refresh()

    def segments(self) -> list[str]:
        return [b.text() for b in self.buttons]

    def refresh(self) -> None:
        while self._layout.count():
            item = self._layout.takeAt(0)
            widget = item.widget()
            if widget is not None and widget is not self.hint:
                widget.hide()  # at once: deleteLater waits for the event loop, and a grab may come first
                widget.deleteLater()
        self.buttons = []
        names = self.selection.level.split("/")
        hardware = self.doc.project.hardware
        for depth, name in enumerate(names):
            path = "/".join(names[: depth + 1])
            comp = hardware.find(path)
            button = QToolButton(self)
            button.setText(name)
            button.setAutoRaise(True)
            button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
            if comp is not None:
                button.setIcon(kind_icon(comp.kind.value))
                button.setToolTip(f"{comp.kind.value}, {comp.rows} × {comp.cols}")
            last = depth == len(names) - 1
            if last:
                font = button.font()
                font.setBold(True)
                button.setFont(font)
            button.clicked.connect(lambda _=False, p=path: self.selection.set_level(p))
            self._layout.addWidget(button)
            self.buttons.append(button)
            if not last:
                sep = QLabel("›")
                sep.setStyleSheet("color: #7f8c8d;")
                self._layout.addWidget(sep)
        self._layout.addStretch(1)
        self._layout.addWidget(self.hint)

    def go_up(self) -> None:
        parent = self.selection.level.rpartition("/")[0]
        if parent:
            self.selection.set_level(parent)
