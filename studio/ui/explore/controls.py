"""Run/Cancel buttons with a status line, shared by the Explore tabs."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget
from tilewright.studio.ui.explore.runner import ExploreRunner


class RunBar(QWidget):
    def __init__(self, runner: ExploreRunner, label: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.run_button = QPushButton(label)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.run_button)
        row.addWidget(self.cancel_button)
        row.addWidget(self.status, 1)
        self.cancel_button.clicked.connect(runner.cancel)
        runner.runningChanged.connect(self._running)
        runner.progress.connect(self.status.setText)
        runner.failed.connect(lambda m: self.status.setText(f"failed: {m}"))

    def _running(self, running: bool) -> None:
        self.run_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)


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
