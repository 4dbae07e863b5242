"""Shared view state: which components are selected and which hierarchy level the canvas shows.

Canvas, outline and inspector never talk to each other; each sets and follows this one object, so they
stay in sync without knowing the others exist (and later views — heat overlay, mapping — join the same
way). It also follows renames and removals in the document, so no view holds a stale path.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from tilewright.studio.document import ProjectDocument
from tilewright.studio.tree_edit import parent_path, renamed_path


class Selection(QObject):
    changed = Signal(list)  # selected component paths
    levelChanged = Signal(str)  # path of the component whose children the canvas shows

    def __init__(self, doc: ProjectDocument, parent: QObject | None = None):
        super().__init__(parent)
        self.doc = doc
        self._paths: list[str] = []
        self._level = doc.root_path
        doc.pathRenamed.connect(self._on_renamed)
        doc.structureChanged.connect(self._prune)
        doc.projectReplaced.connect(self._on_replaced)

    @property
    def paths(self) -> list[str]:
        return list(self._paths)

    @property
    def current(self) -> str | None:
        """The component the inspector shows: the last selected one, else the level being viewed."""
        return self._paths[-1] if self._paths else self._level

    @property
    def level(self) -> str:
        return self._level

    def select(self, paths: list[str]) -> None:
        paths = [p for p in dict.fromkeys(paths) if self.doc.project.hardware.find(p) is not None]
        if paths != self._paths:
            self._paths = paths
            self.changed.emit(self.paths)

    def set_level(self, path: str) -> None:
        if self.doc.project.hardware.find(path) is None or path == self._level:
            return
        self._level = path
        self.levelChanged.emit(path)

    def reveal(self, path: str) -> None:
        """Show ``path`` on the canvas: go to its parent's level, then select it (the root is selected
        while its own level is shown, so the inspector and outline show it)."""
        parent = parent_path(path)
        self.set_level(parent if parent is not None else path)
        self.select([path])

    def _on_renamed(self, old: str, new: str) -> None:
        level = renamed_path(self._level, old, new)
        paths = [renamed_path(p, old, new) for p in self._paths]
        if level != self._level:
            self._level = level
            self.levelChanged.emit(level)
        if paths != self._paths:
            self._paths = paths
            self.changed.emit(self.paths)

    def _prune(self) -> None:
        hw = self.doc.project.hardware
        level = self._level
        while hw.find(level) is None and parent_path(level) is not None:
            level = parent_path(level) or hw.name
        if hw.find(level) is None:
            level = hw.name
        if level != self._level:
            self._level = level
            self.levelChanged.emit(level)
        kept = [p for p in self._paths if hw.find(p) is not None]
        if kept != self._paths:
            self._paths = kept
            self.changed.emit(self.paths)

    def _on_replaced(self) -> None:
        self._level = self.doc.root_path
        self._paths = []
        self.levelChanged.emit(self._level)
        self.changed.emit([])
