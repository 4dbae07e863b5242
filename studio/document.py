"""The open project: one ``Project`` value, its file, its undo history and the signals views listen to.

The project is treated as immutable: an edit (always an undo command, see ``studio.commands``) replaces
it with a new value and says what kind of change it was, so each view refreshes only what it shows.
Views never assign into the model; that keeps undo exact and lets workers read a project safely while
the user goes on editing.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QUndoCommand, QUndoStack
from tilewright.engine.io import load_project, save_project
from tilewright.engine.ir.project import Project


class Change(Enum):
    """What a command changed; picks the signal the document emits."""

    component = "component"  # one component's own fields (path given)
    structure = "structure"  # components added, removed or renamed
    mapping = "mapping"
    workload = "workload"
    canvas = "canvas"  # positions on the canvas only


class ProjectDocument(QObject):
    componentChanged = Signal(str)
    structureChanged = Signal()
    mappingChanged = Signal()
    workloadChanged = Signal()
    canvasChanged = Signal()
    projectReplaced = Signal()
    # Any change at all, after the specific signal: for the status bar's checks and the title.
    changed = Signal()
    pathRenamed = Signal(str, str)
    filePathChanged = Signal(object)
    dirtyChanged = Signal(bool)

    def __init__(self, project: Project, file_path: Path | None = None, parent: QObject | None = None):
        super().__init__(parent)
        self._project = project
        self._file_path = Path(file_path) if file_path else None
        self._undo = QUndoStack(self)
        # A bound slot, not a lambda: Qt drops it when the document dies (the stack emits while dying).
        self._undo.cleanChanged.connect(self._on_clean_changed)
        self.read_only = False

    def _on_clean_changed(self, clean: bool) -> None:
        self.dirtyChanged.emit(not clean)

    # -- reading ------------------------------------------------------------------------------------
    @property
    def project(self) -> Project:
        return self._project

    @property
    def file_path(self) -> Path | None:
        return self._file_path

    @property
    def undo_stack(self) -> QUndoStack:
        return self._undo

    @property
    def is_dirty(self) -> bool:
        return not self._undo.isClean()

    @property
    def root_path(self) -> str:
        return self._project.hardware.name

    # -- whole-document operations ------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path, parent: QObject | None = None) -> ProjectDocument:
        """Load ``path``. Cross-part checks are the status bar's job, so a project that is inconsistent
        (tp larger than the machine, say) still opens and can be fixed here."""
        return cls(load_project(path), Path(path), parent)

    def replace(self, project: Project, file_path: Path | None = None) -> None:
        """Swap in another project (New, Open, Revert): history starts afresh."""
        self._project = project
        self._file_path = Path(file_path) if file_path else None
        self._undo.clear()
        self._undo.setClean()
        self.filePathChanged.emit(self._file_path)
        self.projectReplaced.emit()
        self.changed.emit()
        self.dirtyChanged.emit(False)

    def save(self, file_path: str | Path | None = None) -> Path:
        target = Path(file_path) if file_path else self._file_path
        if target is None:
            raise ValueError("save: no file name yet (use Save As)")
        save_project(self._project, target)
        if target != self._file_path:
            self._file_path = target
            self.filePathChanged.emit(target)
        self._undo.setClean()
        return target

    def push(self, command: QUndoCommand) -> None:
        """The one way views change the model; refused while presenting (editing locked)."""
        if self.read_only:
            return
        self._undo.push(command)

    # -- for commands only --------------------------------------------------------------------------
    def apply(self, project: Project, change: Change, path: str = "", renamed: tuple[str, str] | None = None) -> None:
        self._project = project
        if renamed is not None:
            self.pathRenamed.emit(*renamed)
        if change is Change.component:
            self.componentChanged.emit(path)
        elif change is Change.structure:
            self.structureChanged.emit()
        elif change is Change.mapping:
            self.mappingChanged.emit()
        elif change is Change.workload:
            self.workloadChanged.emit()
        elif change is Change.canvas:
            self.canvasChanged.emit()
        self.changed.emit()
