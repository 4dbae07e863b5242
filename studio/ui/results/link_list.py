"""The links list's model: a run's links, busiest first, each row's text and tooltip made when the view
asks for it.

A wafer run lists a thousand links or more. Built as one ``QListWidgetItem`` each, with its text and
tooltip formatted up front, filling the list took 40–80 ms of the GUI thread on a slow machine, in one
turn of the event loop; a model answers only for the rows on screen (and the one under the pointer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QIcon
from tilewright.engine.results.result import Series
from tilewright.studio.model.link_carriage import LinkCarriage
from tilewright.studio.units import SECONDS, format_percent, format_value

Index = QModelIndex | QPersistentModelIndex


class LinkListModel(QAbstractListModel):
    """Rows of (series, mean utilisation as a fraction); ``short`` names a link for its row."""

    def __init__(self, short: Callable[[str], str]) -> None:
        super().__init__()
        self.short = short
        self.rows: list[tuple[Series, float]] = []
        self.carriage = LinkCarriage()
        self.span = 0.0
        self.icons: dict[int, QIcon] = {}  # the rows whose link is plotted: its curve's colour

    def set_rows(self, rows: list[tuple[Series, float]], carriage: LinkCarriage, span: float) -> None:
        self.beginResetModel()
        self.rows, self.carriage, self.span, self.icons = rows, carriage, span, {}
        self.endResetModel()

    def set_icons(self, icons: dict[int, QIcon]) -> None:
        """Swatches on these rows, none on the others (only the changed rows repaint)."""
        changed = set(self.icons) | set(icons)
        self.icons = icons
        for row in changed:
            index = self.index(row)
            self.dataChanged.emit(index, index, [Qt.ItemDataRole.DecorationRole])

    def text(self, row: int) -> str:
        series, mean = self.rows[row]
        return f"{format_percent(mean):>7}  {self.short(series.name)}"

    def tooltip(self, row: int) -> str:
        series, mean = self.rows[row]
        carried = self.carriage.describe(series.name)
        return (f"{series.name}\naverage utilisation {format_percent(mean)} over {format_value(self.span, SECONDS)}"
                + (f"\nbusy carrying {carried}" if carried else ""))

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802, B008 - Qt override
        return 0 if parent.isValid() else len(self.rows)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self.rows):
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return self.text(index.row())
        if role == Qt.ItemDataRole.ToolTipRole:
            return self.tooltip(index.row())
        if role == Qt.ItemDataRole.DecorationRole:
            return self.icons.get(index.row())
        return None
