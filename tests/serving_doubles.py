"""Hand-built serving results and a stand-in for ``simulate_serving`` / ``sweep_rates`` for the studio's
serving tests: same signatures and job protocol, answers in milliseconds, with knobs for slow runs."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

from tilewright.engine.jobs import CancelFn, Cancelled, ProgressFn
from tilewright.engine.serving import RequestRecord, ServingConfig, ServingResult, SweepResult


def record(
    i: int,
    arrival: float,
    scheduled: float,
    first: float,
    finish: float,
    output: int = 8,
    transfer: float = 0.0,
    meets: bool = True,
) -> RequestRecord:
    return RequestRecord(
        id=i,
        arrival_s=arrival,
        prompt_tokens=100,
        output_tokens=output,
        scheduled_s=scheduled,
        first_token_s=first,
        finish_s=finish,
        preemptions=0,
        transfer_s=transfer,
        meets_slo=meets,
    )


def small_result(config: ServingConfig | None = None, scale: float = 1.0) -> ServingResult:
    """Five requests (one queued, one with a KV transfer, one that misses the SLO from ``scale`` 2 on, so
    the result meets the 90 % target below it) and two instance kinds; ``scale`` stretches every time."""
    config = config or ServingConfig(slo_ttft_s=0.5, slo_tpot_s=0.05)
    s = scale
    recs = [
        record(3, 0.30 * s, 0.30 * s, 0.42 * s, 0.90 * s),
        record(0, 0.00, 0.00, 0.10 * s, 0.60 * s, transfer=0.02 * s),
        record(1, 0.05 * s, 0.20 * s, 0.31 * s, 0.85 * s),  # queued 0.15 s
        record(2, 0.10 * s, 0.12 * s, 0.80 * s, 1.50 * s, meets=scale < 2),
        record(4, 0.40 * s, 0.41 * s, 0.50 * s, 0.50 * s, output=1),  # one token: no TPOT, no decode bar
    ]
    kv = {
        "prefill": [(0.0, 0.0), (0.1 * s, 0.25), (0.4 * s, 0.5), (1.5 * s, 0.0)],
        "decode": [(0.0, 0.0), (0.2 * s, 0.125), (1.0 * s, 0.375), (1.5 * s, 0.0)],
    }
    return ServingResult(
        config=config,
        records=recs,
        kv_series=kv,
        kv_pages={"prefill": 400, "decode": 800},
        kv_page_tokens=16,
        in_flight_s=3.0 * s,
        iterations=42,
        preemptions=1,
        notes=["a note"],
        wall_time_s=0.01,
    )


class FakeServing:
    """``simulate_serving`` and ``sweep_rates`` in one: ``steps`` naps of ``step_s`` seconds, reporting
    progress after each and checking ``cancel`` before each; then waits for ``release`` if set; answers
    ``small_result`` scaled by the rate. ``calls`` records the thread and config of every call."""

    def __init__(self, steps: int = 0, step_s: float = 0.01):
        self.steps, self.step_s = steps, step_s
        self.release: threading.Event | None = None
        self.calls: list[dict[str, Any]] = []
        self.progressed = threading.Event()

    def simulate(
        self, project: Any, config: ServingConfig, *, progress: ProgressFn | None = None, cancel: CancelFn | None = None
    ) -> ServingResult:
        self.calls.append({"thread": threading.current_thread(), "config": config, "project": project.name})
        for i in range(self.steps):
            if cancel is not None and cancel():
                raise Cancelled("serving cancelled")
            time.sleep(self.step_s)
            if progress is not None:
                progress((i + 1) / self.steps, f"{i + 1}/{self.steps} requests served")
                self.progressed.set()
        if self.release is not None:
            self.release.wait(10)
        return small_result(config, scale=config.rate)

    def sweep(
        self,
        project: Any,
        config: ServingConfig,
        rates: list[float],
        *,
        progress: ProgressFn | None = None,
        cancel: CancelFn | None = None,
    ) -> SweepResult:
        out = SweepResult(sorted(rates))
        for rate in out.rates:
            out.results.append(
                self.simulate(project, dataclasses.replace(config, rate=rate), progress=progress, cancel=cancel)
            )
        return out
