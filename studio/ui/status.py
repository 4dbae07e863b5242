"""The status bar: whether the project passes the cross-part checks, and how the last run went.

Checks build the workload graph, so they run on the thread pool, a moment after the last edit
(debounced); an answer for an older version of the project is dropped.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QLabel, QSizePolicy, QStatusBar, QWidget
from tilewright.studio.document import ProjectDocument
from tilewright.studio.workers import Job, Relay, check_job, start

DEBOUNCE_MS = 250
NO_RUN = "no run yet"  # the run state of a project not run in this window


class StatusBar(QStatusBar):
    checked = Signal(str)  # the validation text, once an answer for the current project arrived

    def __init__(self, doc: ProjectDocument, parent: QWidget | None = None):
        super().__init__(parent)
        self.doc = doc
        self.validation = QLabel("checking…")
        # a check's message can be 300 characters: cut at the bar's edge (all of it in the tooltip) rather
        # than widening the window past the screen (a 1280 × 720 window became 2,111 px wide)
        self.validation.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.validation.setMinimumWidth(10)
        self.run_state = QLabel(NO_RUN)
        self.addPermanentWidget(self.validation, 1)
        self.addPermanentWidget(self.run_state)
        self._generation = 0
        self._answered = -1
        self._job: Job | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(DEBOUNCE_MS)
        self._timer.timeout.connect(self._run_checks)
        doc.changed.connect(self.schedule_checks)
        self.schedule_checks()

    def schedule_checks(self) -> None:
        self._generation += 1
        self._timer.start()

    def _run_checks(self) -> None:
        generation = self._generation
        job = check_job(self.doc.project)
        Relay(
            self,
            job,
            finished=lambda problems, _s: self._checked(generation, problems),
            failed=lambda msg: self._show(generation, f"checks failed: {msg}", "#c0392b"),
        )
        self._job = job
        start(job)

    def _checked(self, generation: int, problems: Any) -> None:
        if not problems:
            self._show(generation, "✓ project consistent", "#1e8449")
            return
        first = str(problems[0])
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        self._show(generation, f"⚠ {first}{more}", "#b9770e")
        self.validation.setToolTip("\n".join(str(p) for p in problems))

    def _show(self, generation: int, text: str, color: str) -> None:
        if generation != self._generation:
            return
        self._answered = generation
        self.validation.setText(text)
        self.validation.setStyleSheet(f"color: {color};")
        if not text.startswith("⚠"):  # a warning's tooltip lists every problem (``_checked``)
            self.validation.setToolTip(text)
        self.checked.emit(text)

    @property
    def is_checked(self) -> bool:
        """True once the checks answered for the project as it is now."""
        return self._answered == self._generation

    def set_run_state(self, text: str) -> None:
        self.run_state.setText(text)
