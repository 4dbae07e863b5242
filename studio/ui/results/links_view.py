"""Link utilisation over time: a list of links busiest first, and a step curve (in %) for each one selected.

The list is sorted by time-averaged utilisation (``metrics.busiest_links``) because the question an
architect brings is "which links are hot, and when"; the four busiest are shown on opening. A second
question is "which links does the expert all-to-all load, and which the data-parallel all-reduce": the
"Carrying" choice keeps only the links whose recorded traffic includes that category
(``model.link_carriage``, from the Gantt's link lanes), each link's tooltip gives its busy time by category,
and the chosen category's swatch stands beside the choice in the Gantt's colour.
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QItemSelection, QItemSelectionModel, Qt
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tilewright.engine.results.result import Result, Series
from tilewright.studio.model.core_grid import CoreUse
from tilewright.studio.model.gantt_data import elide, link_name, root_prefix
from tilewright.studio.model.link_carriage import LinkCarriage, link_carriage
from tilewright.studio.model.metrics import (
    busiest_links,
    link_data_note,
    series_value_at,
    time_span,
    window_average,
)
from tilewright.studio.model.palette import CATEGORY_COLOURS, CATEGORY_TIPS, category_label, series_colour
from tilewright.studio.model.traffic_rows import TrafficRow, no_ports_note, op_rows, port_rows, port_spread
from tilewright.studio.ui.results.link_list import LinkListModel, LinkListView, swatch
from tilewright.studio.ui.results.plot_style import (
    add_legend_row,
    elastic,
    fit_axis_label,
    make_plot,
    release_plot,
    step_edges,
)
from tilewright.studio.ui.results.time_cursor import CursorLine, TimeCursor
from tilewright.studio.units import SECONDS, format_percent, format_value

SHOWN_AT_FIRST = 4
LEGEND_CHARS = 40
# Curves named in the plot's own legend on screen (two rows of two): each further row took ~15 px from a
# data area that is ~35 px high at 1280 × 720, and seven links left none, the legend running into the
# readout. The list's swatches name every plotted curve; an exported figure's legend names them all.
LEGEND_ON_SCREEN = 4
WINDOWS = 200  # averaging windows per iteration: bursty links are read as load, not as 0/100 % spikes
ANY_TRAFFIC = "any traffic"
CARRYING_TIP = ("show only the links that carried this traffic (what the run recorded on the Gantt's link lanes, "
                "the busiest links of each collective); a link's tooltip gives its busy time by category")


class LinksView(QWidget):
    def __init__(self, cursor: TimeCursor, parent: QWidget | None = None):
        super().__init__(parent)
        self.cursor = cursor
        self.ranked: list[tuple[Series, float]] = []  # the links listed (those carrying the chosen category)
        self.all_ranked: list[tuple[Series, float]] = []
        self.carriage = LinkCarriage()
        self.result: Result | None = None
        self.span = 0.0
        self.root = ""
        self.curves: list[pg.PlotDataItem] = []
        self.heading = elastic(QLabel())
        self.model = LinkListModel(self.short)
        self.list = LinkListView()
        self.list.setModel(self.model)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        # A link's name ends in its far end ("→ …/dram@west[0]/ctrl"): at 1280 × 720 the list cut that end
        # off behind a scroll bar. Elided in the middle, both ends show (the tooltip has the whole name).
        self.list.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setWordWrap(False)
        self.list.setUniformItemSizes(True)  # one line each: a thousand links lay out without measuring each
        self.list.selectionModel().selectionChanged.connect(lambda _new, _old: self._replot())
        self.plot_widget = make_plot()
        self.plot = self.plot_widget.getPlotItem()
        self.plot.setLabel("bottom", "time", units="s")
        fit_axis_label(self.plot, "left", ["utilisation (%)", "util. (%)", "%"])
        self.plot.showGrid(x=True, y=True, alpha=0.15)
        self.plot.getViewBox().setMouseEnabled(y=False)
        self.legend = add_legend_row(self.plot, columns=2)
        self._no_sample = pg.PlotDataItem(pen=None)  # the legend's "+N more" line: no line of its own
        self.cursor_line = CursorLine(cursor, self.plot, self)
        self.readout = elastic(QLabel())
        self.readout.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.readout.setWordWrap(True)  # four links' names and values overrun 1280 px: a second line, not a cut
        self.shape = QComboBox()
        self.shape.addItems(["averaged", "exact steps"])
        self.shape.setToolTip("averaged: mean utilisation per window (bursts read as load); "
                              "exact: the engine's piecewise-constant series")
        self.shape.currentIndexChanged.connect(lambda _i: self._replot())
        self.carrying = QComboBox()
        self.carrying.setToolTip(CARRYING_TIP)
        self.carrying.currentIndexChanged.connect(lambda _i: self._fill_list())
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        carrying_row = QHBoxLayout()
        carrying_row.addWidget(QLabel("Carrying:"))
        carrying_row.addWidget(self.carrying, 1)
        left_layout.addLayout(carrying_row)
        # a wafer lists 1,264 links: finding die[0,0]'s, or the DRAM ports', meant scrolling through them
        self.name_filter = QLineEdit()
        self.name_filter.setPlaceholderText("filter by name, e.g. die[0,0] or dram")
        self.name_filter.setToolTip("list only the links whose name contains this text (any case)")
        self.name_filter.setClearButtonEnabled(True)
        self.name_filter.textChanged.connect(lambda _text: self._fill_list(self._selected_names()))
        left_layout.addWidget(self.name_filter)
        left_layout.addWidget(self.list, 1)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        shape_row = QHBoxLayout()
        shape_row.addWidget(QLabel("Curves:"))
        shape_row.addWidget(self.shape)
        self.window_note = QLabel()
        shape_row.addWidget(self.window_note)
        shape_row.addStretch(1)
        right_layout.addLayout(shape_row)
        right_layout.addWidget(self.plot_widget, 1)
        right_layout.addWidget(self.readout)
        splitter = self.curves_part = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(left)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([330, 1000])
        self.traffic = QTreeWidget()  # the chosen op's NoC multicast and DRAM bytes, the DRAM ports' load
        self.traffic.setHeaderLabels(["traffic", "bytes", "time / utilisation", "how"])
        self.traffic.setRootIsDecorated(True)
        self.traffic.setColumnWidth(0, 300)
        self.traffic.setColumnWidth(1, 230)
        self.traffic.setColumnWidth(2, 230)
        # one row under its header at least: its default minimum (70 px) made the Links tab 9 px taller than the
        # results dock of a 1024 × 640 window holds, and the window grew to 649 px around it
        row_px = self.traffic.fontMetrics().height() + 6
        frame_px = 2 * self.traffic.frameWidth()
        self.traffic.setMinimumHeight(self.traffic.header().sizeHint().height() + row_px + frame_px)
        self.op_use: CoreUse | None = None
        self.grid_shape: tuple[int, int] = (0, 0)
        self.ports: list[dict] = []
        outer = self.outer = QSplitter(Qt.Orientation.Vertical)
        outer.addWidget(splitter)
        outer.addWidget(self.traffic)
        outer.setStretchFactor(0, 3)
        outer.setStretchFactor(1, 1)
        outer.setSizes([600, 200])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.addWidget(self.heading)  # above both parts: it also says why a run has no link curves
        layout.addWidget(outer)
        cursor.moved.connect(self._update_readout)
        self.set_result(None)

    def release(self) -> None:
        """The window is closing: delete the plot while everything is whole."""
        self.cursor_line.detach()
        self.cursor.moved.disconnect(self._update_readout)
        release_plot(self.plot_widget)

    def export_title(self) -> str:
        shape = f"averaged over {self.window_note.text()[5:]}" if self.averaged else "exact"
        carrying = f" carrying {category_label(self.category)}" if self.category else ""
        named = f" named “{self.needle}”" if self.needle else ""
        return (f"Link utilisation ({shape}) of the {len(self.selected())} selected of {len(self.ranked)} links"
                f"{carrying}{named}")

    def set_result(self, result: Result | None, ranked: list[tuple[Series, float]] | None = None,
                   carriage: LinkCarriage | None = None) -> None:
        """Show ``result``'s links; ``ranked`` (busiest first) and ``carriage`` may come precomputed from the
        worker. A run following another (a re-run after an edit) keeps the "Carrying" choice and the links
        selected, where the new run has them: the architect compares the same links, not the new top four."""
        kept = (self.category, self._selected_names()) if self.result is not None else None
        self.result = result
        if result is None:  # another project's links, if any, come next: the filter does not carry over
            self.name_filter.blockSignals(True)
            self.name_filter.clear()
            self.name_filter.blockSignals(False)
        if result is None:
            self.all_ranked, self.carriage = [], LinkCarriage()
        else:
            self.all_ranked = ranked if ranked is not None else busiest_links(result)
            self.carriage = carriage if carriage is not None else link_carriage(result.timeline)
        self.span = time_span(result) if result is not None else 0.0
        self.root = root_prefix([s.name for s, _ in self.all_ranked])
        self.heading.setWordWrap(result is not None and not self.all_ranked)  # the reason, in full
        self._fill_carrying(kept[0] if kept is not None and result is not None else None)
        self.ports = list(result.dram_ports) if result is not None else []
        # no links: no empty plot squeezed to a sliver above the table; the table is the news
        self.curves_part.setVisible(result is None or bool(self.all_ranked))
        self.outer.setSizes([600, 200])
        self._fill_traffic()
        self._fill_list(kept[1] if kept is not None and result is not None else None)

    def _fill_carrying(self, keep: str | None = None) -> None:
        """The categories the run's links carried, most link-seconds first, each with its Gantt colour;
        ``keep`` stays chosen if the run carried it."""
        self.carrying.blockSignals(True)
        self.carrying.clear()
        self.carrying.addItem(ANY_TRAFFIC, None)
        for category in self.carriage.categories():
            self.carrying.addItem(swatch(CATEGORY_COLOURS.get(category, "#bab0ac")), category_label(category),
                                  category)
            tip = CATEGORY_TIPS.get(category)
            if tip:
                self.carrying.setItemData(self.carrying.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        self.carrying.setCurrentIndex(max(0, self.carrying.findData(keep)) if keep is not None else 0)
        self.carrying.setEnabled(self.carrying.count() > 2)  # one category: nothing to tell apart
        self.carrying.blockSignals(False)

    @property
    def category(self) -> str | None:
        """The category the list is narrowed to, or None for every link."""
        return self.carrying.currentData()

    @property
    def needle(self) -> str:
        """The text the links' names are filtered by ("" for none)."""
        return self.name_filter.text().strip()

    def _selected_names(self) -> set[str]:
        return {self.ranked[r][0].name for r in self.selected()}

    def _fill_list(self, keep: set[str] | None = None) -> None:
        """List the links carrying the chosen category whose names contain the filter's text; select those
        named in ``keep`` that are listed, or else the busiest ``SHOWN_AT_FIRST``."""
        category, needle = self.category, self.needle.lower()
        self.ranked = [(s, m) for s, m in self.all_ranked
                       if (category is None or self.carriage.carries(s.name, category))
                       and needle in s.name.lower()]
        selection = self.list.selectionModel()
        selection.blockSignals(True)
        self.model.set_rows(self.ranked, self.carriage, self.span)
        rows = [r for r, (s, _) in enumerate(self.ranked) if s.name in keep] if keep else []
        chosen = QItemSelection()
        for row in rows:
            chosen.select(self.model.index(row), self.model.index(row))
        if not rows and self.ranked:
            chosen.select(self.model.index(0), self.model.index(min(SHOWN_AT_FIRST, len(self.ranked)) - 1))
        if not chosen.isEmpty():
            selection.select(chosen, QItemSelectionModel.SelectionFlag.ClearAndSelect)
            if rows:
                self.list.scrollTo(self.model.index(rows[0]))  # the kept links in view, not the list's top
        selection.blockSignals(False)
        if self.result is None:
            self.heading.setText("No run yet.")
        elif not self.all_ranked:
            self.heading.setText(f"No link utilisation to plot — {link_data_note(self.result, detail=True)}.")
        elif category is None and not needle:
            self.heading.setText(f"<b>{len(self.ranked)} links</b>, busiest first (average utilisation)")
        else:
            which = [f"carried {category_label(category)}"] if category is not None else []
            which += [f"named “{html.escape(self.needle)}”"] if needle else []
            self.heading.setText(f"<b>{len(self.ranked)} of {len(self.all_ranked)} links</b> {' and '.join(which)}, "
                                 "busiest first (average utilisation"
                                 f"{' of all their traffic' if category is not None else ''})")
        if self.span > 0:
            self.plot.setXRange(0, self.span, padding=0.01)
        self._replot()

    def set_op(self, use: CoreUse | None, grid_shape: tuple[int, int] | None = None) -> None:
        """The op chosen on the canvas (a row of the run's spatial splits), or None; ``grid_shape`` is its
        device's grid of cores (rows, cols)."""
        self.op_use = use
        if grid_shape is not None:
            self.grid_shape = grid_shape
        self._fill_traffic()

    def _fill_traffic(self) -> None:
        self.traffic.clear()
        use = self.op_use
        if use is not None:
            title = f"op {use.label}: one op's traffic on the {self.grid_shape[0]} × {self.grid_shape[1]} core grid"
            self._add_group(title, op_rows(use))
        if self.ports:
            root = root_prefix([p["port"] for p in self.ports])
            self._add_group(f"DRAM ports over the run — {port_spread(self.ports)}",
                            port_rows(self.ports, self.span, root))
        elif self.span > 0:
            result = self.result
            note = QTreeWidgetItem([no_ports_note(result.engine if result is not None else "",
                                                  result.devices if result is not None else 0)])
            self.traffic.addTopLevelItem(note)
            note.setFirstColumnSpanned(True)
        self.traffic.setVisible(self.traffic.topLevelItemCount() > 0)

    def _add_group(self, title: str, rows: list[TrafficRow]) -> None:
        group = QTreeWidgetItem([title])
        group.setFirstColumnSpanned(True)
        self.traffic.addTopLevelItem(group)
        for row in rows:
            item = QTreeWidgetItem([row.what, row.amount, row.rate, row.note])
            for col in range(4):
                item.setToolTip(col, f"{row.what}: {row.amount} · {row.rate} · {row.note}")
            group.addChild(item)
        group.setFirstColumnSpanned(True)
        group.setExpanded(True)

    def short(self, name: str) -> str:
        return link_name(name.replace(self.root, "") if self.root else name)

    @property
    def averaged(self) -> bool:
        return self.shape.currentIndex() == 0

    def curve_data(self, series: Series) -> tuple[np.ndarray, np.ndarray | list[float]]:
        """Bin edges and values in % of one link, averaged or exact as chosen."""
        if self.averaged and self.span > 0:
            edges, means = window_average(series, self.span, WINDOWS)
            return edges, 100.0 * means
        return step_edges(series.times, self.span), [100.0 * v for v in series.values]

    def selected(self) -> list[int]:
        return sorted(index.row() for index in self.list.selectionModel().selectedRows())

    def _replot(self) -> None:
        for curve in self.curves:
            self.plot.removeItem(curve)
        self.curves = []
        self.legend.clear()
        icons: dict[int, QIcon] = {}
        top = 0.0
        for n, row in enumerate(self.selected()):
            series, _ = self.ranked[row]
            colour = series_colour(n)
            x, y = self.curve_data(series)
            curve = pg.PlotDataItem(x, y, stepMode="center", pen=pg.mkPen(colour, width=1.5))
            top = max(top, float(max(y, default=0.0)))
            self.plot.addItem(curve)
            self.curves.append(curve)
            icons[row] = swatch(colour)
        self._fill_legend(full=False)
        self.model.set_icons(icons)
        # Scale to what is shown (a 1 % load is a flat line on a 0–100 % axis); the axis says "%".
        self.plot.setYRange(0, min(100.0, max(1.0, 1.15 * top)), padding=0)
        window = format_value(self.span / WINDOWS, SECONDS) if self.span > 0 else ""
        self.window_note.setText(f"over {window} windows" if self.averaged and window else "")
        self._update_readout(self.cursor.position)

    def _fill_legend(self, full: bool) -> None:
        """Name the plotted curves in the legend: all of them (``full``), or, when there are more
        than ``LEGEND_ON_SCREEN``, the first few and a line saying how many more and where their colours are."""
        self.legend.clear()
        names = [self.short(self.ranked[row][0].name) for row in self.selected()]
        count = len(self.curves)
        shown = count if full or count <= LEGEND_ON_SCREEN else LEGEND_ON_SCREEN - 1
        for curve, name in zip(self.curves[:shown], names, strict=False):
            self.legend.addItem(curve, elide(name, LEGEND_CHARS))
        if shown < count:
            self.legend.addItem(self._no_sample, f"+{count - shown} more: colours in the list")

    @contextmanager
    def full_legend(self) -> Iterator[None]:
        """While an export renders the plot: a figure on its own names every curve (on screen the list's
        swatches do)."""
        self._fill_legend(full=True)
        try:
            yield
        finally:
            self._fill_legend(full=False)

    def value_at(self, series: Series, t: float) -> float:
        """What the curve shows at ``t``: the window's mean, or the exact value (a fraction)."""
        if self.averaged and self.span > 0:
            edges, means = window_average(series, self.span, WINDOWS)
            k = min(max(int(np.searchsorted(edges, t, side="right")) - 1, 0), len(means) - 1)
            return float(means[k])
        return series_value_at(series, t, self.span)

    def _update_readout(self, t: float) -> None:
        rows = self.selected()
        if not rows:
            self.readout.setText("Select links in the list to plot them (ctrl/shift-click for several)."
                                 if self.ranked else "")
            return
        shown = [self.ranked[r][0] for r in rows[:6]]
        parts = [f"{self.short(s.name)} {format_percent(self.value_at(s, t))}" for s in shown]
        more = f" (+{len(rows) - 6} more)" if len(rows) > 6 else ""
        where = f"in the window at {format_value(t, SECONDS)}" if self.averaged else f"at {format_value(t, SECONDS)}"
        self.readout.setText(f"{where}: " + " · ".join(parts) + more)
