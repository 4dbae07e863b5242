"""A layout that places its widgets left to right at their preferred size and wraps to a new line when the
next one would not fit, like words in a paragraph.

The summary's metric tables use it so that a 1280 × 720 window (a projector in a design review) shows
them without scrolling sideways: they wrap into more lines and the summary scrolls down instead. The
layout reports ``heightForWidth``, which ``QScrollArea`` (``widgetResizable``) honours, so the content is
laid out to the viewport's width and only ever grows in height.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QLayout, QLayoutItem, QWidget


class FlowLayout(QLayout):
    def __init__(self, parent: QWidget | None = None, h_spacing: int = 28, v_spacing: int = 8):
        super().__init__(parent)
        self._items: list[QLayoutItem] = []
        self._h, self._v = h_spacing, v_spacing
        self.setContentsMargins(0, 0, 0, 0)

    # -- QLayout's item protocol --------------------------------------------------------------------
    def addItem(self, item: QLayoutItem) -> None:  # noqa: N802 - Qt's name
        self._items.append(item)

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int) -> QLayoutItem | None:  # noqa: N802
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QLayoutItem | None:  # noqa: N802
        return self._items.pop(index) if 0 <= index < len(self._items) else None

    def expandingDirections(self) -> Qt.Orientation:  # noqa: N802
        return Qt.Orientation(0)

    # -- geometry -----------------------------------------------------------------------------------
    def hasHeightForWidth(self) -> bool:  # noqa: N802
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802
        return self._place(QRect(0, 0, width, 0), move=False)

    def setGeometry(self, rect: QRect) -> None:  # noqa: N802
        super().setGeometry(rect)
        self._place(rect, move=True)

    def sizeHint(self) -> QSize:  # noqa: N802
        return self.minimumSize()

    def minimumSize(self) -> QSize:  # noqa: N802
        """As narrow as the widest item: everything else can wrap."""
        size = QSize()
        for item in self._visible():
            size = size.expandedTo(item.minimumSize())
        left, top, right, bottom = self.getContentsMargins()
        return size + QSize(left + right, top + bottom)

    def _visible(self) -> list[QLayoutItem]:
        return [i for i in self._items if i.widget() is None or not i.widget().isHidden()]

    def _place(self, rect: QRect, move: bool) -> int:
        """Lay the items out in lines inside ``rect`` (moving them when ``move``); the height used. An item
        wider than the whole line, or one that expands sideways (a message), gets the line's width."""
        left, top, right, bottom = self.getContentsMargins()
        area = rect.adjusted(left, top, -right, -bottom)
        x, y, line_height = area.x(), area.y(), 0
        for item in self._visible():
            hint = item.sizeHint()
            wide = bool(item.expandingDirections() & Qt.Orientation.Horizontal)
            width = area.width() if wide else min(hint.width(), area.width())
            height = item.heightForWidth(width) if item.hasHeightForWidth() else hint.height()
            if x > area.x() and x + width > area.right() + 1:  # does not fit after the others: next line
                x, y, line_height = area.x(), y + line_height + self._v, 0
            if move:
                item.setGeometry(QRect(QPoint(x, y), QSize(width, height)))
            x += width + self._h
            line_height = max(line_height, height)
        return y + line_height - rect.y() + bottom
