"""Run/Cancel buttons with a progress bar and a status line, shared by the Explore tabs."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QWidget
from tilewright.studio.ui.explore.runner import ExploreRunner

STEPS = 1000


class RunBar(QWidget):
    def __init__(self, runner: ExploreRunner, label: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.run_button = QPushButton(label)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.bar = QProgressBar()
        self.bar.setRange(0, STEPS)
        self.bar.setMaximumWidth(220)
        self.bar.setVisible(False)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.run_button)
        row.addWidget(self.cancel_button)
        row.addWidget(self.bar)
        row.addWidget(self.status, 1)
        self.cancel_button.clicked.connect(runner.cancel)
        self.cancel_button.clicked.connect(lambda: self.status.setText("cancelling…"))
        runner.runningChanged.connect(self._running)
        runner.progress.connect(self.show_progress)
        runner.failed.connect(lambda m: self.status.setText(f"failed: {m}"))
        runner.stopped.connect(lambda: self.status.setText("cancelled"))

    def _running(self, running: bool) -> None:
        self.run_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        self.bar.setVisible(running)
        if running:
            self.bar.setValue(0)
            self.status.setText("starting…")

    def show_progress(self, fraction: float, text: str) -> None:
        self.bar.setValue(int(STEPS * min(max(fraction, 0.0), 1.0)))
        self.bar.setFormat(f"{100 * fraction:.0f} %")
        if text:
            self.status.setText(text)


def input_row(*pairs: tuple[str, QWidget]) -> QHBoxLayout:
    """Labelled inputs side by side at their natural width (a form would stretch them across the dock)."""
    row = QHBoxLayout()
    for label, widget in pairs:
        if label:
            row.addWidget(QLabel(label))
        widget.setMaximumWidth(max(widget.sizeHint().width(), 110))
        row.addWidget(widget)
        row.addSpacing(12)
    row.addStretch(1)
    return row
