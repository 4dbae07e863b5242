"""The Gantt's lane scroll bar: which rows are shown, of how many, and a handle to reach the others.

The chart opens on as many rows as fit at a readable height; the others were reachable only by
shift+wheel or a drag, which nothing on screen told of ("COMPUTE · 20 lanes" showed stages 0–7 of 84
lanes with no sign of the rest). A vertical scroll bar beside the plot follows the view's rows both ways
and hides when every row is shown.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QScrollBar, QWidget

STEPS_PER_ROW = 10  # scroll bar steps per row: a smooth handle, whole rows on a page step


class LaneScrollBar(QScrollBar):
    def __init__(self, viewbox: pg.ViewBox, parent: QWidget | None = None):
        super().__init__(Qt.Orientation.Vertical, parent)
        self.viewbox = viewbox
        self.rows = 0
        self._syncing = False
        self.valueChanged.connect(self._scrolled)
        viewbox.sigRangeChanged.connect(lambda *_: self.follow())
        # Showing or hiding keeps its room: otherwise the plot's width changed, the chart refitted its rows
        # and the bar was asked to show or hide again from inside the first call.
        policy = self.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        self.setSizePolicy(policy)
        self.setVisible(False)

    def set_rows(self, rows: int) -> None:
        self.rows = rows
        self.follow()

    def shown(self) -> tuple[float, float]:
        """The view's rows, top and bottom (row coordinates, the y axis inverted)."""
        (_x0, _x1), (y0, y1) = self.viewbox.viewRange()
        return min(y0, y1), max(y0, y1)

    def follow(self) -> None:
        """Match the handle to the view: its size the rows shown, its place the first of them."""
        if self._syncing:
            return
        top, bottom = self.shown()
        span = bottom - top
        hidden = self.rows - span
        self._syncing = True
        try:
            if self.rows <= 0 or hidden <= 0.05:
                self.setVisible(False)
                return
            self.setRange(int(-0.6 * STEPS_PER_ROW), int(round((self.rows - 0.4 - span) * STEPS_PER_ROW)))
            self.setPageStep(max(1, int(span * STEPS_PER_ROW)))
            self.setSingleStep(STEPS_PER_ROW)
            self.setValue(int(round(top * STEPS_PER_ROW)))
            first, last = max(0, round(top + 0.6)), min(self.rows, round(bottom + 0.4))
            self.setToolTip(f"rows {first + 1}–{last} of {self.rows}: drag, or shift+wheel over the chart")
            self.setVisible(True)
        finally:
            self._syncing = False

    def _scrolled(self, value: int) -> None:
        if self._syncing:
            return
        top, bottom = self.shown()
        start = value / STEPS_PER_ROW
        self.viewbox.setYRange(start, start + (bottom - top), padding=0)
