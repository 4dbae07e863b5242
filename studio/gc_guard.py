"""Python's cyclic garbage collector runs on the GUI thread only, and still collects everything.

The collector runs on whichever thread happens to allocate when a generation fills up. If that is a
worker thread and the garbage holds Qt objects (a closed window's widgets caught in a reference cycle),
their C++ destructors run off the GUI thread and crash the process. So while any worker job runs,
automatic collection is off and the GUI thread collects instead:

- every ``TICK_MS`` while jobs run, both young generations at once (``gc.collect(1)``) when generation 0
  is due: they hold only what was allocated since the last tick, each object is scanned once before it
  reaches the old generation, and a pass costs what the worker allocated in one tick (a plan built in a
  burst: about 20 ms on a slow machine). Collecting generation 1 only every tenth pass, as CPython does,
  scanned a second of a run's allocations at once (35,000 objects, 85 ms).
- ``FULL_AFTER_MS`` after the last job ended, one full ``gc.collect()`` in a quiet turn of the event
  loop; then automatic collection is on again, with no worker running Python. Quiet: a ``QUIET_MS``
  timer fired on time, so nothing long ran just before it. The result views fill in several turns of
  40–85 ms each on a slow machine, and a full pass (20–60 ms) run right after one of them, before the
  event loop's next turn, blocked it past 100 ms; it waits for them now (at most ``QUIET_TRIES`` times).

An earlier version froze the heap (``gc.freeze()``) at each run and each job's end instead: frozen
objects are never collected, so every run's cyclic garbage stayed for good. One freeze is left: the heap
as it is when the first job starts (modules, classes, functions, the first window), frozen once. It
never grows, and it keeps the full collections short: with a palm-wafer project
open and run twice, the full passes took 12 and 26 ms (nothing frozen: 71 and 92 ms), the young ones
2.4 ms on average, 11 ms at most. A full pass still grows with what the session keeps alive (five runs
in the history: about 55 ms).
"""

from __future__ import annotations

import gc
import threading
import time

from PySide6.QtCore import QObject, Qt, QTimer, Signal

TICK_MS = 100
FULL_AFTER_MS = 300
QUIET_MS = 20  # the full pass waits for a timer this long...
LATE_MS = 5  # ...to fire no later than this after it was due (else something ran meanwhile: wait again)
QUIET_TRIES = 50  # at most this many waits (a second or more of a busy loop); then it runs anyway
KEEP_PAUSES = 200


class _Collector(QObject):
    """Lives on the GUI thread; ``idle`` emitted from a worker reaches ``_idle`` there (queued)."""

    idle = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.pauses: list[tuple[int, float]] = []  # (generation, seconds) of the latest collections
        self.tick = QTimer(self)
        self.tick.setInterval(TICK_MS)
        self.tick.timeout.connect(self.collect_young)
        self.full = QTimer(self)
        self.full.setSingleShot(True)
        self.full.setInterval(FULL_AFTER_MS)
        self.full.timeout.connect(self._wait_quiet)
        self.quiet = QTimer(self)
        self.quiet.setSingleShot(True)
        self.quiet.setTimerType(Qt.TimerType.PreciseTimer)  # a coarse timer may fire 5 % late
        self.quiet.setInterval(QUIET_MS)
        self.quiet.timeout.connect(self._quiet_check)
        self._asked = 0.0
        self._tries = 0
        self.idle.connect(self._idle)

    def _timed(self, generation: int) -> int:
        start = time.perf_counter()
        found = gc.collect(generation)
        self.pauses = [*self.pauses[-(KEEP_PAUSES - 1):], (generation, time.perf_counter() - start)]
        return found

    def busy(self) -> None:
        """A job is about to start: young collections from here on, no full one until all have ended."""
        self.full.stop()
        self.quiet.stop()
        if not self.tick.isActive():
            self.tick.start()

    def collect_young(self) -> None:
        with _LOCK:
            wanted = _STATE["was_enabled"]
        if not wanted:  # collection was off before the jobs: not ours to switch on
            return
        if gc.get_count()[0] >= gc.get_threshold()[0]:
            self._timed(1)

    def _idle(self) -> None:
        with _LOCK:
            if _STATE["active"]:
                return
        self.full.start()

    def _wait_quiet(self) -> None:
        self._tries = 0
        self._asked = time.perf_counter()
        self.quiet.start()

    def _quiet_check(self) -> None:
        late = time.perf_counter() - self._asked - QUIET_MS / 1000
        if late > LATE_MS / 1000 and self._tries < QUIET_TRIES:
            self._tries += 1
            self._asked = time.perf_counter()
            self.quiet.start()
            return
        self.collect_full()

    def collect_full(self) -> None:
        # Under the lock throughout: a job starting in between must find collection either still off
        # (and leave ``was_enabled`` as it is) or already on (and switch it off again).
        with _LOCK:
            if _STATE["active"]:
                return
            self.tick.stop()
            if _STATE["was_enabled"]:
                _STATE["was_enabled"] = False
                self._timed(2)
                gc.enable()


_LOCK = threading.RLock()  # re-entrant: a finalizer run by a collection may start a job
_STATE = {"active": 0, "was_enabled": False}
_COLLECTOR: _Collector | None = None


def _freeze_start_up_heap() -> None:
    """Freeze what lives when the first job starts: it lives for the session. Only the young generations
    are collected first (1.5 ms): a full pass over the start-up heap took 70–90 ms, a stall at the moment
    a window opens, to free some 200 objects of start-up garbage, which instead stay frozen, once."""
    gc.collect(1)
    gc.freeze()


def install() -> None:
    """Create the GUI-thread collector; call from the GUI thread each time before starting a job."""
    global _COLLECTOR
    if _COLLECTOR is None:
        _freeze_start_up_heap()
        _COLLECTOR = _Collector()
    _COLLECTOR.busy()


def pauses() -> list[tuple[int, float]]:
    """(generation, seconds) of the collections the GUI thread made lately, newest last."""
    return list(_COLLECTOR.pauses) if _COLLECTOR is not None else []


def job_started() -> None:
    """On the worker thread, before the job's function runs."""
    with _LOCK:
        if _STATE["active"] == 0 and gc.isenabled():
            _STATE["was_enabled"] = True
            gc.disable()
        _STATE["active"] += 1


def job_ended() -> None:
    """On the worker thread, after the job's function returned or raised."""
    with _LOCK:
        _STATE["active"] -= 1
        idle = _STATE["active"] == 0
    if idle and _COLLECTOR is not None:
        _COLLECTOR.idle.emit()
