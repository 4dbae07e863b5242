"""A stand-in for ``tilewright.engine.simulate.simulate`` that the studio's tests inject into the run
controller (``MainWindow(…, simulate=…)``): same signature and job protocol, answers in milliseconds,
with knobs for slow runs, errors and cancel."""

from __future__ import annotations

import threading
import time
from typing import Any

from tilewright.engine.jobs import CancelFn, Cancelled, ProgressFn
from tilewright.engine.results.result import Result
from tilewright.studio.ui.results.synthetic import metrics_only_result


def round_result() -> Result:
    """250 ms per iteration on 16 devices: 131,072 tokens/s, MFU 42 %, 5.5 GB (5.12 GiB) of weights."""
    return metrics_only_result(
        project="fake", engine="event", iteration_time_s=0.25, samples_per_iteration=32.0, tokens_per_sample=1024,
        devices=16, peak_flops_per_device=1e15, model_flops_per_iteration=0.42 * 0.25 * 16 * 1e15,
        hardware_flops_per_iteration=0.5 * 0.25 * 16 * 1e15, memory_breakdown_bytes={"weights": 5.5e9},
        time_breakdown_s={"compute": 0.2, "bubble": 0.05},
    )


class FakeEngine:
    """Takes ``steps`` naps of ``step_s`` seconds, reporting ``(fraction, "simulating")`` after each and
    checking ``cancel`` before each (raising ``Cancelled``, unless ``ignore_cancel``); then waits for
    ``release`` if set, raises the next of ``errors`` if any, or returns ``result``. ``calls`` records the
    thread, project name and callbacks of every call."""

    def __init__(self, result: Result | None = None, steps: int = 0, step_s: float = 0.01,
                 errors: list[Exception] | None = None, ignore_cancel: bool = False):
        self.result = result or round_result()
        self.steps, self.step_s, self.ignore_cancel = steps, step_s, ignore_cancel
        self.errors = list(errors or [])
        self.release: threading.Event | None = None
        self.calls: list[dict[str, Any]] = []

    def __call__(self, project: Any, *, progress: ProgressFn | None = None, cancel: CancelFn | None = None) -> Result:
        self.calls.append({"thread": threading.current_thread(), "project": project.name, "progress": progress,
                           "cancel": cancel})
        for i in range(self.steps):
            if cancel is not None and cancel() and not self.ignore_cancel:
                raise Cancelled("simulation cancelled")
            time.sleep(self.step_s)
            if progress is not None:
                progress((i + 1) / self.steps, "simulating")
        if self.release is not None:
            self.release.wait(5)
        if self.errors:
            raise self.errors.pop(0)
        return self.result
