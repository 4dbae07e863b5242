"""The results dock. For now a summary of the last run; the Gantt, link-utilisation and memory views
will be tabs added next to ``summary`` (see ``add_view``), all fed the same ``Result``."""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QScrollArea, QTabWidget, QVBoxLayout, QWidget

from studio.units import (
    BYTES,
    FLOP,
    SAMPLES_PER_S,
    SECONDS,
    TOKENS_PER_S,
    format_percent,
    format_value,
)

PLACEHOLDER = "No run yet. Press F5 (Run ▸ Run) to simulate this project."

Rows = list[tuple[str, str]]


def format_metric(key: str, value: Any) -> str:
    """A metric by its name's unit suffix, so every number shown carries its unit."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return str(value)
    if key in ("mfu", "hfu"):
        return format_percent(value)
    if key.endswith("_bytes"):
        return format_value(value, BYTES)
    if key.endswith("tokens_per_s"):
        return format_value(value, TOKENS_PER_S)
    if key.endswith("samples_per_s"):
        return format_value(value, SAMPLES_PER_S)
    if key.endswith("flops_per_iteration"):
        return format_value(value, FLOP)
    if key.endswith("_s"):
        return format_value(value, SECONDS)
    if key == "devices":
        return f"{int(value)} devices"
    if key == "events":
        return f"{int(value):,} events"
    return f"{value:.4g}"


LABELS = {
    "samples_per_s": "throughput",
    "tokens_per_s": "token throughput",
    "model_flops_per_iteration": "model FLOPs / iteration",
    "wall_time_s": "engine wall time",
    "ttft_s": "time to first token",
    "tpot_s": "time per output token",
}
ROWS_PER_COLUMN = 6


def _label(key: str) -> str:
    if key in LABELS:
        return LABELS[key]
    for suffix in ("_bytes", "_s"):
        if key.endswith(suffix) and key != suffix:
            key = key[: -len(suffix)]
    return key.replace("_", " ").replace("mfu", "MFU").replace("hfu", "HFU")


def result_tables(result: Any) -> list[tuple[str, Rows]]:
    """Headline metrics, time breakdown and memory breakdown, each a list of (label, value with unit).

    Uses ``metrics_json()`` when the result has it; otherwise its ``summary_text()``/``summary()`` as
    one line per row, so an engine version the studio does not know yet still shows something.
    """
    metrics = getattr(result, "metrics_json", None)
    if callable(metrics):
        m = metrics()
        head = [(_label(k), format_metric(k, v)) for k, v in m.items() if not isinstance(v, dict)]
        tables = [("Run", head)]
        breakdowns = (("time_breakdown_s", "Time per iteration"), ("memory_breakdown_bytes", "Memory (peak device)"))
        for key, title in breakdowns:
            part = m.get(key) or {}
            unit_key = "x_s" if key.endswith("_s") else "x_bytes"
            rows = [(k.replace("_", " "), format_metric(unit_key, v)) for k, v in part.items() if v]
            if rows:
                tables.append((title, rows))
        if isinstance(m.get("oom"), dict):
            oom = m["oom"]
            need = format_metric("x_bytes", oom.get("need_bytes", 0))
            have = format_metric("x_bytes", oom.get("capacity_bytes", 0))
            tables.insert(0, ("OUT OF MEMORY", [(str(oom.get("device")), f"needs {need}, has {have}")]))
        return tables
    for name in ("summary_text", "summary"):
        fn = getattr(result, name, None)
        if callable(fn):
            return [("Run", [(line, "") for line in str(fn()).splitlines()])]
    return [("Run", [(repr(result)[:500], "")])]


def in_columns(tables: list[tuple[str, Rows]], rows: int = ROWS_PER_COLUMN) -> list[tuple[str, Rows]]:
    """Split long tables into columns of at most ``rows`` rows: the results dock is wide and low."""
    out: list[tuple[str, Rows]] = []
    for title, body in tables:
        for start in range(0, max(len(body), 1), rows):
            out.append((title if start == 0 else "", body[start : start + rows]))
    return out


def table_html(title: str, rows: Rows) -> str:
    body = "".join(
        f"<tr><td style='color:#566573; padding-right:10px'>{html.escape(k)}</td>"
        f"<td align='right'>{html.escape(v)}</td></tr>"
        for k, v in rows
    )
    return f"<b>{html.escape(title) or '&nbsp;'}</b><table cellspacing='0' cellpadding='1'>{body}</table>"


class ResultsPanel(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.tabs = QTabWidget(self)
        self.summary = QWidget()
        self._columns = QHBoxLayout(self.summary)
        self._columns.setContentsMargins(8, 6, 8, 6)
        self._columns.setSpacing(28)
        scroll = QScrollArea(self)
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.summary)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.tabs.addTab(scroll, "Summary")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.tabs)
        self.labels: list[QLabel] = []
        self.show_message(PLACEHOLDER)

    def add_view(self, widget: QWidget, title: str) -> None:
        """Seam for the result views to come (Gantt, links, memory)."""
        self.tabs.addTab(widget, title)

    def text(self) -> str:
        return "\n".join(label.text() for label in self.labels)

    def _set_columns(self, texts: list[str]) -> None:
        while self._columns.count():
            item = self._columns.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        self.labels = []
        for text in texts:
            label = QLabel(text)
            label.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            label.setWordWrap(len(texts) == 1)
            self._columns.addWidget(label, 1 if len(texts) == 1 else 0)
            self.labels.append(label)
        if len(texts) > 1:
            self._columns.addStretch(1)

    def show_running(self) -> None:
        self.show_message("Simulating…")

    def show_result(self, result: Any, seconds: float) -> None:
        tables = result_tables(result)
        tables[0][1].append(("run took (studio)", format_value(seconds, SECONDS)))
        self._set_columns([table_html(title, rows) for title, rows in in_columns(tables)])

    def show_message(self, text: str) -> None:
        self._set_columns([html.escape(text)])
