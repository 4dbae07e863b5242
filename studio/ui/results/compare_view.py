"""The Runs tab: pick any two of the last runs and see their key metrics side by side, with the
difference in units (green when B is better, red when worse) and the project edits between them."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tilewright.studio.ui.results.compare import compare_rows
from tilewright.studio.ui.results.history import RunHistory
from tilewright.studio.ui.results.project_diff import project_changes

BETTER, WORSE = QColor("#1e8449"), QColor("#c0392b")
HEADERS = ("metric", "run A", "run B", "B − A", "change")


class CompareView(QWidget):
    def __init__(self, history: RunHistory, parent: QWidget | None = None):
        super().__init__(parent)
        self.history = history
        self.run_a, self.run_b = QComboBox(), QComboBox()
        for combo in (self.run_a, self.run_b):
            # a run's title ends with its time per iteration: as wide as the longest title, so that number
            # is never cut (it was "2.82 s/ite" at 34 characters); the whole title is also the tooltip
            combo.setMinimumContentsLength(34)
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
            combo.currentIndexChanged.connect(self.refresh_table)
            combo.currentTextChanged.connect(combo.setToolTip)
        self.table = QTableWidget(0, len(HEADERS))
        self.table.setHorizontalHeaderLabels(HEADERS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.table.setAlternatingRowColors(True)
        self.changes = QLabel()
        self.changes.setWordWrap(True)
        self.changes.setAlignment(Qt.AlignmentFlag.AlignTop)
        self.changes.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        pick = QHBoxLayout()
        pick.addWidget(QLabel("Run A:"))
        pick.addWidget(self.run_a)
        pick.addSpacing(16)
        pick.addWidget(QLabel("Run B:"))
        pick.addWidget(self.run_b)
        pick.addStretch(1)
        body = QHBoxLayout()
        body.addWidget(self.table, 0)
        body.addWidget(self.changes, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.addLayout(pick)
        layout.addLayout(body, 1)
        history.changed.connect(self.refresh_runs)
        self.refresh_runs()

    def refresh_runs(self) -> None:
        """Refill the pickers; by default A is the run before the newest and B the newest."""
        records = self.history.records
        for combo in (self.run_a, self.run_b):
            combo.blockSignals(True)
            combo.clear()
            for r in reversed(records):  # newest first
                combo.addItem(r.title, r.number)
            combo.blockSignals(False)
        self.run_b.setCurrentIndex(0 if records else -1)
        self.run_a.setCurrentIndex(1 if len(records) > 1 else 0 if records else -1)
        self.refresh_table()

    def pick(self, a: int, b: int) -> None:
        """Compare run number ``a`` with run number ``b``."""
        self.run_a.setCurrentIndex(self.run_a.findData(a))
        self.run_b.setCurrentIndex(self.run_b.findData(b))

    def refresh_table(self) -> None:
        a = self.history.find(self.run_a.currentData()) if self.run_a.currentIndex() >= 0 else None
        b = self.history.find(self.run_b.currentData()) if self.run_b.currentIndex() >= 0 else None
        self.table.setRowCount(0)
        if a is None or b is None:
            self.changes.setText("Run the project twice (edit in between) to compare two runs here; "
                                 f"the last {self.history.keep} runs are kept.")
            return
        rows = compare_rows(a.metrics, b.metrics)
        self.table.setRowCount(len(rows))
        for i, row in enumerate(rows):
            for j, text in enumerate((row.label, row.a, row.b, row.delta, row.relative)):
                item = QTableWidgetItem(text)
                if j:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if j >= 3 and row.better is not None:
                    item.setForeground(QBrush(BETTER if row.better else WORSE))
                self.table.setItem(i, j, item)
        self._fit_table_width()
        changes = project_changes(a.project, b.project)
        if len(self.history) < 2:
            note = ("Only one run so far. Edit the project and run again (F5): the last "
                    f"{self.history.keep} runs are kept, and any two compare here.")
        elif a is b:
            note = "The same run on both sides."
        elif not changes:
            note = "No edits between these runs' projects."
        else:
            note = "<b>Edits from A to B</b><br>" + "<br>".join(html.escape(c) for c in changes)
        self.changes.setText(note)

    def _fit_table_width(self) -> None:
        """As wide as its columns (the rest of the row is for the list of edits)."""
        self.table.resizeColumnsToContents()
        width = sum(self.table.columnWidth(c) for c in range(self.table.columnCount()))
        self.table.setFixedWidth(width + self.table.verticalScrollBar().sizeHint().width() + 4)

    def cell(self, row: int, column: int) -> str:
        item = self.table.item(row, column)
        return item.text() if item is not None else ""
