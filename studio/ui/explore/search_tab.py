"""Parallelism search: rank every legal mapping of the project's model on its system; adopt one."""

from __future__ import annotations

from functools import partial

from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tilewright.engine.errors import InputError
from tilewright.engine.ir.project import Mode
from tilewright.engine.search.parallel.report import sharding_text
from tilewright.engine.search.parallel.search import SearchResult, search
from tilewright.engine.search.pareto import pareto_front
from tilewright.studio.document import ProjectDocument
from tilewright.studio.explore_commands import AdoptMapping
from tilewright.studio.ui.explore.controls import RunBar, input_row
from tilewright.studio.ui.explore.narrowing_row import NarrowingRow
from tilewright.studio.ui.explore.pareto_plot import ParetoPlot
from tilewright.studio.ui.explore.runner import ExploreRunner

# What each mapping achieves first, then the mapping: at 1280 × 720 the table shows about nine columns, and
# with the figures last the memory column (what decides whether a mapping fits) was off screen.
COLUMNS = ["iteration (s)", "event (s)", "samples/s", "memory (GiB)", "tp", "pp", "dp", "micro-batch", "chunks",
           "recompute", "SP", "ZeRO", "ep · cp · sharding"]
GIB = 2**30


class SearchTab(QWidget):
    def __init__(self, doc: ProjectDocument, parent: QWidget | None = None):
        super().__init__(parent)
        self.doc = doc
        self.runner = ExploreRunner(self)
        self.result: SearchResult | None = None
        self.devices = QSpinBox(maximum=1_000_000, minimum=1)
        self.batch = QSpinBox(maximum=10_000_000, minimum=1)
        self.top = QSpinBox(minimum=1, maximum=20, value=3)
        self.resimulate = QCheckBox("re-simulate the best with the event engine", checked=True)
        self.resimulate.setMinimumWidth(self.resimulate.sizeHint().width())
        # Narrowing is opt-in: the row shows (and applies) only while this box is ticked, so the tab keeps its
        # height in a small window and a hidden narrowing never silently shrinks the space.
        self.narrow_box = QCheckBox("narrow the second stage", checked=False)
        self.narrow_box.setToolTip("show and apply the second stage's narrowing (ep, cp, ZeRO, token exchange, "
                                   "offload, overlap), as tilewright search's --ep … --no-overlap; unticked: the "
                                   "default space")
        self.narrow_box.setMinimumWidth(self.narrow_box.sizeHint().width())
        form = input_row(("Devices", self.devices), ("Global batch (samples)", self.batch),
                         ("Keep best", self.top), ("", self.resimulate))
        self.narrowing = NarrowingRow()
        self.narrowing.setVisible(False)
        self.narrow_box.toggled.connect(self.narrowing.setVisible)
        self.bar = RunBar(self.runner, "Search")
        self.bar.layout().insertWidget(2, self.narrow_box)  # beside Search: the inputs' row keeps its width
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.plot = ParetoPlot()
        self.adopt = QPushButton("Use selected mapping")
        self.adopt.setEnabled(False)
        side = QHBoxLayout()
        side.addWidget(self.table, 3)
        side.addWidget(self.plot, 2)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.bar)
        layout.addWidget(self.narrowing)
        layout.addLayout(side, 1)
        layout.addWidget(self.adopt)
        self.bar.run_button.clicked.connect(self.start)
        self.runner.finished.connect(self.show_result)
        self.table.itemSelectionChanged.connect(lambda: self.adopt.setEnabled(bool(self.table.selectedItems())))
        self.adopt.clicked.connect(self.adopt_selected)
        self.plot.pointClicked.connect(self.table.selectRow)
        doc.projectReplaced.connect(self.reset_inputs)
        doc.changed.connect(self.allow_search)
        self.runner.runningChanged.connect(lambda _running: self.allow_search())
        self.reset_inputs()

    def allow_search(self) -> None:
        """Search ranks training mappings only (``engine.search.parallel.search`` refuses any other run
        mode): on an inference project the button is off and its tooltip says why, rather than a run
        that can only fail."""
        mode = self.doc.project.run.mode
        training = mode is Mode.train
        self.bar.run_button.setEnabled(training and not self.runner.running)
        why = (f"the search ranks training mappings; this project's run mode is '{mode.value}' "
               "(run.mode in the project file; a training project can be searched)")
        self.bar.run_button.setToolTip("rank every legal training mapping of the model on the devices"
                                       if training else why)
        if not training and not self.runner.running:  # one line at 1280 px; the tooltip says the rest
            self.bar.status.setText(f"search unavailable: it ranks training mappings; this project's run mode is "
                                    f"'{mode.value}'")
        elif self.bar.status.text().startswith("search unavailable"):
            self.bar.status.setText("")

    def reset_inputs(self) -> None:
        m = self.doc.project.mapping
        self.devices.setValue(m.devices)
        self.batch.setValue(m.global_batch)
        self.allow_search()

    def start(self) -> None:
        project = self.doc.project.model_copy(deep=True)
        devices, batch, top = self.devices.value(), self.batch.value(), self.top.value()
        again = self.resimulate.isChecked()
        try:
            narrow = self.narrowing.narrow() if self.narrow_box.isChecked() else {}
        except InputError as exc:  # shown where the run's status goes, as the sweep tab shows a bad spec
            self.bar.status.setText(str(exc))
            return
        self.runner.run(partial(search, project, devices, batch, top=top, resimulate=again, narrow=narrow))

    def show_result(self, result: SearchResult, seconds: float) -> None:
        self.result = result
        self.bar.status.setText(
            f"{result.evaluated:,} evaluated, {result.feasible:,} fit in memory, best "
            f"{result.ranked[0].iteration_time_s:.3f} s per iteration — {seconds:.1f} s"
            if result.ranked else "no mapping fits in memory"
        )
        self.table.setRowCount(len(result.ranked))
        points = []
        for row, r in enumerate(result.ranked):
            c = r.candidate
            samples = result.global_batch / r.iteration_time_s
            event = f"{r.event.iteration_time_s:.3f}" if r.event is not None else "–"
            values = [f"{r.iteration_time_s:.3f}", event, f"{samples:.1f}", f"{r.peak_memory_bytes / GIB:.1f}", c.tp,
                      c.pp, c.dp, c.micro_batch, c.interleave, c.recompute.value,
                      "yes" if c.sequence_parallel else "no", c.zero, sharding_text(c)]
            for col, value in enumerate(values):
                self.table.setItem(row, col, QTableWidgetItem(str(value)))
            points.append({"memory": r.peak_memory_bytes / GIB, "samples": samples})
        self.table.resizeColumnsToContents()
        front = pareto_front(points, [("memory", "min"), ("samples", "max")])
        self.plot.show_points([p["memory"] for p in points], [p["samples"] for p in points], front,
                              ("peak memory", "GiB"), ("throughput", "samples/s"))

    def adopt_selected(self) -> None:
        rows = {i.row() for i in self.table.selectedItems()}
        if not rows or self.result is None:
            return
        ranked = self.result.ranked[min(rows)]
        mapping = ranked.candidate.mapping(self.result.global_batch, self.doc.project.mapping)
        self.doc.push(AdoptMapping(self.doc, mapping))
