"""Hold back a worker until the window has painted and gone quiet.

The engine is pure Python: while a worker runs, every Python call the GUI thread makes from C++ (a paint
method, an event filter, a slot) first waits for the GIL. A window's first paint and activation make a
few hundred such calls, and with a run started in the same instant they took 100–190 ms instead of
25–50 ms (palm-wafer preset, run pressed right after ``show()``, as ``tilewright studio --run`` does).
Waiting for the window to paint its "running" state before the worker starts costs the run a few tens of
milliseconds and keeps the event loop answering.

``SettleGate.call(fn)`` runs ``fn`` ``QUIET_MS`` after the first repaint that follows the call has ended
(the window's first paint, or the "running" state a Run shows), which leaves room for the follow-up
paints of a window just shown; never later than ``MAX_WAIT_MS`` after the call (a hidden or minimised
window must not hold a run back for good). A window that is not shown at all does not wait. The timer is
not restarted by later repaints: a busy indicator animates for as long as the run goes.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QWidget

QUIET_MS = 30  # after a repaint ended: its follow-ups (activation, deferred layouts) come in this time
MAX_WAIT_MS = 400  # held back at most this long, whatever the window does


class SettleGate(QObject):
    def __init__(self, window: QWidget):
        super().__init__(window)
        self.window = window
        self.painted = False
        self.pending: list[Callable[[], None]] = []
        self.quiet = self._single_shot(QUIET_MS)
        self.deadline = self._single_shot(MAX_WAIT_MS)
        window.installEventFilter(self)

    def _single_shot(self, ms: int) -> QTimer:
        timer = QTimer(self)
        timer.setSingleShot(True)
        timer.setInterval(ms)
        timer.timeout.connect(self.release)
        return timer

    def call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` now if the window is not shown, else once it has settled."""
        if not self.window.isVisible():
            fn()
            return
        self.pending.append(fn)
        if not self.deadline.isActive():
            self.deadline.start()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        # Any repaint of the window reaches the top level as an UpdateRequest (its backing store syncs).
        if watched is self.window and event.type() in (QEvent.Type.Paint, QEvent.Type.UpdateRequest):
            if event.type() == QEvent.Type.Paint:
                self.painted = True
            if self.pending and self.painted:
                # The filter sees the event before the paint it does; count from when that has ended.
                QTimer.singleShot(0, self, self._touched)
        return False

    def _touched(self) -> None:
        if self.pending and not self.quiet.isActive():
            self.quiet.start()

    def release(self) -> None:
        self.quiet.stop()
        self.deadline.stop()
        pending, self.pending = self.pending, []
        for fn in pending:
            fn()
