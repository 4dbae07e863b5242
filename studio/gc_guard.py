"""Keep Python's cyclic garbage collector on the GUI thread.

The collector runs on whichever thread happens to allocate when a generation fills up. If that is a
worker thread and the garbage holds Qt objects (a closed window's widgets caught in a reference cycle),
their C++ destructors run off the GUI thread and crash the process. So while any worker job runs,
automatic collection is off; when the last one ends, the GUI thread switches it back on.
"""

from __future__ import annotations

import gc
import threading

from PySide6.QtCore import QObject, Signal


class _Restorer(QObject):
    """Lives on the GUI thread; a signal emitted from a worker reaches ``restore`` there (queued)."""

    idle = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.idle.connect(self.restore)

    def restore(self) -> None:
        with _LOCK:
            if _STATE["active"] or not _STATE["was_enabled"]:
                return
            _STATE["was_enabled"] = False
        # What the jobs built (results, plans) moves to the permanent generation, so the collections that
        # follow scan only new objects: a full pass over a large result would stall the event loop.
        gc.freeze()
        gc.enable()


_LOCK = threading.Lock()
_STATE = {"active": 0, "was_enabled": False}
_RESTORER: _Restorer | None = None


def install() -> None:
    """Create the GUI-thread restorer; call from the GUI thread before starting jobs."""
    global _RESTORER
    if _RESTORER is None:
        _RESTORER = _Restorer()


def job_started() -> None:
    with _LOCK:
        if _STATE["active"] == 0 and gc.isenabled():
            _STATE["was_enabled"] = True
            gc.disable()
        _STATE["active"] += 1


def job_ended() -> None:
    with _LOCK:
        _STATE["active"] -= 1
        idle = _STATE["active"] == 0 and _STATE["was_enabled"]
    if idle and _RESTORER is not None:
        _RESTORER.idle.emit()
