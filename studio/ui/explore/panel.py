"""Explore: search, sweep and partition, each a tab; results act on the open project (undoably)."""

from __future__ import annotations

from PySide6.QtWidgets import QTabWidget, QWidget
from tilewright.studio.document import ProjectDocument
from tilewright.studio.ui.explore.hypar_tab import HyparTab
from tilewright.studio.ui.explore.search_tab import SearchTab
from tilewright.studio.ui.explore.sweep_tab import SweepTab


class ExplorePanel(QTabWidget):
    def __init__(self, doc: ProjectDocument, parent: QWidget | None = None):
        super().__init__(parent)
        self.search = SearchTab(doc)
        self.sweep = SweepTab(doc)
        self.hypar = HyparTab(doc)
        self.addTab(self.search, "Parallelism search")
        self.addTab(self.sweep, "Sweep")
        self.addTab(self.hypar, "HyPar")
