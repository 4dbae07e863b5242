"""The running run: a progress bar, what the worker is doing, an estimate of the time left, and Cancel.

The estimate extrapolates the engine's phase only (elapsed × (1 − f) / f), since the engine's fraction
counts pipeline steps of the event loop; planning before it and preparing the views after it show as
phases of their own, with a busy bar. Whatever the engine calls its phase ("simulating" unless it says)
shows with its fraction.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QWidget
from tilewright.studio.units import SECONDS, format_value
from tilewright.studio.workers import PLANNING, PREPARING

STEPS = 1000
MIN_FRACTION = 0.02  # below this the estimate is noise
MIN_ELAPSED_S = 0.3


def human_duration(seconds: float) -> str:
    """"0.4 s", "12 s", "3 min 20 s", "1 h 5 min": the precision a wait needs."""
    if seconds < 10:
        return format_value(max(seconds, 0.0), SECONDS, digits=2)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def eta_text(elapsed: float, fraction: float) -> str:
    if fraction >= 1.0:
        return "finishing…"
    if fraction < MIN_FRACTION or elapsed < MIN_ELAPSED_S:
        return "estimating the time left…"
    return f"about {human_duration(elapsed * (1.0 - fraction) / fraction)} left"


class RunProgress(QWidget):
    cancelRequested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.bar = QProgressBar()
        self.bar.setRange(0, STEPS)
        self.bar.setMaximumWidth(360)
        self.bar.setTextVisible(True)
        self.phase = QLabel()
        self.eta = QLabel()
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("stop the simulation (Shift+F5)")
        self.cancel_button.clicked.connect(self.cancelRequested.emit)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.phase)
        layout.addWidget(self.bar, 1)
        layout.addWidget(self.eta)
        layout.addStretch(1)
        layout.addWidget(self.cancel_button)
        self.started_at = self.sim_started_at = 0.0

    def start(self) -> None:
        self.started_at = time.monotonic()
        self.sim_started_at = 0.0
        self.bar.setRange(0, 0)  # busy until the engine reports a fraction
        self.phase.setText("Starting…")
        self.eta.setText("")
        self.cancel_button.setEnabled(True)

    def update_progress(self, fraction: float, phase: str) -> None:
        now = time.monotonic()
        if phase not in (PLANNING, PREPARING):
            if not self.sim_started_at:
                self.sim_started_at = now
            self.bar.setRange(0, STEPS)
            self.bar.setValue(int(STEPS * min(max(fraction, 0.0), 1.0)))
            self.bar.setFormat(f"{100 * fraction:.0f} %")
            self.eta.setText(eta_text(now - self.sim_started_at, fraction))
        else:
            self.bar.setRange(0, 0)
            self.eta.setText(f"{human_duration(now - self.started_at)} so far")
        self.phase.setText(phase[:1].upper() + phase[1:] + "…")

    def cancelling(self) -> None:
        self.cancel_button.setEnabled(False)
        self.phase.setText("Cancelling…")
