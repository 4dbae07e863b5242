"""The serving window (Run ▸ Serve…): settings on the left, Serve and a progress strip with Cancel, and
the views of the last serving run — latency and goodput against rate, KV occupancy, the request
timeline and the metrics table. A sweep's per-run views follow the rate chosen above them (the best
rate first).

The simulation runs on a worker (``studio.serving_controller``); closing the window cancels it. The
plots are deleted before the window is (``plot_style.release_plot`` says why), also when the main
window that owns this one goes first.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QCloseEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)
from tilewright.engine.ir.project import Project
from tilewright.engine.serving import GOODPUT_TARGET
from tilewright.studio.model.serving_data import ServingView
from tilewright.studio.serving_controller import ServingController
from tilewright.studio.ui.results.plot_style import release_plot
from tilewright.studio.ui.results.progress import RunProgress
from tilewright.studio.ui.serving.metrics_table import MetricsTable
from tilewright.studio.ui.serving.plots import KVPlot, LatencyPlots, TimelinePlot
from tilewright.studio.ui.serving.settings_form import ServingForm
from tilewright.studio.units import SECONDS, format_value


class ServingWindow(QWidget):
    def __init__(
        self, project: Callable[[], Project], parent: QWidget | None = None, controller: ServingController | None = None
    ):
        super().__init__(parent)
        self.setWindowFlag(Qt.WindowType.Window)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setAttribute(Qt.WidgetAttribute.WA_QuitOnClose, False)
        self.project = project  # read when Serve is pressed: the project as it is then
        self.controller = controller or ServingController(self)
        if self.controller.parent() is None:
            self.controller.setParent(self)
        self.view: ServingView | None = None
        self.released = False
        first = project()
        self.setWindowTitle(f"Serving — {first.name} — Tilewright Studio")
        self.form = ServingForm(devices=first.mapping.devices)
        self.serve_button = QPushButton("Serve")
        self.serve_button.setToolTip("simulate serving with these settings (F5)")
        self.serve_button.clicked.connect(self.serve)
        QShortcut(QKeySequence("F5"), self, self.serve)
        QShortcut(QKeySequence("Shift+F5"), self, self.cancel)
        self.progress = RunProgress()
        self.progress.hide()
        self.progress.cancelRequested.connect(self.cancel)
        self.message = QLabel("Choose the settings and press Serve.")
        self.message.setWordWrap(True)
        self.rate_choice = QComboBox()
        self.rate_choice.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.rate_choice.setToolTip("the simulation the KV, timeline and metrics views show")
        self.rate_choice.currentIndexChanged.connect(self._show_run)
        self.latency = LatencyPlots()
        self.kv = KVPlot()
        self.timeline = TimelinePlot()
        self.table = MetricsTable()
        self._layout()
        self.controller.started.connect(self._started)
        self.controller.progress.connect(self.progress.update_progress)
        self.controller.finished.connect(self.show_view)
        self.controller.failed.connect(lambda m: self.message.setText(f"The serving run failed: {m}"))
        self.controller.cancelled.connect(lambda: self.message.setText("Serving run cancelled."))
        self.controller.runningChanged.connect(self._running)
        if parent is not None:
            parent.installEventFilter(self)
        app = QApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.release)

    def _layout(self) -> None:
        form_scroll = QScrollArea()
        form_scroll.setWidgetResizable(True)
        form_scroll.setWidget(self.form)
        form_scroll.setMinimumWidth(330)
        left = QWidget()
        lv = QVBoxLayout(left)
        lv.setContentsMargins(0, 0, 0, 0)
        lv.addWidget(form_scroll, 1)
        lv.addWidget(self.serve_button)
        choice_row = QHBoxLayout()
        choice_row.addWidget(self.message, 1)
        choice_row.addWidget(QLabel("Showing"))
        choice_row.addWidget(self.rate_choice)
        top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(self.latency)
        top.addWidget(self.kv)
        bottom = QSplitter(Qt.Orientation.Horizontal)
        bottom.addWidget(self.timeline)
        bottom.addWidget(self.table)
        top.setSizes([650, 400])
        bottom.setSizes([600, 450])  # the table needs room for its values and their units
        views = QSplitter(Qt.Orientation.Vertical)
        views.addWidget(top)
        views.addWidget(bottom)
        views.setSizes([500, 500])
        right = QWidget()
        rv = QVBoxLayout(right)
        rv.setContentsMargins(0, 0, 0, 0)
        rv.addLayout(choice_row)
        rv.addWidget(views, 1)
        rv.addWidget(self.progress)
        main = QSplitter(Qt.Orientation.Horizontal)
        main.addWidget(left)
        main.addWidget(right)
        main.setSizes([340, 1200])
        box = QHBoxLayout(self)
        box.setContentsMargins(6, 6, 6, 6)
        box.addWidget(main)
        self.resize(1500, 950)

    # -- running ------------------------------------------------------------------------------------
    def serve(self) -> bool:
        """Start a serving run with the form's settings; refused while one runs or a setting is wrong."""
        if self.controller.running or self.released:
            return False
        request = self.form.request()
        if request is None:
            self.message.setText("Not started: a setting is wrong (see under the settings).")
            return False
        return self.controller.run(self.project(), request)

    def cancel(self) -> None:
        if self.controller.running:
            self.progress.cancelling()
            self.controller.cancel()

    def _started(self) -> None:
        self.progress.start()
        self.progress.show()
        self.message.setText("Serving…")

    def _running(self, running: bool) -> None:
        self.serve_button.setEnabled(not running)
        self.form.setEnabled(not running)
        if not running:
            self.progress.hide()

    # -- showing ------------------------------------------------------------------------------------
    def show_view(self, view: ServingView, seconds: float) -> None:
        if self.released:
            return
        self.view = view
        self.latency.show_curves(view.latency, GOODPUT_TARGET)
        self.rate_choice.blockSignals(True)
        self.rate_choice.clear()
        best = view.latency.best_rate
        for run in view.runs:
            self.rate_choice.addItem(run.label + (" (best)" if best is not None and run.rate == best else ""))
        self.rate_choice.setCurrentIndex(view.chosen)
        self.rate_choice.blockSignals(False)
        self.rate_choice.setEnabled(view.is_sweep)
        self._show_run(view.chosen)
        n = sum(len(r.result.records) for r in view.runs)
        best_text = (
            f"highest rate meeting the SLO: {self.rate_choice.itemText(view.chosen)}"
            if best is not None
            else "no rate meets the SLO"
            if view.latency.slo != {"ttft_s": None, "tpot_s": None}
            else "no SLO set"
        )
        self.message.setText(
            f"{view.project}: {n} requests over {len(view.runs)} simulation(s) in "
            f"{format_value(seconds, SECONDS)}; {best_text}."
        )
        self.message.setToolTip("\n".join(view.notes))

    def _show_run(self, index: int) -> None:
        if self.view is None or not 0 <= index < len(self.view.runs):
            return
        run = self.view.runs[index]
        self.kv.show_curves(run.kv)
        self.timeline.show_bars(run.timeline)
        self.table.show_rows(run.rows)

    # -- lifetime -----------------------------------------------------------------------------------
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        """The main window is about to be deleted: stop the run and delete the plots first."""
        if event.type() == QEvent.Type.DeferredDelete and watched is self.parent():
            self.release()
        return False

    def release(self) -> None:
        """Cancel the run and delete the plots now, while the window is whole (idempotent)."""
        if self.released:
            return
        self.released = True
        self.controller.cancel()
        app = QApplication.instance()
        if app is not None:
            app.aboutToQuit.disconnect(self.release)
        for plot in (self.latency, self.kv, self.timeline):
            release_plot(plot)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802
        self.release()
        event.accept()
