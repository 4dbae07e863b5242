"""Sweeps: run a sweep spec, plot throughput against power, area or cost with its Pareto front, and
open any point's design on the canvas with one click (an undoable replacement of the project)."""

from __future__ import annotations

import html
import json
from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
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

# x-axis choices: (CSV column, label, unit, scale). Two powers, named apart: ``power_w`` is the hardware's
# rated power (its nodes' and devices' power_w summed, ``hardware_totals``), which the sweep plot used to call
# plain "power" — a 64-GPU point read 26 kW where the run draws 8.3 kW; ``average_power_w`` is what the run
# simulated (its energy over its time), present in rows written since the sweep recorded it.
AXES = {
    "simulated power": ("average_power_w", "simulated power", "W", 1.0),
    "rated power": ("power_w", "rated power", "W", 1.0),
    "area": ("area_mm2", "area", "mm²", 1.0),
    "cost": ("cost_usd", "cost", "$", 1.0),
    "memory": ("peak_memory_bytes", "peak memory", "GiB", 2.0**-30),
}
# Watts read as kW or MW once large: a cluster's 416,000 W ticks were six-digit numbers.
POWER_SCALES = ((1e6, "MW"), (1e3, "kW"), (1.0, "W"))


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return text


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def base_text(base_ref: str | dict[str, Any], base: dict[str, Any], open_name: str) -> str:
    """"Sweeps <b>megatron-18b-dgx-a100</b> (the spec's base) — not the open project, gpt3-dgx-a100"."""
    name = str(base.get("name") or "")
    ref = "the spec's own project" if isinstance(base_ref, dict) else Path(base_ref).stem
    shown = html.escape(ref if not name or name == ref else f"{ref} ({name})")
    text = f"Sweeps <b>{shown}</b>, the spec's base project"
    if name != open_name:
        text += f" — not the open project, {html.escape(open_name or '(unnamed)')}"
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
        # The spec names its own base project (dgx-scale-out.json sweeps megatron-18b-dgx-a100 whatever is
        # open): which project the sweep varies is said in bold above the inputs, never left to be guessed.
        # It sits beside the axis chooser, whose row has room: a row of its own made the Explore dock, and
        # with it the Results dock it shares the bottom with, taller than a 1280 × 720 canvas can spare.
        self.base_label = QLabel()
        self.base_label.setTextFormat(Qt.TextFormat.RichText)
        self.base_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # never widens
        axis_row = QHBoxLayout()
        axis_row.addWidget(self.axis)
        axis_row.addSpacing(16)
        axis_row.addWidget(self.base_label, 1)
        form = QFormLayout()
        form.addRow("Sweep spec (JSON)", spec_row)
        form.addRow("Results CSV (resumable)", self.out_path)
        form.addRow("Throughput against", axis_row)
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
        self.spec_path.textChanged.connect(lambda _t: self.show_base())
        doc.changed.connect(self.show_base)
        self.show_base()

    def show_base(self) -> None:
        """Name the project the spec sweeps (its ``base``) and say when it is not the open one."""
        spec_file = self.spec_path.text().strip()
        if not spec_file:
            self.base_label.setText("No sweep spec: choose one (its <b>base</b> is the project swept).")
            return
        try:
            spec, base, source = load_spec(spec_file)
        except InputError as exc:
            first = str(exc).splitlines()[0] if str(exc) else "unreadable"
            self.base_label.setText(f"The spec does not load: {html.escape(first)}")
            return
        self.base_label.setText(base_text(spec.base, base, self.doc.project.name))

    def _axis_values(self) -> tuple[str, str, float]:
        """The x column, and the unit and scale its values are shown in (power in W, kW or MW)."""
        column, _label, unit, scale = AXES[self.axis.currentText()]
        if unit == "W":
            top = max((_number(r.get(column)) or 0.0 for r in self.rows), default=0.0)
            unit, scale = next((u, 1.0 / f) for f, u in POWER_SCALES if top >= f or f == 1.0)
        return column, unit, scale

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
        label = AXES[self.axis.currentText()][1]
        column, unit, scale = self._axis_values()
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
        if self.rows and not self.points and not any(_number(r.get(column)) is not None for r in self.rows):
            self.bar.status.setText(f"These rows carry no {label} ({column}): pick another axis.")
        elif self.points and len({p["x"] for p in self.points}) == 1:
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
