"""The component library: templates to add to the level shown on the canvas.

A double-click adds the template (components under the viewed level; memories onto the selected
component) through an undo command. Drag-and-drop onto the canvas can reuse ``add_template`` later.
"""

from __future__ import annotations

from PySide6.QtCore import QMimeData, QSize, Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QListView, QListWidget, QListWidgetItem, QWidget
from tilewright.studio.commands import AddChild, AddMemory
from tilewright.studio.document import ProjectDocument
from tilewright.studio.icons import icon, kind_icon
from tilewright.studio.templates import TEMPLATES, build_component, hbm_memory, template
from tilewright.studio.tree_edit import EditRefused
from tilewright.studio.ui.selection import Selection

KEY_ROLE = Qt.ItemDataRole.UserRole


class Library(QListWidget):
    message = Signal(str)

    def __init__(self, doc: ProjectDocument, selection: Selection, parent: QWidget | None = None):
        super().__init__(parent)
        self.doc = doc
        self.selection = selection
        self.setViewMode(QListView.ViewMode.ListMode)
        self.setIconSize(QSize(24, 24))
        self.setSpacing(1)
        for t in TEMPLATES:
            item = QListWidgetItem(icon("memory") if t.target == "memory" else kind_icon(t.icon), t.label)
            item.setData(KEY_ROLE, t.key)
            item.setToolTip(f"{t.description}\ndouble-click to add, or drag onto the canvas")
            self.addItem(item)
        self.itemDoubleClicked.connect(lambda item: self.add_template(str(item.data(KEY_ROLE))))
        self.setDragEnabled(True)  # the canvas takes the drop (studio.ui.canvas.drops)
        self.setDragDropMode(QAbstractItemView.DragDropMode.DragOnly)

    def mimeData(self, items: list[QListWidgetItem]) -> QMimeData:  # noqa: N802 - Qt override
        from tilewright.studio.ui.canvas.drops import template_mime

        return template_mime(str(items[0].data(KEY_ROLE))) if items else QMimeData()

    def add_template(self, key: str) -> bool:
        """Add template ``key`` to the current level; a refusal is reported, not raised."""
        if self.doc.read_only:
            return False
        t = template(key)
        try:
            if t.target == "memory":
                target = self.selection.current or self.selection.level
                self.doc.push(AddMemory(self.doc, target, hbm_memory()))
                self.message.emit(f"added {t.label} to {target}")
            else:
                command = AddChild(self.doc, self.selection.level, build_component(key))
                self.doc.push(command)
                self.selection.select([command.child_path])
                self.message.emit(f"added {command.child_path}")
        except EditRefused as exc:
            self.message.emit(f"cannot add {t.label}: {exc.reason}")
            return False
        return True
