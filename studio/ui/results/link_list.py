"""The links list's model: a run's links, busiest first, each row's text and tooltip made when the view
asks for it.

A wafer run lists a thousand links or more. Built as one ``QListWidgetItem`` each, with its text and
tooltip formatted up front, filling the list took 40–80 ms of the GUI thread on a slow machine, in one
turn of the event loop; a model answers only for the rows on screen (and the one under the pointer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QAbstractListModel, QEvent, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QKeyEvent, QKeySequence, QPixmap
from PySide6.QtWidgets import QListView
from tilewright.engine.results.result import Series
from tilewright.studio.model.link_carriage import LinkCarriage
from tilewright.studio.units import SECONDS, format_percent, format_value

Index = QModelIndex | QPersistentModelIndex
SWATCH_PX = 12


def swatch(colour: str) -> QIcon:
    """A square of ``colour`` (a curve's, or "transparent" for a row whose link is not plotted)."""
    pixmap = QPixmap(SWATCH_PX, SWATCH_PX)
    pixmap.fill(QColor(colour))
    return QIcon(pixmap)


class LinkListModel(QAbstractListModel):
    """Rows of (series, mean utilisation as a fraction); ``short`` names a link for its row."""

    def __init__(self, short: Callable[[str], str]) -> None:
        super().__init__()
        self.short = short
        self.rows: list[tuple[Series, float]] = []
        self.carriage = LinkCarriage()
        self.span = 0.0
        self.icons: dict[int, QIcon] = {}  # the rows whose link is plotted: its curve's colour
        # the other rows an empty square of the same size: with no icon their text began a swatch further
        # left, and the percentages of plotted and unplotted links no longer lined up
        self.blank = swatch("transparent")

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
            return self.icons.get(index.row(), self.blank)
        return None


LIST_KEYS = (QKeySequence.StandardKey.SelectAll, QKeySequence.StandardKey.Copy)


class LinkListView(QListView):
    """The list's own keys while it has the focus: Ctrl+A selects every link listed, Ctrl+C copies the
    selected rows (average utilisation, a tab, the link's whole name: a spreadsheet's two columns). The
    window's Edit actions are window-wide shortcuts that act on the canvas: in the list, Ctrl+A selected every
    component on the canvas and Ctrl+C copied the canvas's selection as JSON."""

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ShortcutOverride and isinstance(event, QKeyEvent) and any(
                event.matches(key) for key in LIST_KEYS):
            event.accept()  # the key comes to keyPressEvent instead of the window's shortcut
            return True
        return super().event(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        if event.matches(QKeySequence.StandardKey.Copy):
            QGuiApplication.clipboard().setText(self.copied_text())
        else:
            super().keyPressEvent(event)  # Ctrl+A: the view's own select-all

    def copied_text(self) -> str:
        """The selected rows, busiest first: "56.4 %<tab>whole link name" a line."""
        model = self.model()
        rows = sorted(index.row() for index in self.selectionModel().selectedRows())
        if not isinstance(model, LinkListModel):
            return ""
        return "".join(f"{format_percent(model.rows[r][1])}\t{model.rows[r][0].name}\n" for r in rows)
