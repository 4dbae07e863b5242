"""The command line's side of the job protocol (``engine.jobs``): a progress callback for long commands.

On a terminal it draws one updating line — a bar, the percentage, the estimated time left and the task's
text — and erases it when the command is done, so the result prints on a clean line. Into a pipe or a
file it writes each new text once as a plain line (fractions alone would flood a log); with
``lines=False`` (``tilewright run``, whose stderr stays empty when redirected) nothing at all.
"""

from __future__ import annotations

import shutil
import sys
import time
from types import TracebackType
from typing import TextIO

BAR_WIDTH = 24
REDRAW_EVERY_S = 0.1  # a terminal needs no more; the engine may report far more often


class ProgressPrinter:
    """``printer(fraction, text)`` is a ``ProgressFn``; use it as a context manager so the bar is erased."""

    def __init__(
        self, enabled: bool = True, *, lines: bool = True, stream: TextIO | None = None, every_s: float = 0.0
    ) -> None:
        """``every_s``: into a pipe, at most one line per that many seconds, each led by the fraction done and
        the time so far (a search whose text changes twice a second would flood a log); the last line (fraction
        1) always. 0: every new text, as it comes."""
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.enabled = enabled and (self.tty or lines)
        self.every_s = every_s
        self._start = time.monotonic()
        self._last_text = ""
        self._last_draw = float("-inf")
        self._drawn = False

    def __call__(self, fraction: float, text: str = "") -> None:
        if not self.enabled:
            return
        if not self.tty:
            if text and text != self._last_text:
                now = time.monotonic()
                if self.every_s and fraction < 1 and now - self._last_draw < self.every_s:
                    return
                self._last_text, self._last_draw = text, now
                lead = f"[{min(max(fraction, 0.0), 1.0):4.0%} {_clock(now - self._start)}] " if self.every_s else ""
                self.stream.write(lead + text + "\n")
                self.stream.flush()
            return
        now = time.monotonic()
        if text == self._last_text and now - self._last_draw < REDRAW_EVERY_S:
            return
        self._last_text, self._last_draw = text or self._last_text, now
        self.stream.write("\r\033[K" + self.line(fraction, self._last_text, now - self._start))
        self.stream.flush()
        self._drawn = True

    @staticmethod
    def line(fraction: float, text: str, elapsed: float, columns: int | None = None) -> str:
        """``[#####-------]  42%  0:12 left  text``, cut to the terminal's width."""
        f = min(max(fraction, 0.0), 1.0)
        filled = int(round(f * BAR_WIDTH))
        left = f"{_clock(elapsed * (1 - f) / f)} left" if 0.005 < f < 1 and elapsed > 1.0 else ""
        out = f"[{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {f:4.0%} {left:>11}  {text}"
        width = columns or shutil.get_terminal_size((100, 20)).columns
        return out[: max(width - 1, 0)]

    def close(self) -> None:
        """Erase the bar (the command's own output follows on the same line otherwise)."""
        if self._drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._drawn = False

    def __enter__(self) -> ProgressPrinter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"
