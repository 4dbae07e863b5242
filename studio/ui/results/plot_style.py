"""Shared look of the result plots (light background, quiet axes) and the HTML legend swatches used in
the views' tool rows, so every plot reads the same and exports cleanly onto white paper."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
import shiboken6
from PySide6.QtGui import QFontMetricsF
from PySide6.QtWidgets import QLabel, QSizePolicy
from tilewright.studio.model.palette import category_label
from tilewright.studio.ui.layout_detach import detach_widget

BACKGROUND = "#ffffff"
FOREGROUND = "#3d4852"
AXIS_PEN = pg.mkPen("#8a949e")


def style_plot(plot: pg.PlotItem) -> None:
    """White background, grey axes with dark text; the plot's widget (if any) gets the background."""
    for view in plot.scene().views() if plot.scene() is not None else []:
        view.setBackground(BACKGROUND)
    for name in ("left", "bottom", "right", "top"):
        axis = plot.getAxis(name)
        axis.setPen(AXIS_PEN)
        axis.setTextPen(pg.mkPen(FOREGROUND))
    plot.setMenuEnabled(False)
    plot.hideButtons()


PLOT_MIN_PX = 130  # the time axis and the legend row take ~80 px: below this the data area was a sliver


def make_plot(**kwargs) -> pg.PlotWidget:  # noqa: ANN003
    """A styled plot that keeps room for its data: at 1280 × 720 the tables around the memory and link
    plots left them a 10-px data area (and cut the time cursor's label) before they had a minimum."""
    widget = pg.PlotWidget(background=BACKGROUND, **kwargs)
    style_plot(widget.getPlotItem())
    widget.setMinimumHeight(PLOT_MIN_PX)
    return widget


def fit_axis_label(plot: pg.PlotItem, side: str, texts: Sequence[str]) -> None:
    """Label axis ``side`` with the first of ``texts`` (longest first, each with its unit) that its length
    holds, chosen again whenever the plot is resized: a plot at its minimum height has ~60 px of y axis,
    where "utilisation (%)" or "throughput (samples/s)" was cut to "utilisation" or "throughput (sam".
    Calling it again replaces that axis's choices (one resize hook per plot)."""
    choices: dict[str, list[str]] | None = getattr(plot, "_label_choices", None)
    if choices is None:
        choices = plot._label_choices = {}
        plot.getViewBox().sigResized.connect(lambda *_args: _fit_labels(plot, choices))
        plot.getViewBox().sigYRangeChanged.connect(lambda *_args: _fit_ticks(plot, choices))
    choices[side] = list(texts)
    _fit_labels(plot, choices)


def _fit_labels(plot: pg.PlotItem, choices: dict[str, list[str]]) -> None:
    rect = plot.getViewBox().sceneBoundingRect()
    for side, texts in choices.items():
        axis = plot.getAxis(side)
        room = rect.height() if side in ("left", "right") else rect.width()
        metrics = QFontMetricsF(axis.label.font())
        margin = 2 * axis.label.document().documentMargin()
        chosen = next((t for t in texts if metrics.horizontalAdvance(t) + margin <= room), texts[-1])
        if axis.labelText != chosen or not axis.label.isVisible():
            plot.setLabel(side, chosen)
    _fit_ticks(plot, choices)


TICK_ROOM = 1.25  # tick label heights between two labelled ticks on a vertical axis
NICE_STEPS = (1.0, 2.0, 2.5, 5.0)  # tick spacings, times a power of ten


def _nice_step(at_least: float) -> float:
    """The smallest 1, 2, 2.5 or 5 × 10^k that is at least ``at_least`` (> 0)."""
    power = 10.0 ** math.floor(math.log10(at_least))
    return next((f * power for f in NICE_STEPS if f * power >= at_least * (1 - 1e-9)), 10.0 * power)


def _fit_ticks(plot: pg.PlotItem, choices: dict[str, list[str]]) -> None:
    """Space a vertical axis's labelled ticks at least ``TICK_ROOM`` label heights apart. pyqtgraph always
    labels at least three major ticks, whatever the length: on a links plot at its minimum height (~40 px of
    y axis) "80 60 40 20" were drawn over one another. Longer axes keep pyqtgraph's own
    spacing."""
    box = plot.getViewBox()
    height = box.sceneBoundingRect().height()
    low, high = box.viewRange()[1]
    for side in choices:
        if side not in ("left", "right"):
            continue
        axis = plot.getAxis(side)
        font = axis.style.get("tickFont") or axis.font()
        room = TICK_ROOM * QFontMetricsF(font).height()
        span = abs(high - low)
        if height <= 0 or span <= 0 or not math.isfinite(span):
            continue
        least = span * room / height  # data units between labels that do not overlap
        axis.setTickSpacing()  # pyqtgraph's own spacing first: kept unless its labels would overlap
        auto = axis.tickSpacing(low, high, height)
        if auto and auto[0][0] < least:
            major = _nice_step(least)
            axis.setTickSpacing(major, major / 2)


def legend_html(entries: list[tuple[str, str]]) -> str:
    """"■ compute ■ tp comm …" with each square in its colour."""
    return "&nbsp;&nbsp;".join(
        f"<span style='color:{colour}; font-size:large'>■</span>&nbsp;{html.escape(category_label(name))}"
        for name, colour in entries
    )


class Swatch(pg.BarGraphItem):
    """A legend sample only (never added to a plot): the legend draws a square in its brush."""

    def __init__(self, colour: str):
        super().__init__(x0=[], width=[], y=[], height=1.0, pen=pg.mkPen(None), brush=colour)


def add_legend_row(plot: pg.PlotItem, columns: int = 10) -> pg.LegendItem:
    """A one-line legend under the time axis (inside the plot, so PNG/SVG exports carry it, and off the
    data, so it never hides a bar)."""
    legend = pg.LegendItem(colCount=columns, labelTextColor=FOREGROUND, labelTextSize="8pt",
                           verSpacing=-6, horSpacing=14)
    plot.layout.addItem(legend, 4, 1)
    return legend


def set_legend(legend: pg.LegendItem, entries: list[tuple[str, str]]) -> None:
    """Replace the legend's entries with (name, colour) swatches (kept as they are when unchanged: a rerun
    of the same project has the same key, and each swatch costs about 2 ms to make)."""
    if getattr(legend, "entries", None) == entries:
        return
    legend.entries = list(entries)
    legend.clear()
    for name, colour in entries:
        legend.addItem(Swatch(colour), category_label(name))


def step_edges(times: list[float] | np.ndarray, end: float) -> np.ndarray:
    """Bin edges of a piecewise-constant series for ``stepMode="center"``: each value holds from its time
    to the next, the last one to ``end`` (the end of the iteration)."""
    t = np.asarray(times, dtype=float)
    last = t[-1] if len(t) else 0.0
    return np.append(t, max(end, last + 1e-12))


def elastic(label: QLabel) -> QLabel:
    """A one-line label that never widens its window: long text is cut at the edge instead (the full
    text stays in the tooltip). Readouts change as the cursor moves; the window must not."""
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    label.setMinimumWidth(10)
    return label


def release_plot(plot_widget: pg.PlotWidget) -> None:
    """Delete a plot now, detached from its parents, while the window around it is still whole.

    With PySide6 6.10 and pyqtgraph 0.14, a plot destroyed inside its window's destruction cascade (the
    window deleted, or collected by Python) crashed now and then in a layout destructor, even a bare
    ``PlotWidget``; the same plot detached and deleted before the window's destruction began never did.
    The results panel calls this for every plot when its window closes (``ResultsPanel.release``).

    The plot leaves its layout through ``layout_detach.detach_widget``, not a bare ``setParent(None)``: the
    timeline's plot sits in a nested layout whose item PySide had wrapped, and Qt deleting that item under
    the wrapper left a stale binding that a later ``PlotItem`` could be handed (see that module).
    """
    if shiboken6.isValid(plot_widget):
        detach_widget(plot_widget)
        shiboken6.delete(plot_widget)
