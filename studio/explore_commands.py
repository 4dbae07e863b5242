"""Undo commands the Explore panel pushes: adopt a searched mapping, or open a swept design."""

from __future__ import annotations

from tilewright.engine.ir.mapping import Mapping
from tilewright.engine.ir.project import Project
from tilewright.studio.commands import SnapshotCommand
from tilewright.studio.document import Change, ProjectDocument


class AdoptMapping(SnapshotCommand):
    """Replace the whole mapping in one undo step (a search result sets many fields at once)."""

    def __init__(self, doc: ProjectDocument, mapping: Mapping, text: str = "Adopt searched mapping"):
        super().__init__(doc, doc.project.model_copy(update={"mapping": mapping}), text, Change.mapping)


class OpenDesign(SnapshotCommand):
    """Replace hardware, workload and mapping by a swept design; every view rebuilds."""

    def __init__(self, doc: ProjectDocument, project: Project, text: str = "Open swept design"):
        super().__init__(doc, project, text, Change.structure)

    def redo(self) -> None:
        super().redo()
        self.doc.mappingChanged.emit()
        self.doc.workloadChanged.emit()

    def undo(self) -> None:
        super().undo()
        self.doc.mappingChanged.emit()
        self.doc.workloadChanged.emit()
