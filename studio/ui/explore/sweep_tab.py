"""Sweeps: run a sweep spec, plot throughput against power, area or cost with its Pareto front, and
open any point's design on the canvas with one click (an undoable replacement of the project)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)
from tilewright.engine.errors import InputError
from tilewright.engine.io.presets import presets_dir
from tilewright.engine.search.pareto import pareto_front
from tilewright.engine.search.sweep.point import build_point_project
from tilewright.engine.search.sweep.run import SweepResult, load_spec, read_rows, run_sweep
from tilewright.studio.document import ProjectDocument
from tilewright.studio.explore_commands import OpenDesign
from tilewright.studio.ui.explore.controls import RunBar
from tilewright.studio.ui.explore.pareto_plot import ParetoPlot
from tilewright.studio.ui.explore.runner import ExploreRunner

# x-axis choices: (CSV column, label, unit, scale)
AXES = {
    "power": ("power_w", "power", "W", 1.0),
    "area": ("area_mm2", "area", "mm²", 1.0),
    "cost": ("cost_usd", "cost", "$", 1.0),
    "memory": ("peak_memory_bytes", "peak memory", "GiB", 2.0**-30),
}


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return text


class SweepTab(QWidget):
    def __init__(self, doc: ProjectDocument, parent: QWidget | None = None):
        super().__init__(parent)
        self.doc = doc
        self.runner = ExploreRunner(self)
        self.rows: list[dict[str, Any]] = []
        self.points: list[dict[str, Any]] = []
        default = presets_dir() / "sweeps" / "dgx-scale-out.json"
        self.spec_path = QLineEdit(str(default) if default.is_file() else "")
        browse = QPushButton("Browse…")
        self.out_path = QLineEdit(str(Path.home() / "tilewright-sweep.csv"))
        self.axis = QComboBox()
        self.axis.addItems(list(AXES))
        spec_row = QHBoxLayout()
        spec_row.addWidget(self.spec_path, 1)
        spec_row.addWidget(browse)
        form = QFormLayout()
        form.addRow("Sweep spec (JSON)", spec_row)
        form.addRow("Results CSV (resumable)", self.out_path)
        form.addRow("Throughput against", self.axis)
        self.bar = RunBar(self.runner, "Run sweep")
        self.plot = ParetoPlot()
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.bar)
        layout.addWidget(self.plot, 1)
        browse.clicked.connect(self._browse)
        self.bar.run_button.clicked.connect(self.start)
        self.runner.finished.connect(self.show_result)
        self.axis.currentTextChanged.connect(lambda _t: self.replot())
        self.plot.pointClicked.connect(self.open_point)

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Sweep spec", self.spec_path.text(), "JSON (*.json)")
        if path:
            self.spec_path.setText(path)

    def start(self) -> None:
        spec_file, out = self.spec_path.text().strip(), self.out_path.text().strip()
        try:
            spec, base, source = load_spec(spec_file)
        except InputError as exc:
            self.bar.status.setText(str(exc))
            return
        self._spec, self._base, self._source = spec, base, source
        self.runner.run(partial(run_sweep, spec, base, source, out))

    def show_result(self, result: SweepResult, seconds: float) -> None:
        self.rows = read_rows(Path(result.csv_path))
        self.bar.status.setText(f"{result.total} points ({result.ran} run now, {result.skipped} from earlier) "
                                f"in {seconds:.1f} s — results in {result.csv_path}")
        self.replot()

    def replot(self) -> None:
        column, label, unit, scale = AXES[self.axis.currentText()]
        self.points = []
        for row in self.rows:
            if row.get("status") != "ok":
                continue
            try:
                x, y = float(row[column]) * scale, float(row["samples_per_s"])
            except (KeyError, TypeError, ValueError):
                continue
            self.points.append({"x": x, "y": y, "row": row})
        front = pareto_front(self.points, [("x", "min"), ("y", "max")])
        self.plot.show_points([p["x"] for p in self.points], [p["y"] for p in self.points], front,
                              (label, unit), ("throughput", "samples/s"))
        if self.points and len({p["x"] for p in self.points}) == 1:
            self.bar.status.setText(
                f"Every point has the same {label} ({self.points[0]['x']:g} {unit}): the sweep does not change "
                f"it, or the design's components carry no {label} figures — pick another axis."
            )

    def open_point(self, index: int) -> None:
        """Replace the project by the clicked point's design (undoable)."""
        row = self.points[index]["row"]
        overrides = {p.path: _value(row[p.path]) for p in self._spec.parameters}
        overrides.update(self._spec.set)
        try:
            project = build_point_project(self._base, overrides, self._source)
        except InputError as exc:
            self.bar.status.setText(str(exc))
            return
        self.doc.push(OpenDesign(self.doc, project, text=f"Open design {row.get('key', '')}"))
        self.bar.status.setText("opened " + ", ".join(f"{k} = {v}" for k, v in overrides.items()))
