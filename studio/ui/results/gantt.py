"""The Gantt chart: one row per compute lane, link and memory port, grouped under headers; colour by
category or by pipeline stage; wheel zooms time, drag pans, hover tells what a slice is.

Speed: one ``BarGraphItem`` per colour with a shared pen and brush (pyqtgraph's ``drawRects`` fast path),
refilled from ``GanttData.bars`` at the current zoom (level of detail), a moment after the view stops
moving. A million slices draw as the few thousand rectangles a screen can show.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, QTimer
from PySide6.QtGui import QCursor, QPainterPath
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QToolTip, QVBoxLayout, QWidget
from tilewright.studio.model.gantt_data import GanttData
from tilewright.studio.ui.results.lane_axis import LaneAxis, label_stride
from tilewright.studio.ui.results.lane_scroll import LaneScrollBar
from tilewright.studio.ui.results.plot_style import add_legend_row, elastic, make_plot, release_plot, set_legend
from tilewright.studio.ui.results.time_cursor import CursorLine, TimeCursor
from tilewright.studio.units import SECONDS, format_value, plural

BAR_HEIGHT = 0.72
ROW_PX = 17  # a row's height on opening (a label fits); more rows are a scroll (shift+wheel or drag) away
MIN_ROWS = 10  # a short chart keeps rows this thin instead of stretching a lane to the whole height
REFRESH_MS = 15
HOVER_PX = 3
HEADER_BRUSH = "#e9edf2"
NO_PEN = pg.mkPen(None)


class Bars(pg.BarGraphItem):
    """A bar set whose shape is its bounding box: the stock ``shape()`` walks every rectangle in Python
    whenever the mouse moves over the scene. Hover is answered by ``GanttData.slice_at`` instead."""

    def shape(self) -> QPainterPath:
        path = QPainterPath()
        path.addRect(self.boundingRect())
        return path


def clipped(bars: dict, x0: float, x1: float, y0: float, y1: float) -> dict:
    """Bars cut to [x0, x1] in time; rows whose bar is not wholly within [y0, y1] dropped."""
    out = {}
    for key, (start, width, y) in bars.items():
        left, right = np.maximum(start, x0), np.minimum(start + width, x1)
        keep = (right > left) & (y >= y0) & (y <= y1)
        out[key] = (left[keep], (right - left)[keep], y[keep])
    return out


class GanttViewBox(pg.ViewBox):
    """Wheel zooms the time axis only (lanes keep their height); shift+wheel scrolls lanes."""

    def wheelEvent(self, ev, axis=None):  # noqa: ANN001, N802
        if ev.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            rows = -1.0 if ev.delta() > 0 else 1.0
            self.translateBy(y=rows * 3)
            ev.accept()
            return
        super().wheelEvent(ev, axis=0)


class GanttView(QWidget):
    def __init__(self, cursor: TimeCursor, parent: QWidget | None = None):
        super().__init__(parent)
        self.data: GanttData | None = None
        self._title = ""
        self.mode = "category"
        self.items: dict[int, Bars] = {}
        self.axis = LaneAxis()
        self.viewbox = GanttViewBox()
        self.plot_widget = make_plot(viewBox=self.viewbox, axisItems={"left": self.axis})
        self.plot = self.plot_widget.getPlotItem()
        self.plot.setLabel("bottom", "time", units="s")
        self.plot.showGrid(x=True, y=False, alpha=0.15)
        self.viewbox.invertY(True)
        self.viewbox.disableAutoRange()
        self.viewbox.setMenuEnabled(False)
        self.headers = Bars(x0=[0.0], width=[0.0], y=[0.0], height=1.0, pen=NO_PEN, brush=HEADER_BRUSH)
        self.headers.setZValue(-100)
        self.plot.addItem(self.headers)
        self.legend = add_legend_row(self.plot)
        self.cursor_line = CursorLine(cursor, self.plot, self, label_position=0.02)
        self.cursor = cursor
        self.auto_fit = True  # follow the widget's size until the user zooms or pans
        self._build_toolbar()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.setSpacing(2)
        layout.addLayout(self.toolbar)
        self.scroll = LaneScrollBar(self.viewbox)  # the rows below (or above) the view, reachable and seen
        chart = QHBoxLayout()
        chart.setSpacing(0)
        chart.addWidget(self.plot_widget, 1)
        chart.addWidget(self.scroll)
        layout.addLayout(chart, 1)
        # under the legend: the breakdown's categories no bar is coloured with (GanttData.unseen_note)
        self.unseen = elastic(QLabel())
        self.unseen.setStyleSheet("color: #566573; font-size: 8pt")
        layout.addWidget(self.unseen)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.refresh_bars)
        self.viewbox.sigRangeChanged.connect(lambda *_: self._timer.start())
        self.viewbox.sigRangeChanged.connect(lambda *_: self._say_thinned())
        self.viewbox.sigResized.connect(self._resized)
        self.viewbox.sigRangeChangedManually.connect(self._user_moved)
        self.plot.scene().sigMouseMoved.connect(self._hover)
        self.plot.scene().sigMouseClicked.connect(self._clicked)
        self.set_data(None)

    def _build_toolbar(self) -> None:
        self.title = elastic(QLabel())
        self.colour_by = QComboBox()
        self.colour_by.addItems(["colour by category", "colour by pipeline stage"])
        self.colour_by.currentIndexChanged.connect(lambda i: self.set_mode(("category", "stage")[i]))
        fit = QPushButton("Fit")
        fit.setToolTip("show the whole iteration (wheel zooms time, drag pans, shift+wheel scrolls lanes)")
        fit.clicked.connect(self.fit)
        self.toolbar = QHBoxLayout()
        self.toolbar.addWidget(self.title, 1)
        self.toolbar.addWidget(self.colour_by)
        self.toolbar.addWidget(fit)

    def release(self) -> None:
        """The window is closing: stop timers and delete the plot while everything is whole."""
        self._timer.stop()
        self.cursor_line.detach()
        self.data = None
        release_plot(self.plot_widget)

    # -- data ----------------------------------------------------------------------------------------
    def set_data(self, data: GanttData | None, legend: bool = True) -> None:
        """Show ``data``; ``legend=False`` leaves the colour key to a later ``update_legend`` (the results
        panel fills it in an event-loop turn of its own: ten swatches take 20–25 ms on a slow machine)."""
        self.data = data
        for item in self.items.values():
            self.plot.removeItem(item)
        self.items = {}
        rows = data.rows if data is not None else []
        self.axis.set_rows(rows)
        self.scroll.set_rows(len(rows))
        if data is None or not len(data):
            self.title.setText("No timeline yet: run the project (F5)." if data is None else "This run has no slices.")
            set_legend(self.legend, [])
            self.unseen.setVisible(False)
            self.headers.setOpts(x0=[0.0], width=[0.0], y=[0.0])
            return
        lanes = sum(not r.is_header for r in rows)
        self._title = (f"<b>Timeline</b> · {len(data):,} slices · {lanes} {plural('lane', lanes)} · "
                       f"{format_value(data.span, SECONDS)}")
        self.title.setText(self._title)
        header_rows = [float(i) for i, r in enumerate(rows) if r.is_header]
        self.headers.setOpts(x0=[0.0] * len(header_rows), width=[data.span] * len(header_rows), y=header_rows)
        self.viewbox.setLimits(xMin=-0.02 * data.span, xMax=1.02 * data.span, yMin=-1.0,
                               yMax=max(len(rows), MIN_ROWS), minXRange=min(1e-9, data.span / 10),
                               maxXRange=1.04 * data.span)
        if legend:
            self.update_legend()
        self.auto_fit = True
        self.fit()

    def set_mode(self, mode: str) -> None:
        """"category" or "stage": which key picks a bar's colour."""
        if mode == self.mode:
            return
        self.mode = mode
        self.colour_by.setCurrentIndex(0 if mode == "category" else 1)
        for item in self.items.values():
            self.plot.removeItem(item)
        self.items = {}
        self.update_legend()
        self.refresh_bars()

    def update_legend(self) -> None:
        set_legend(self.legend, self.data.legend(self.mode) if self.data is not None else [])
        note = self.data.unseen_note() if self.data is not None and self.mode == "category" else ""
        self.unseen.setText(note)
        self.unseen.setToolTip(note)
        self.unseen.setVisible(bool(note))

    def fit(self) -> None:
        """The whole iteration, and as many rows from the top as fit at a readable height."""
        if self.data is None or not len(self.data):
            return
        height = self.viewbox.height()
        fit = max(1, int(height / ROW_PX)) if height > 0 else 24  # rows at a height their label fits
        # A short chart keeps thin rows (up to MIN_ROWS' worth of height), but never squeezes more rows in
        # than have room for a label each: ten rows in 110 px labelled every other lane.
        rows = max(min(fit, len(self.data.rows)), min(MIN_ROWS, fit))
        self.viewbox.setRange(xRange=(0.0, self.data.span), yRange=(-0.6, rows - 0.4), padding=0)
        self.refresh_bars()

    def _resized(self, *_args: object) -> None:
        if self.auto_fit:
            self.fit()
        else:
            self._timer.start()
        self._say_thinned()

    def labels_thinned(self) -> bool:
        """Whether the rows shown are too thin for a label each (the axis then labels every n-th lane)."""
        _top, _bottom = self.scroll.shown()
        return self.data is not None and label_stride(_bottom - _top, self.viewbox.height()) > 1

    def _say_thinned(self) -> None:
        """Zoomed out past a label per lane, the title says how to read a lane's name: by hovering it."""
        if self.data is None or not len(self.data):
            return
        note = " · some lanes unlabelled for room: hover a row for its name" if self.labels_thinned() else ""
        self.title.setText(self._title + note)

    def _user_moved(self, *_args: object) -> None:
        self.auto_fit = False

    # -- drawing -------------------------------------------------------------------------------------
    def pixel_seconds(self) -> float:
        px = self.viewbox.viewPixelSize()[0]
        return px if px > 0 else 0.0

    def refresh_bars(self, clip: bool = False) -> None:
        """Refill each colour's bar set with what the current zoom shows (level of detail). ``clip``
        cuts bars to the visible rectangle: on screen the view clips them, an SVG export does not."""
        if self.data is None or not len(self.data):
            return
        (x0, x1), (y0, y1) = self.viewbox.viewRange()
        y0, y1 = min(y0, y1), max(y0, y1)
        bars = self.data.bars(self.mode, x0, x1, self.pixel_seconds(), rows=(y0, y1))
        if clip:
            bars = clipped(bars, x0, x1, y0 + BAR_HEIGHT / 2, y1 - BAR_HEIGHT / 2)
        for key in list(self.items):
            if key not in bars:
                self.items[key].setOpts(x0=[], width=[], y=[])
        for key, (start, width, y) in bars.items():
            item = self.items.get(key)
            if item is None:
                item = Bars(x0=start, width=width, y=y, height=BAR_HEIGHT, pen=NO_PEN,
                            brush=self.data.colour(self.mode, key))
                item.setZValue(-key if self.mode == "category" else 0)
                self.items[key] = item
                self.plot.addItem(item)
            else:
                item.setOpts(x0=start, width=width, y=y)

    def export_title(self) -> str:
        return self.title.text().replace("<b>", "").replace("</b>", "")

    def bar_count(self) -> int:
        return sum(len(item.opts["x0"]) for item in self.items.values())

    # -- pointer -------------------------------------------------------------------------------------
    def text_at(self, t: float, y: float) -> str:
        """Tooltip text for a point in plot coordinates (seconds, row), empty when no slice is there."""
        data = self.data
        row = int(round(y))
        if data is None or not 0 <= row < len(data.rows) or abs(y - row) > BAR_HEIGHT / 2 + 0.05:
            return ""
        lane = data.rows[row].lane
        if lane < 0:
            return ""
        i = data.slice_at(lane, t, HOVER_PX * self.pixel_seconds())
        thinned = self.labels_thinned()  # the axis may not name this row: the tooltip does
        name = data.rows[row].text
        if i is None:
            return name if thinned else ""
        return f"{name}\n{data.describe(i)}" if thinned else data.describe(i)

    def _hover(self, pos: QPointF) -> None:
        if self.data is None or not self.viewbox.sceneBoundingRect().contains(pos):
            return
        point = self.viewbox.mapSceneToView(pos)
        text = self.text_at(point.x(), point.y())
        if text:
            QToolTip.showText(QCursor.pos(), text, self.plot_widget)
        else:
            QToolTip.hideText()

    def _clicked(self, ev) -> None:  # noqa: ANN001
        if ev.button() != Qt.MouseButton.LeftButton or not self.viewbox.sceneBoundingRect().contains(ev.scenePos()):
            return
        self.cursor.move_to(self.viewbox.mapSceneToView(ev.scenePos()).x())
