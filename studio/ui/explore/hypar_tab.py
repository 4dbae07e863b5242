"""HyPar (Song et al., HPCA 2019): the per-layer data/model parallel choice that minimises
communication for an accelerator array, shown per layer and level, applied to the mapping in one click."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QComboBox,
    QLabel,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tilewright.engine.search.hypar.partition import Partition, hypar, hypar_layers, uniform
from tilewright.engine.search.hypar.report import apply_partition
from tilewright.engine.workloads import build_workload
from tilewright.studio.document import ProjectDocument
from tilewright.studio.explore_commands import AdoptMapping
from tilewright.studio.ui.explore.controls import input_row

GB = 1e9


class HyparTab(QWidget):
    def __init__(self, doc: ProjectDocument, parent: QWidget | None = None):
        super().__init__(parent)
        self.doc = doc
        self.partition: Partition | None = None
        self.accelerators = QComboBox()
        self.accelerators.addItems([str(2**k) for k in range(1, 11)])
        self.batch = QSpinBox(minimum=1, maximum=1_000_000)
        self.dtype = QComboBox()
        self.dtype.addItems(["fp32", "bf16", "fp16", "fp8"])
        self.compute = QPushButton("Partition")
        form = input_row(("Accelerators", self.accelerators), ("Batch (samples)", self.batch),
                         ("Data type", self.dtype), ("", self.compute))
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.table = QTableWidget(0, 0)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.apply = QPushButton("Apply top-level choices to the mapping")
        self.apply.setEnabled(False)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.summary)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.apply)
        self.compute.clicked.connect(self.run)
        self.apply.clicked.connect(self.apply_partition)
        doc.projectReplaced.connect(self.reset_inputs)
        self.reset_inputs()

    def reset_inputs(self) -> None:
        m = self.doc.project.mapping
        n = max(2, m.devices)
        power = 1 << (n.bit_length() - 1)
        self.accelerators.setCurrentText(str(min(power, 1024)))
        self.batch.setValue(m.global_batch)
        self.dtype.setCurrentText(self.doc.project.run.dtype.value)

    def run(self) -> None:
        """The dynamic programme is linear in layers: milliseconds, so it runs right here."""
        try:
            layers = hypar_layers(build_workload(self.doc.project.workload))
        except ValueError as exc:
            self.summary.setText(f"HyPar applies to conv/fc networks: {exc}")
            return
        n, batch, dtype = int(self.accelerators.currentText()), self.batch.value(), self.dtype.currentText()
        best = hypar(layers, n, batch, dtype)
        dp, mp = uniform(layers, n, batch, dtype, "dp"), uniform(layers, n, batch, dtype, "mp")
        self.partition = best
        self.summary.setText(
            f"Communication per step: HyPar {best.total_bytes / GB:.3f} GB, all data-parallel "
            f"{dp.total_bytes / GB:.3f} GB, all model-parallel {mp.total_bytes / GB:.3f} GB "
            f"({len(best.levels)} levels of halving)."
        )
        self.table.setColumnCount(1 + len(best.levels))
        self.table.setHorizontalHeaderLabels(["layer"] + [f"level {lv.level}" for lv in best.levels])
        self.table.setRowCount(len(layers))
        for i, layer in enumerate(layers):
            self.table.setItem(i, 0, QTableWidgetItem(layer.name))
            for k, lv in enumerate(best.levels):
                self.table.setItem(i, 1 + k, QTableWidgetItem(lv.choices[i]))
        self.table.resizeColumnsToContents()
        self.apply.setEnabled(bool(best.levels))

    def apply_partition(self) -> None:
        if self.partition is None:
            return
        project = apply_partition(self.doc.project, self.partition)
        self.doc.push(AdoptMapping(self.doc, project.mapping, text="Apply HyPar partition"))
