"""One time cursor shared by every view of a run: the Gantt, links and memory plots and the canvas heat
overlay all follow ``TimeCursor.moved``; dragging the cursor line in any plot moves it everywhere.

The main window owns the cursor (``MainWindow.time_cursor``); a view attaches a ``CursorLine`` to its
plot and never talks to the other views directly.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QObject, Signal
from tilewright.studio.units import SECONDS, format_value

CURSOR_COLOUR = "#c0392b"


class TimeCursor(QObject):
    moved = Signal(float)  # seconds from the start of the iteration
    spanChanged = Signal(float)  # the run's length in seconds: the range the cursor lives in

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._t = 0.0
        self._span = 0.0

    @property
    def position(self) -> float:
        return self._t

    @property
    def span(self) -> float:
        return self._span

    def set_span(self, seconds: float) -> None:
        """A new run: keep the cursor inside it."""
        self._span = max(0.0, float(seconds))
        self.spanChanged.emit(self._span)
        self.move_to(min(self._t, self._span))

    def move_to(self, seconds: float) -> None:
        t = min(max(0.0, float(seconds)), self._span) if self._span > 0 else max(0.0, float(seconds))
        if t == self._t:
            return
        self._t = t
        self.moved.emit(t)


class CursorLine(QObject):
    """A draggable vertical line in one plot, kept at the shared cursor; its label reads the time."""

    def __init__(self, cursor: TimeCursor, plot: pg.PlotItem, parent: QObject | None = None,
                 label_position: float = 0.96):
        super().__init__(parent)
        self.cursor = cursor
        self.line = pg.InfiniteLine(
            pos=cursor.position, angle=90, movable=True, pen=pg.mkPen(CURSOR_COLOUR, width=2),
            hoverPen=pg.mkPen(CURSOR_COLOUR, width=4), label="", labelOpts={
                "position": label_position, "color": CURSOR_COLOUR, "fill": (255, 255, 255, 220), "movable": True,
                # hang below the label's point near the top, on whichever side of the line has room:
                # centred on it (pyqtgraph's default) the upper half was cut off by the plot's edge
                "anchors": [(0, 0), (1, 0)]},
        )
        self.line.setZValue(50)
        plot.addItem(self.line, ignoreBounds=True)
        self._update_label(cursor.position)
        # sigDragged, not sigPositionChanged: only the user's drag moves the shared cursor. Position
        # changes also happen while a plot is torn down, and answering those reached deleted objects.
        self.line.sigDragged.connect(self._dragged)
        cursor.moved.connect(self._follow)

    def detach(self) -> None:
        """Stop following the shared cursor (the plot is going away)."""
        try:
            self.cursor.moved.disconnect(self._follow)
        except (RuntimeError, TypeError):
            pass  # already disconnected, or the cursor is gone

    def _dragged(self, line: pg.InfiniteLine) -> None:
        self.cursor.move_to(line.value())
        if line.value() != self.cursor.position:  # clamped to the run
            self._follow(self.cursor.position)

    def _follow(self, t: float) -> None:
        if self.line.value() != t:
            self.line.setValue(t)
        self._update_label(t)

    def _update_label(self, t: float) -> None:
        self.line.label.setFormat(format_value(t, SECONDS))
        self.line.label.valueChanged()
