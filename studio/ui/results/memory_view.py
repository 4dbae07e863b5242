"""Memory occupancy over time of one device: a stack by category (weights at the bottom), the capacity as a
dashed line, and any overflow shaded red and labelled with how much is missing.

Devices are listed fullest first (relative to capacity), so the one that ran out of memory, or comes
closest, opens first. Sizes are shown in GiB: capacities are binary (80 GiB HBM is 85.9 GB).
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget
from tilewright.engine.results import MEMORY_CATEGORIES
from tilewright.engine.results.result import MemoryTrack, Result
from tilewright.studio.model.gantt_data import root_prefix
from tilewright.studio.model.metrics import fullest_first, time_span
from tilewright.studio.model.palette import MEMORY_COLOURS
from tilewright.studio.model.residency_rows import HEADER, level_rows, setting_text, stage_of
from tilewright.studio.ui.results.plot_style import (
    add_legend_row,
    elastic,
    fit_axis_label,
    make_plot,
    release_plot,
    set_legend,
    step_edges,
)
from tilewright.studio.ui.results.summary import format_bytes as gib
from tilewright.studio.ui.results.time_cursor import CursorLine, TimeCursor
from tilewright.studio.units import SECONDS, format_value, share_of_capacity

GIB = 2.0**30
OVERFLOW = "#c0392b"
CHOOSER_CHARS = (30, 80)  # the device chooser's width, in characters: at least, at most


def stacked(track: MemoryTrack) -> list[tuple[str, np.ndarray]]:
    """Cumulative occupancy (bytes) per category, bottom to top, categories that stay empty left out."""
    total = np.zeros(len(track.times))
    out = []
    for cat in [*MEMORY_CATEGORIES, *sorted(set(track.by_category) - set(MEMORY_CATEGORIES))]:
        values = np.asarray(track.by_category.get(cat, []), dtype=float)
        if len(values) != len(total) or not values.any():
            continue
        total = total + values
        out.append((cat, total.copy()))
    return out


class MemoryView(QWidget):
    def __init__(self, cursor: TimeCursor, parent: QWidget | None = None):
        super().__init__(parent)
        self.cursor = cursor
        self.result: Result | None = None
        self.tracks: list[MemoryTrack] = []
        self.peaks: dict[int, float] = {}
        self.track: MemoryTrack | None = None
        self.span = 0.0
        self.root = ""
        self.items: list[pg.GraphicsObject] = []
        self.device = QComboBox()
        self.device.setMinimumContentsLength(CHOOSER_CHARS[0])
        self.device.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.device.currentIndexChanged.connect(self._show_track)
        self.heading = elastic(QLabel())
        self.plot_widget = make_plot()
        self.plot = self.plot_widget.getPlotItem()
        self.plot.setLabel("bottom", "time", units="s")
        fit_axis_label(self.plot, "left", ["occupancy (GiB)", "GiB"])
        self.plot.showGrid(x=True, y=True, alpha=0.15)
        self.plot.getViewBox().setMouseEnabled(y=False)
        self.legend = add_legend_row(self.plot)
        self.cursor_line = CursorLine(cursor, self.plot, self)
        self.readout = elastic(QLabel())
        self.readout.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        top = QHBoxLayout()
        top.addWidget(QLabel("Device:"))
        top.addWidget(self.device)
        top.addSpacing(12)
        top.addWidget(self.heading, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.setSpacing(2)
        layout.addLayout(top)
        self.setting = elastic(QLabel())  # mapping.memory_levels as set, or that it is not
        self.setting.setWordWrap(True)
        self.residency = QTreeWidget()  # per memory level of the device: capacity and bytes per category
        self.residency.setHeaderLabels(HEADER)
        self.residency.setRootIsDecorated(False)
        self.residency.setToolTip("residency per memory level of this device: each category's peak bytes there")
        layout.addWidget(self.setting)
        layout.addWidget(self.residency)
        layout.addWidget(self.plot_widget, 1)
        layout.addWidget(self.readout)
        cursor.moved.connect(self._update_readout)
        self.set_result(None)

    def release(self) -> None:
        """The window is closing: delete the plot while everything is whole."""
        self.cursor_line.detach()
        self.cursor.moved.disconnect(self._update_readout)
        release_plot(self.plot_widget)

    def export_title(self) -> str:
        if self.track is None:
            return "Memory occupancy"
        return f"Memory occupancy of {self.track.device} — {self.heading.text().split(' — ')[0]}"

    def set_result(self, result: Result | None, order: list[tuple[MemoryTrack, float]] | None = None) -> None:
        """Show ``result``'s memory tracks; ``order`` ((track, peak), fullest first) may come from the worker."""
        self.result = result
        if order is None:
            order = fullest_first(list(result.memory)) if result is not None else []
        self.tracks = [tr for tr, _ in order]
        self.peaks = {id(tr): peak for tr, peak in order}
        self.span = time_span(result) if result is not None else 0.0
        self.root = root_prefix([tr.device for tr in self.tracks])
        self.device.blockSignals(True)
        self.device.clear()
        for tr in self.tracks:
            peak = self.peaks[id(tr)]
            share = share_of_capacity(peak, tr.capacity_bytes)
            self.device.addItem(f"{self.short(tr.device)} · peak {gib(peak)} ({share})")
            tip = f"{tr.device} · peak {gib(peak)} ({share})"  # the whole node id, whatever the width
            self.device.setItemData(self.device.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        self._fit_device_chooser()
        self.device.blockSignals(False)
        self.device.setEnabled(bool(self.tracks))
        self._show_track(0 if self.tracks else -1)

    def _fit_device_chooser(self) -> None:
        """As wide as its longest entry, within ``CHOOSER_CHARS``: at a fixed 30 characters the chooser cut
        "node[0]/gpu[0] · peak 59.9 GiB (74.9 % of capacity)" to "… (74.9 % of c". The upper bound keeps
        a deep node id from widening the window; such an entry's tooltip has it whole."""
        fm = self.device.fontMetrics()
        need = max((fm.horizontalAdvance(self.device.itemText(i)) for i in range(self.device.count())), default=0)
        chars = math.ceil(need / max(fm.horizontalAdvance("x"), 1)) + 1
        self.device.setMinimumContentsLength(min(max(chars, CHOOSER_CHARS[0]), CHOOSER_CHARS[1]))

    def short(self, device: str) -> str:
        return device.replace(self.root, "") if self.root else device

    def select_device(self, device: str) -> bool:
        """Show ``device`` (a node id), e.g. when the canvas asks; False if it has no memory track."""
        for i, tr in enumerate(self.tracks):
            if tr.device == device:
                self.device.setCurrentIndex(i)
                return True
        return False

    def _clear(self) -> None:
        for item in self.items:
            self.plot.removeItem(item)
        self.items = []
        set_legend(self.legend, [])

    def _add(self, item: pg.GraphicsObject) -> None:
        self.plot.addItem(item)
        self.items.append(item)

    def _show_residency(self) -> None:
        """The levels of the shown device's stage: one row each, capacity and peak bytes per category."""
        self.residency.clear()
        row = stage_of(self.result, self.track.device) if self.result and self.track else None
        self.setting.setVisible(row is not None)
        self.residency.setVisible(row is not None)
        if row is None:
            return
        self.setting.setText(f"<b>Residency of {self.short(str(row['device']))}</b> (stage {row['stage']}) — "
                             f"{setting_text(row)}")
        for level in level_rows(self.result, row):
            self.residency.addTopLevelItem(QTreeWidgetItem(level.cells()))
        for col in range(len(HEADER)):
            self.residency.resizeColumnToContents(col)
        rows = self.residency.topLevelItemCount()
        line = self.residency.sizeHintForRow(0) if rows else 18
        self.residency.setFixedHeight(self.residency.header().sizeHint().height() + line * rows + 6)

    def _show_track(self, index: int) -> None:
        self._clear()
        self.track = self.tracks[index] if 0 <= index < len(self.tracks) else None
        self._show_residency()
        if self.track is None:
            self.heading.setText("No run yet." if self.span == 0 else "This run reports no memory occupancy.")
            self.readout.setText("")
            return
        tr = self.track
        edges = step_edges(tr.times, self.span)
        layers = stacked(tr)
        for z, (cat, top) in enumerate(reversed(layers)):  # tallest first, so smaller stacks paint over it
            colour = MEMORY_COLOURS.get(cat, "#888888")
            curve = pg.PlotDataItem(edges, top / GIB, stepMode="center", fillLevel=0, brush=colour,
                                    pen=pg.mkPen(pg.mkColor(colour).darker(130), width=1))
            curve.setZValue(z - len(layers))
            self._add(curve)
        set_legend(self.legend, [(cat, MEMORY_COLOURS.get(cat, "#888888")) for cat, _ in layers])
        peak = float(layers[-1][1].max()) if layers else 0.0
        capacity = tr.capacity_bytes
        if capacity > 0:
            pen = pg.mkPen("#2c3e50", width=2, style=Qt.PenStyle.DashLine)
            # The label goes on the roomier side of the line: above it a line near the top (the usual case,
            # occupancy under capacity) left the label a few pixels and it was cut to a row of dots.
            below = capacity >= 0.5 * max(peak, capacity)
            anchor = (0, 0) if below else (0, 1)
            line = pg.InfiniteLine(capacity / GIB, angle=0, pen=pen,
                                   label=f"capacity {gib(capacity)}", labelOpts={
                                       "position": 0.08, "color": "#2c3e50", "fill": (255, 255, 255, 200),
                                       "anchors": [anchor, anchor]})
            line.setZValue(20)
            self._add(line)
        over = capacity > 0 and peak > capacity
        if over:
            region = pg.LinearRegionItem((capacity / GIB, peak / GIB), orientation="horizontal", movable=False,
                                         brush=pg.mkBrush(192, 57, 43, 40), pen=pg.mkPen(OVERFLOW))
            region.setZValue(10)
            self._add(region)
            # at the right end: at the left the time cursor's "0 s" covered its first letters
            label = pg.TextItem(f"OVERFLOW: needs {gib(peak)}, has {gib(capacity)} "
                                f"({gib(peak - capacity)} too much)", color=OVERFLOW, anchor=(1, 0),
                                fill=pg.mkBrush(255, 255, 255, 210))
            label.setPos(self.span, peak / GIB)
            label.setZValue(30)
            self._add(label)
        top = max(peak, capacity) / GIB
        self.plot.setYRange(0, top * 1.08 if top > 0 else 1.0, padding=0)
        self.plot.setXRange(0, self.span, padding=0.01)
        state = f"<span style='color:{OVERFLOW}'><b>does not fit</b></span>" if over else "fits"
        self.heading.setText(f"peak {gib(peak)} of {gib(capacity)} — {state}")
        self.heading.setToolTip(tr.device)
        self._update_readout(self.cursor.position)

    def _update_readout(self, t: float) -> None:
        tr = self.track
        if tr is None:
            return
        k = int(np.searchsorted(np.asarray(tr.times, float), t, side="right")) - 1
        parts = {cat: (vals[k] if k >= 0 else 0.0) for cat, vals in tr.by_category.items()}
        total = sum(parts.values())
        share = f" ({share_of_capacity(total, tr.capacity_bytes)})" if tr.capacity_bytes else ""
        detail = ", ".join(f"{cat.replace('_', ' ')} {gib(v)}" for cat, v in parts.items() if v > 0)
        self.readout.setText(f"at {format_value(t, SECONDS)}: {gib(total)}{share}" + (f" — {detail}" if detail else ""))

