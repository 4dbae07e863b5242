"""A sweep over arrival rates: the highest rate whose goodput meets the SLO (≥ ``GOODPUT_TARGET`` of requests).

With no SLO given the sweep is the measured latency/throughput curve alone: an architect sweeping rates
without a target wants to see where the latencies bend, and no rate is called "meeting" a target nobody set
(``best_rate`` and each row's ``meets_slo`` are None, the text says so).

Every rate replays the same seed (common random numbers: the arrival pattern only stretches), and the
instances' cost tables are built once for all of them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tilewright.engine.ir.project import Project
from tilewright.engine.jobs import CancelFn, ProgressFn, Reporter
from tilewright.engine.serving.config import GOODPUT_TARGET, ServingConfig
from tilewright.engine.serving.instances import build_instances
from tilewright.engine.serving.result import ServingResult, per_second
from tilewright.engine.serving.simulator import simulate_serving


@dataclass
class SweepResult:
    rates: list[float]
    results: list[ServingResult] = field(default_factory=list)

    @property
    def best_rate(self) -> float | None:
        """The highest rate meeting the SLO, or None when none does."""
        ok = [r for r, res in zip(self.rates, self.results, strict=True) if res.meets_slo()]
        return max(ok) if ok else None

    def to_json(self) -> dict[str, Any]:
        rows = []
        for rate, res in zip(self.rates, self.results, strict=True):
            m = res.metrics()
            met = res.meets_slo() if res.config.has_slo else None  # no SLO: nothing to meet
            rows.append({"rate_requests_per_s": rate, "meets_slo": met, **m})
        return {"best_rate_requests_per_s": self.best_rate, "goodput_target_fraction": GOODPUT_TARGET, "rates": rows}

    def summary_text(self) -> str:
        lines = [
            f"{'rate/s':>9}  {'TTFT p50':>10}  {'TTFT p99':>10}  {'TPOT p50':>10}  {'TPOT p99':>10}  "
            f"{'tokens/s':>10}  {'SLO met':>8}"
        ]
        for rate, res in zip(self.rates, self.results, strict=True):
            m = res.metrics()
            lines.append(
                f"{rate:>9.4g}  {_ms(m['ttft_s']['p50']):>10}  {_ms(m['ttft_s']['p99']):>10}  "
                f"{_ms(m['tpot_s']['p50']):>10}  {_ms(m['tpot_s']['p99']):>10}  "
                f"{(m['throughput_output_tokens_per_s'] or 0):>10.4g}  "
                f"{_met(res.goodput_fraction()):>8}"
            )
        if self.results and not self.results[0].config.has_slo:
            lines.append("no SLO given (--slo-ttft, --slo-tpot): the measured curve only, no rate meets a target")
            return "\n".join(lines)
        best = self.best_rate
        lines.append(
            f"highest rate meeting the SLO (≥ {GOODPUT_TARGET:.0%} of requests): "
            + (per_second(best, "request") if best is not None else "none of the rates")
        )
        return "\n".join(lines)


def sweep_rates(
    project: Project,
    config: ServingConfig,
    rates: list[float],
    *,
    progress: ProgressFn | None = None,
    cancel: CancelFn | None = None,
) -> SweepResult:
    report = Reporter(progress, cancel)
    models = build_instances(project, config.token_budget, config.disaggregate)
    out = SweepResult(sorted(rates))
    n = len(out.rates)
    for i, rate in enumerate(out.rates):
        part = report.part(i / n, (i + 1) / n)
        if not report.silent:
            part(0.0, f"rate {per_second(rate, 'request')} ({i + 1}/{n})")
        out.results.append(
            simulate_serving(
                project,
                dataclasses.replace(config, rate=rate),
                progress=part if not report.silent else None,
                cancel=cancel,
                models=models,
            )
        )
    return out


def _met(fraction: float | None) -> str:
    """The share of requests meeting the SLO, "—" with no SLO."""
    return "—" if fraction is None else f"{fraction:.1%}"


def _ms(seconds: float | None) -> str:
    """A latency at a readable scale (``results.text.duration``: µs, ms or s), "—" when there is none."""
    from tilewright.engine.results.text import duration

    return "—" if seconds is None else duration(seconds)
