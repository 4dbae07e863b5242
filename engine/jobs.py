"""One job protocol for every long task — simulate, search, sweep, map, hw-search — in the CLI and the studio.

A long task takes two optional callables and nothing else:

- ``progress(fraction, text)``: where it stands (0–1) and what it is doing, called now and then from the
  thread that runs the task;
- ``cancel() -> bool``: true when the caller wants it to stop. The task checks it between batches of work
  and raises ``Cancelled``.

``Reporter`` wraps the pair so a task reports, checks and hands sub-ranges to its parts in one line each.
The studio's workers and the CLI's progress bar are two callers of the same protocol.
"""

from __future__ import annotations

from collections.abc import Callable

ProgressFn = Callable[[float, str], None]
CancelFn = Callable[[], bool]


class Cancelled(Exception):
    """The caller asked the task to stop."""


class Reporter:
    """A task's view of ``progress`` and ``cancel``, optionally mapped onto a sub-range of the whole job
    (a search that first estimates, then re-simulates, gives each part its own share of the bar)."""

    __slots__ = ("_progress", "_cancel", "_start", "_span")

    def __init__(
        self, progress: ProgressFn | None = None, cancel: CancelFn | None = None, start: float = 0.0, end: float = 1.0
    ) -> None:
        self._progress, self._cancel = progress, cancel
        self._start, self._span = start, end - start

    @property
    def silent(self) -> bool:
        """Nobody listens and nobody can cancel: a task may skip its bookkeeping."""
        return self._progress is None and self._cancel is None

    def cancelled(self) -> bool:
        return self._cancel is not None and bool(self._cancel())

    def check(self) -> None:
        """Raise ``Cancelled`` if the caller asked to stop."""
        if self.cancelled():
            raise Cancelled("cancelled")

    def __call__(self, fraction: float, text: str = "") -> None:
        """Report ``fraction`` (0–1) of this task's range with ``text``, then check for a cancel."""
        if self._progress is not None:
            self._progress(self._start + self._span * min(max(fraction, 0.0), 1.0), text)
        self.check()

    def part(self, start: float, end: float) -> Reporter:
        """The same caller, for a part of this task that covers ``start``–``end`` of it."""
        return Reporter(self._progress, self._cancel, self._start + self._span * start, self._start + self._span * end)
