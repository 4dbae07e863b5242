"""The results dock: a headline (or, while a run goes, its progress and Cancel) above tabs for the summary,
the Gantt, link utilisation, memory occupancy and the comparison of recent runs.

The result's notes (``Result.notes``: a framework era's default the engine assumed, say "pipeline sends block
their stage (Megatron-LM v2.x-v3.0, read from full recompute on GPUs)") close the Summary, whose tab then carries
an information icon and a tooltip counting them, so a run whose numbers rest on an assumption says so even while
the Timeline is in front.

Every view is fed the same ``RunRecord`` (prepared on the worker) and follows one ``TimeCursor``, which
the main window owns so the canvas can follow it too.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import (
    QDockWidget,
    QLabel,
    QMainWindow,
    QScrollArea,
    QSizePolicy,
    QStackedWidget,
    QStyle,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)
from tilewright.engine.results.result import Result
from tilewright.studio.model.metrics import time_span
from tilewright.studio.model.run_record import RunRecord
from tilewright.studio.ui.results.breakdown_bar import BreakdownBar
from tilewright.studio.ui.results.compare_view import CompareView
from tilewright.studio.ui.results.flow_layout import FlowLayout
from tilewright.studio.ui.results.gantt import GanttView
from tilewright.studio.ui.results.headline_label import HeadlineLabel
from tilewright.studio.ui.results.history import RunHistory
from tilewright.studio.ui.results.links_view import LinksView
from tilewright.studio.ui.results.memory_view import MemoryView
from tilewright.studio.ui.results.progress import RunProgress
from tilewright.studio.ui.results.summary import (
    RUN_TITLE,
    SPLITS_TITLE,
    format_metric,
    headline,
    in_columns,
    notes_html,
    result_tables,
    split_rows,
    table_html,
)
from tilewright.studio.ui.results.time_cursor import TimeCursor
from tilewright.studio.units import SECONDS, format_value

__all__ = ["PLACEHOLDER", "ResultsPanel", "format_metric", "result_tables"]

PLACEHOLDER = "No run yet. Press F5 (Run ▸ Run) to simulate this project."
NOTES_TIP = "{n} note{s} on what the engine assumed: see the end of the Summary"
ROOM_PX = 430  # height the dock grows to when the first result arrives, so the Gantt is readable
ROOM_SHARE = 0.4  # ...but no more than this share of the window's height: the canvas keeps the most
BREATH_MS = 20  # between two hidden views' updates: time for paints, input and timers


class ResultsPanel(QWidget):
    def __init__(self, cursor: TimeCursor | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.cursor = cursor or TimeCursor(self)
        self.history = RunHistory(parent=self)
        self.record: RunRecord | None = None
        self.released = False
        self._pending: list[Callable[[], None]] = []
        # one timer for the queued fills: a run ending while another's fills are queued restarts it, not a second
        self._fill_timer = QTimer(self)
        self._fill_timer.setSingleShot(True)
        self._fill_timer.setInterval(BREATH_MS)
        self._fill_timer.timeout.connect(self._update_next)
        self._seen_result = False
        self.headline = HeadlineLabel()
        self.headline.setTextFormat(Qt.TextFormat.RichText)
        self.headline.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.progress = RunProgress()
        self.header = QStackedWidget()
        self.header.addWidget(self.headline)
        self.header.addWidget(self.progress)
        self.header.setFixedHeight(max(self.progress.sizeHint().height(), 26))
        self.tabs = QTabWidget(self)
        self.tabs.setDocumentMode(True)
        self._build_summary()
        self.gantt = GanttView(self.cursor)
        self.links = LinksView(self.cursor)
        self.memory = MemoryView(self.cursor)
        self.compare = CompareView(self.history)
        self.tabs.addTab(self.gantt, "Timeline")
        self.tabs.addTab(self.links, "Links")
        self.tabs.addTab(self.memory, "Memory")
        self.tabs.addTab(self.compare, "Runs")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 2, 6, 0)
        layout.setSpacing(2)
        layout.addWidget(self.header)
        layout.addWidget(self.tabs, 1)
        self.labels: list[QLabel] = []
        self.show_message(PLACEHOLDER)

    def _build_summary(self) -> None:
        self.summary = QWidget()
        outer = QVBoxLayout(self.summary)
        outer.setContentsMargins(8, 6, 8, 6)
        self.breakdown = BreakdownBar()
        self.breakdown.setVisible(False)
        outer.addWidget(self.breakdown)
        # the tables wrap like words, never wider than the dock: at 1280 × 720 (a projector) the summary
        # scrolls down, never sideways (the single-message label wraps its text instead)
        self._columns = FlowLayout(h_spacing=28, v_spacing=8)
        outer.addLayout(self._columns)
        self.splits = QLabel()  # full width under the columns: one op's split is a long line
        self.splits.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.splits.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.splits.setWordWrap(True)
        self.splits.setVisible(False)
        outer.addWidget(self.splits)
        self.notes = QLabel()  # full width too: each note is a sentence or two
        self.notes.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.notes.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.notes.setWordWrap(True)
        self.notes.setVisible(False)
        outer.addWidget(self.notes)
        outer.addStretch(1)
        scroll = QScrollArea(self)
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.summary)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.summary_tab = self.tabs.addTab(scroll, "Summary")

    # -- wiring --------------------------------------------------------------------------------------
    def add_view(self, widget: QWidget, title: str) -> None:
        """Seam for further result views."""
        self.tabs.addTab(widget, title)

    def follow(self, runner: Any) -> None:
        """Show ``runner``'s progress and prepared results; Cancel in the header cancels it."""
        runner.progress.connect(self.show_progress)
        runner.recorded.connect(self.show_record)
        runner.runningChanged.connect(self._running)
        self.progress.cancelRequested.connect(self.progress.cancelling)
        self.progress.cancelRequested.connect(runner.cancel)

    def release(self) -> None:
        """Delete the plots now; the main window calls this when it closes for good (see
        ``plot_style.release_plot`` for why). The panel then shows no more results."""
        if self.released:
            return
        self.released = True
        self._pending = []  # the views' fills still queued: they go with the plots
        self._fill_timer.stop()
        for view in (self.gantt, self.links, self.memory):
            view.release()
            self.tabs.removeTab(self.tabs.indexOf(view))

    def plots(self) -> dict[str, Any]:
        """The pyqtgraph plots by file stem, for exports (filled with the latest run first)."""
        self.flush()
        return {"timeline": self.gantt.plot_widget, "links": self.links.plot_widget,
                "memory": self.memory.plot_widget}

    def plot_views(self) -> dict[str, Any]:
        """The views behind ``plots()``: each has ``plot_widget`` and ``export_title()``."""
        self.flush()
        return {"timeline": self.gantt, "links": self.links, "memory": self.memory}

    # -- summary text --------------------------------------------------------------------------------
    def text(self) -> str:
        shown = [self.headline, *self.labels] + [label for label in (self.splits, self.notes)
                                                 if label.isVisibleTo(self)]
        return "\n".join(label.text() for label in shown)

    def _set_columns(self, texts: list[str]) -> None:
        while self._columns.count():
            item = self._columns.takeAt(0)
            if item.widget() is not None:
                item.widget().hide()  # gone from view now, not only at the next event-loop turn
                item.widget().deleteLater()
        self.labels = []
        for text in texts:
            label = QLabel(text)
            label.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            if len(texts) > 1:  # a metric column is never cut: the flow puts it on the next line instead
                label.setMinimumWidth(label.sizeHint().width())
            else:  # a message: the whole width, wrapped
                label.setWordWrap(True)
                label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
            self._columns.addWidget(label)
            self.labels.append(label)

    # -- run states ----------------------------------------------------------------------------------
    def _running(self, running: bool) -> None:
        self.header.setCurrentWidget(self.progress if running else self.headline)
        if running:
            self.progress.start()

    def show_running(self) -> None:
        self._running(True)

    def show_progress(self, fraction: float, phase: str) -> None:
        self.header.setCurrentWidget(self.progress)
        self.progress.update_progress(fraction, phase)

    def show_result(self, result: Result, seconds: float) -> None:
        tables = result_tables(result)
        # in the Run table: an out-of-memory run puts its OUT OF MEMORY table first, and the studio's wall
        # time used to read as a row of it, under the device that overflowed
        run_rows = next(rows for title, rows in tables if title == RUN_TITLE)
        run_rows.append(("run took (studio)", format_value(seconds, SECONDS)))
        self._set_columns([table_html(title, rows) for title, rows in in_columns(tables)])
        splits = split_rows(result)
        self.splits.setText(table_html(SPLITS_TITLE, splits) if splits else "")
        self.splits.setVisible(bool(splits))
        self._show_notes(list(result.notes))
        self.breakdown.set_breakdown(result.metrics_json()["time_breakdown_s"])  # in the categories' order
        self.headline.setText(headline(result))
        name = result.project
        self.breakdown.title = (f"{name} — " if name else "") + "Time per iteration" + \
            f" ({format_value(result.iteration_time_s, SECONDS)}), by category"
        self.headline.setToolTip(self.headline.text().replace("<b>", "").replace("</b>", ""))

    def show_record(self, record: RunRecord) -> None:
        """A run finished: every view shows it, the history keeps it, the cursor spans it."""
        if self.released:
            return
        self.record = record
        self.history.add(record)
        result = record.result
        self.cursor.set_span(time_span(result))
        first = not self._seen_result
        self._seen_result = True
        if first and record.gantt is not None and len(record.gantt):
            self.tabs.setCurrentWidget(self.gantt)  # now: the summary's tables then lay out out of sight
        updates = {
            self.gantt: [lambda: self.gantt.set_data(record.gantt, legend=False), self.gantt.update_legend],
            self.links: [lambda: self.links.set_result(result, record.ranked_links, record.carriage)],
            self.memory: [lambda: self.memory.set_result(result, record.memory_order)],
        }
        shown = self.tabs.currentWidget()
        # Each in an event-loop turn of its own, after the headline and tables have painted: the dock grown
        # for the first result (the canvas beside it repaints), then what the user sees, then the rest (in
        # one turn they took 80–100 ms with a 60k-slice run on a slow machine; the timeline's bars and its
        # key, one turn each, still took 60–90 ms with the paint that follows).
        self._pending = [self._make_room] if first else []
        self._pending += updates.pop(shown) if shown in updates else []
        for steps in updates.values():
            self._pending += steps
        self._fill_timer.start()

    def _update_next(self) -> None:
        """The views, one per event-loop turn (the shown one first): each takes tens of milliseconds with a large run,
        and the window must keep answering in between."""
        if self._pending and not self.released:
            self._pending.pop(0)()
        if self._pending and not self.released:
            self._fill_timer.start()

    def flush(self) -> None:
        """Finish filling the views now (exports and scripts that read them right after a run)."""
        while self._pending and not self.released:
            self._pending.pop(0)()

    def forget_run(self) -> None:
        """Another project replaced the one that ran: its run's headline, timeline, links and memory no
        longer describe what the window shows, so every view goes back to "no run yet". The Runs tab keeps
        the history (comparing a run with one of another project is a fair question)."""
        if self.released:
            return
        self.record = None
        self._pending = []  # fills of the old run still queued
        self._fill_timer.stop()
        self.gantt.set_data(None)
        self.links.set_result(None)
        self.links.set_op(None)
        self.memory.set_result(None)
        self.cursor.set_span(0.0)
        self.show_message(PLACEHOLDER)

    def show_message(self, text: str) -> None:
        self.header.setCurrentWidget(self.headline)
        first, *rest = text.splitlines() or [""]
        # one line in the headline; every line (a refused run's problems, one a line) in the body below
        self.headline.setText(f"<span style='color:#7b241c'>{html.escape(first)}{' …' if rest else ''}</span>"
                              if text != PLACEHOLDER else "")
        self.breakdown.setVisible(False)
        self.splits.setVisible(False)
        self._show_notes([])
        self._set_columns(["<br>".join(html.escape(line) for line in text.splitlines())])
        self.tabs.setCurrentIndex(0)

    def _show_notes(self, notes: list[str]) -> None:
        """The notes under the summary's tables, and the Summary tab marked while there are any."""
        self.notes.setText(notes_html(notes) if notes else "")
        self.notes.setVisible(bool(notes))
        icon = self.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxInformation) if notes else QIcon()
        self.tabs.setTabIcon(self.summary_tab, icon)
        self.tabs.setTabToolTip(self.summary_tab, NOTES_TIP.format(n=len(notes), s="s" * (len(notes) != 1))
                                if notes else "")

    def _make_room(self) -> None:
        """Once, when the first result arrives: grow the results dock so the Gantt has rows to show —
        up to ``ROOM_PX``, and less in a small window (at 1280 × 720 the canvas would keep ~130 px)."""
        dock, window = self.parentWidget(), self.window()
        if not isinstance(dock, QDockWidget) or not isinstance(window, QMainWindow):
            return
        room = min(ROOM_PX, int(ROOM_SHARE * window.height()))
        if dock.height() < room:
            window.resizeDocks([dock], [room], Qt.Orientation.Vertical)
