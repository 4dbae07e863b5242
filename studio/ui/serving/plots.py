"""The serving view's plots: latency percentiles and goodput against arrival rate, KV-cache occupancy
against time, and the per-request timeline. Each draws what ``studio.model.serving_data`` shaped; axes
carry their units (pyqtgraph scales seconds to ms/µs with the SI prefix on the axis label)."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from tilewright.studio.model.serving_data import (
    KIND_COLOURS,
    LATENCIES,
    PERCENTILE_STYLES,
    PERCENTILES,
    PHASE_COLOURS,
    REQUESTS_PER_S,
    KVCurve,
    LatencyCurves,
    TimelineBars,
    step_xy,
)
from tilewright.studio.ui.results.gantt import Bars
from tilewright.studio.ui.results.plot_style import (
    BACKGROUND,
    FOREGROUND,
    add_legend_row,
    set_legend,
    style_plot,
)
from tilewright.studio.ui.serving.line_labels import Box, place_label
from tilewright.studio.units import SECONDS, format_percent, format_value

PERCENTILE_COLOURS = {50: "#4c78a8", 90: "#f58518", 99: "#e45756"}
SLO_PEN = pg.mkPen("#c0392b", width=1.5, style=Qt.PenStyle.DashLine)
BEST_PEN = pg.mkPen("#2e8b57", width=1.5, style=Qt.PenStyle.DashDotLine)
BAR_HEIGHT = 0.8
SLO_HEADROOM = 1.25  # a latency plot reaches this far past its SLO: room for the label above the line
NO_PEN = pg.mkPen(None)
# The percentiles' key, in the latency plots' titles (a legend inside the plot would cover the curves).
_KEY = " ".join(
    f"<span style='color:{PERCENTILE_COLOURS[p]}'>{mark} p{p}</span>"
    for p, mark in zip(PERCENTILES, ("——", "– –", "···"), strict=True)
)
# A horizontal line's label starts at the plot's left edge (SLO) or ends at its right edge (target),
# below the line (the SLO line is often the plot's top; the goodput curve runs at 100 %, above the
# target). Centred on a point near an edge, as pyqtgraph places it by default, it was cut in half
# ("LO 100 ms", "target 90.0 9").
_EDGE_LABEL_LEFT = {"color": "#c0392b", "position": 0.02, "anchors": [(0, 0), (0, 0)]}
_EDGE_LABEL_RIGHT = {"color": "#c0392b", "position": 0.98, "anchors": [(1, 0), (1, 0)]}
_STYLES = {"solid": Qt.PenStyle.SolidLine, "dash": Qt.PenStyle.DashLine, "dot": Qt.PenStyle.DotLine}


def _label(plot: pg.PlotItem, side: str, text: str, units: str | None = None, prefix: bool = True) -> None:
    axis = plot.getAxis(side)
    axis.enableAutoSIPrefix(prefix)
    plot.setLabel(side, text, units=units, color=FOREGROUND)


class LatencyPlots(pg.GraphicsLayoutWidget):
    """TTFT, TPOT and E2E p50/p90/p99 against arrival rate, and the share of requests meeting the SLO;
    the SLO drawn as a red dashed line, the best rate (highest meeting the SLO) as a green one."""

    def __init__(self, parent=None):  # noqa: ANN001
        super().__init__(parent)
        self.setBackground(BACKGROUND)
        self.plots: dict[str, pg.PlotItem] = {}
        self.curves: dict[tuple[str, int], pg.PlotDataItem] = {}
        self.slo_lines: dict[str, pg.InfiniteLine] = {}
        self.best_lines: list[pg.InfiniteLine] = []
        names = [*LATENCIES, ("goodput", "Requests meeting the SLO")]
        for i, (name, title) in enumerate(names):
            plot = self.addPlot(row=i // 2, col=i % 2)
            style_plot(plot)
            plot.setTitle(title if name == "goodput" else f"{title} {_KEY}", color=FOREGROUND, size="9pt")
            plot.showGrid(x=True, y=True, alpha=0.2)
            _label(plot, "bottom", "arrival rate", REQUESTS_PER_S.symbol, prefix=False)
            if name == "goodput":
                _label(plot, "left", "requests", "%", prefix=False)
            else:
                _label(plot, "left", title, "s")
            self.plots[name] = plot
            # the goodput curve runs along the top when the SLO is met, and the target's label sits just under
            # it: "best" goes low in that plot
            at = 0.25 if name == "goodput" else 0.92
            best = pg.InfiniteLine(
                angle=90, pen=BEST_PEN, movable=False, label="best", labelOpts={"color": "#2e8b57", "position": at}
            )
            best.hide()
            plot.addItem(best)
            self.best_lines.append(best)
        for name, _ in LATENCIES:
            plot = self.plots[name]
            for p in PERCENTILES:
                pen = pg.mkPen(PERCENTILE_COLOURS[p], width=2, style=_STYLES[PERCENTILE_STYLES[p]])
                curve = plot.plot(
                    [],
                    [],
                    pen=pen,
                    symbol="o",
                    symbolSize=6,
                    symbolBrush=PERCENTILE_COLOURS[p],
                    symbolPen=NO_PEN,
                )
                self.curves[(name, p)] = curve
            if name in ("ttft_s", "tpot_s"):
                line = pg.InfiniteLine(
                    angle=0, pen=SLO_PEN, movable=False, label="SLO", labelOpts=_EDGE_LABEL_LEFT
                )
                line.hide()
                plot.addItem(line)
                self.slo_lines[name] = line
        goodput = self.plots["goodput"]
        self.goodput_curve = goodput.plot(
            [], [], pen=pg.mkPen("#2e8b57", width=2), symbol="o", symbolSize=6, symbolBrush="#2e8b57", symbolPen=NO_PEN
        )
        self.target_line = pg.InfiniteLine(
            angle=0, pen=SLO_PEN, movable=False, label="target", labelOpts=_EDGE_LABEL_RIGHT
        )
        goodput.addItem(self.target_line)
        goodput.setYRange(0, 105)
        self.data: LatencyCurves | None = None
        for plot in self.plots.values():  # labels are placed in pixels: again when the plots change size
            plot.getViewBox().sigResized.connect(lambda _vb: self.place_labels())

    def show_curves(self, data: LatencyCurves, target_fraction: float) -> None:
        x = data.rates
        for (name, p), curve in self.curves.items():
            y = data.values[name][p]
            keep = np.isfinite(y)
            curve.setData(x[keep], y[keep])
        for name, line in self.slo_lines.items():
            slo = data.slo.get(name)
            line.setVisible(slo is not None)
            if slo is not None:
                line.setValue(slo)
                line.label.setFormat(f"SLO {format_value(slo, SECONDS)}")
        self.goodput_curve.setData(x, 100.0 * data.goodput_fraction)
        self.target_line.setValue(100.0 * target_fraction)
        self.target_line.label.setFormat(f"target {format_percent(target_fraction)}")
        for line in self.best_lines:
            line.setVisible(data.best_rate is not None)
            if data.best_rate is not None:
                line.setValue(data.best_rate)
                line.label.setFormat(f"best {format_value(data.best_rate, REQUESTS_PER_S)}")
        for name, plot in self.plots.items():
            if name != "goodput":  # the SLO line stays in view even when every latency is far below it,
                # with room above it for its label when the points below leave none
                values = [data.values[name][p] for p in PERCENTILES]
                finite = np.concatenate([v[np.isfinite(v)] for v in values]) if values else np.array([])
                top = max([*finite.tolist(), SLO_HEADROOM * (data.slo.get(name) or 0.0), 0.0])
                plot.setYRange(0, top * 1.08 if top > 0 else 1.0)
            span = float(x.max() - x.min()) if len(x) else 0.0
            pad = span * 0.05 if span > 0 else max(float(x[0]) * 0.5, 0.5) if len(x) else 1.0
            plot.setXRange(float(x.min()) - pad if len(x) else 0, float(x.max()) + pad if len(x) else 1, padding=0)
        self.plots["goodput"].setYRange(0, 105, padding=0)
        self.data = data
        self.place_labels()

    def place_labels(self) -> None:
        """The SLO and target labels where no data point is (``line_labels``), clear of the "best" label."""
        data = self.data
        if data is None:
            return
        x = np.asarray(data.rates, dtype=float)
        for name, line in [*self.slo_lines.items(), ("goodput", self.target_line)]:
            if not line.isVisible():
                continue
            if name == "goodput":
                xs, ys = x, 100.0 * np.asarray(data.goodput_fraction, dtype=float)
            else:
                xs = np.concatenate([x for _p in PERCENTILES])
                ys = np.concatenate([np.asarray(data.values[name][p], dtype=float) for p in PERCENTILES])
            plot = self.plots[name]
            best = self.best_lines[list(self.plots).index(name)]
            avoid = [_view_box(plot.getViewBox(), best.label)] if best.isVisible() else []
            place_label(line, xs, ys, avoid)


def _view_box(view: pg.ViewBox, item: pg.GraphicsObject) -> Box:
    """``item``'s bounds in ``view``'s data coordinates."""
    rect = view.mapSceneToView(item.sceneBoundingRect()).boundingRect()
    return Box(rect.left(), rect.right(), min(rect.top(), rect.bottom()), max(rect.top(), rect.bottom()))


class KVPlot(pg.PlotWidget):
    """Share of KV-cache pages in use over time, one step curve per instance kind (serve, or prefill and
    decode when disaggregated)."""

    def __init__(self, parent=None):  # noqa: ANN001
        super().__init__(parent, background=BACKGROUND)
        plot = self.getPlotItem()
        style_plot(plot)
        plot.showGrid(x=True, y=True, alpha=0.2)
        plot.setTitle("KV-cache occupancy", color=FOREGROUND, size="9pt")
        _label(plot, "bottom", "time", "s")
        _label(plot, "left", "pages in use", "%", prefix=False)
        plot.setDownsampling(auto=True, mode="peak")
        plot.setClipToView(True)
        self.legend = add_legend_row(plot, columns=1)  # one kind a line: long entries never widen the plot
        self.curves: dict[str, pg.PlotDataItem] = {}

    def show_curves(self, curves: list[KVCurve]) -> None:
        plot = self.getPlotItem()
        for item in self.curves.values():
            plot.removeItem(item)
        self.curves = {}
        entries = []
        top = 0.0
        end = 0.0
        for i, c in enumerate(curves):
            colour = KIND_COLOURS.get(c.kind, _FALLBACK[i % len(_FALLBACK)])
            if len(c.times):
                end = max(end, float(c.times[-1]))
            x, y = step_xy(c.times, c.percent)
            item = pg.PlotDataItem(x, y, pen=pg.mkPen(colour, width=1.5), fillLevel=0, brush=pg.mkBrush(colour + "40"))
            plot.addItem(item)
            self.curves[c.kind] = item
            top = max(top, c.peak_percent)
            entries.append(
                (
                    # two lines: on one, the entry was wider than the plot in a 1280-px window and
                    # pushed the plot's right part out of view
                    f"{c.kind}: peak {c.peak_percent:.3g} %, mean {c.mean_percent:.3g} %<br>"
                    f"of {c.pages:,} pages × {c.page_tokens:,} tokens",
                    colour,
                )
            )
        set_legend(self.legend, entries)
        plot.setYRange(0, max(top * 1.1, 1.0), padding=0)
        plot.setXRange(0, end if end > 0 else 1.0, padding=0.02)


class TimelinePlot(pg.PlotWidget):
    """One row per request (by arrival, first at the top): queued, prefill, KV transfer and decode, one
    ``BarGraphItem`` per phase colour."""

    def __init__(self, parent=None):  # noqa: ANN001
        super().__init__(parent, background=BACKGROUND)
        plot = self.getPlotItem()
        style_plot(plot)
        plot.setTitle("Requests over time", color=FOREGROUND, size="9pt")
        _label(plot, "bottom", "time", "s")
        _label(plot, "left", "request (by arrival)", None, prefix=False)
        plot.invertY(True)
        plot.showGrid(x=True, alpha=0.2)
        self.legend = add_legend_row(plot, columns=4)
        set_legend(self.legend, list(PHASE_COLOURS.items()))
        self.bars: dict[str, Bars] = {}
        for name, colour in PHASE_COLOURS.items():
            bars = Bars(x0=[], width=[], y=[], height=BAR_HEIGHT, pen=NO_PEN, brush=pg.mkBrush(colour))
            plot.addItem(bars)
            self.bars[name] = bars

    def show_bars(self, data: TimelineBars) -> None:
        for name, bars in self.bars.items():
            rows, start, width = data.phases[name]
            bars.setOpts(x0=start, width=width, y=rows, height=BAR_HEIGHT)
            bars.setVisible(len(rows) > 0)
        set_legend(self.legend, [(k, c) for k, c in PHASE_COLOURS.items() if len(data.phases[k][0])])
        n = len(data.ids)
        plot = self.getPlotItem()
        plot.setYRange(-0.5, max(n, 1) - 0.5, padding=0.01)
        plot.setXRange(data.start_s if n else 0.0, data.end_s if n else 1.0, padding=0.01)


_FALLBACK = ("#72b7b2", "#b279a2", "#9d755d")
