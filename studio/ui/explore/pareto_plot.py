"""A scatter of explored designs with their Pareto front; clicking a point reports its index.

Axis titles carry their unit as written ("peak memory (GiB)"), without pyqtgraph's automatic SI prefix,
which made "mGiB" of half a GiB and "ksamples/s"; each title shortens to its unit alone when the axis is
too short for it (in the Sweep tab at 1280 × 720 the y axis had ~80 px and read "throughput (sam").
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Signal
from tilewright.studio.ui.results.plot_style import PLOT_MIN_PX, fit_axis_label, style_plot

FRONT_PEN = pg.mkPen("#c0392b", width=2)
POINT_BRUSH = pg.mkBrush(52, 101, 164, 150)
FRONT_BRUSH = pg.mkBrush("#c0392b")


class ParetoPlot(pg.PlotWidget):
    pointClicked = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent=parent, background="w")
        style_plot(self.getPlotItem())
        self.setMinimumHeight(PLOT_MIN_PX)
        self.showGrid(x=True, y=True, alpha=0.25)
        self.scatter = pg.ScatterPlotItem(size=9, pen=pg.mkPen(None), brush=POINT_BRUSH, hoverable=True)
        self.front_line = pg.PlotDataItem(pen=FRONT_PEN, symbol="o", symbolBrush=FRONT_BRUSH, symbolSize=10)
        self.addItem(self.scatter)
        self.addItem(self.front_line)
        self.scatter.sigClicked.connect(self._clicked)
        for side in ("bottom", "left"):
            self.getPlotItem().getAxis(side).enableAutoSIPrefix(False)

    def show_points(
        self, xs: list[float], ys: list[float], front: list[int], x_label: tuple[str, str], y_label: tuple[str, str]
    ) -> None:
        """Points (with their indices as data) and the front joined in x order; labels carry units."""
        for side, (name, unit) in (("bottom", x_label), ("left", y_label)):
            fit_axis_label(self.getPlotItem(), side, [f"{name} ({unit})", unit])
        self.scatter.setData(x=xs, y=ys, data=list(range(len(xs))))
        if front:
            order = sorted(front, key=lambda i: xs[i])
            self.front_line.setData(np.array([xs[i] for i in order]), np.array([ys[i] for i in order]))
        else:
            self.front_line.setData([], [])
        self.autoRange()

    def _clicked(self, _item, points, *_args) -> None:
        if len(points):
            self.pointClicked.emit(int(points[0].data()))
