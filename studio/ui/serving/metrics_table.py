"""The metrics of one serving simulation as a two-column table (what, value with its unit)."""

from __future__ import annotations

from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem, QWidget


class MetricsTable(QTableWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(0, 2, parent)
        self.setHorizontalHeaderLabels(["metric", "value"])
        self.verticalHeader().hide()
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setAlternatingRowColors(True)
        header = self.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.verticalHeader().setDefaultSectionSize(20)

    def show_rows(self, rows: list[tuple[str, str]]) -> None:
        self.setRowCount(len(rows))
        for i, (name, value) in enumerate(rows):
            self.setItem(i, 0, QTableWidgetItem(name))
            self.setItem(i, 1, QTableWidgetItem(value))

    def rows(self) -> list[tuple[str, str]]:
        """What the table shows, row by row (for tests and exports)."""
        return [(self.item(i, 0).text(), self.item(i, 1).text()) for i in range(self.rowCount())]
