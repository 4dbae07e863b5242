"""What a serving simulation reports: per-request records, latency percentiles, throughput, goodput, KV use.

Definitions (as vLLM's and Vidur's benchmarks use them):
- TTFT: first output token − arrival (queueing included);
- TPOT: (finish − first token)/(output tokens − 1), absent for a one-token answer;
- TBT (time between tokens): every gap between two consecutive decode steps of a request, over all requests
  (Sarathi-Serve's tail metric: a prompt batched with decodes stalls them for one iteration). With
  speculative decoding a step emits several tokens at once, so this is the time between *steps* and exceeds
  TPOT; the text report then labels it so;
- E2E: finish − arrival;
- KV transfer (disaggregated): seconds moving a prompt's KV cache to the decode group, per request moved;
- throughput: requests and output tokens per second over the span from the first arrival to the last finish;
- goodput (DistServe's): requests per second that meet every SLO given (TTFT ≤ ``slo_ttft_s`` and
  TPOT ≤ ``slo_tpot_s``), and the fraction of requests that do; with no SLO given there is nothing to
  meet, and goodput, the fraction, ``meets_target`` and each record's ``meets_slo`` are None (null in JSON,
  empty in CSV) rather than "every request met it";
- KV occupancy: fraction of the instance kind's KV pages in use, sampled at every iteration boundary.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tilewright.engine.io.atomic import write_atomic
from tilewright.engine.results.text import counted, number
from tilewright.engine.serving.config import GOODPUT_TARGET, ServingConfig

PERCENTILES = (50, 90, 99)
CSV_FIELDS = (
    "id",
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "scheduled_s",
    "first_token_s",
    "finish_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "preemptions",
    "transfer_s",
    "meets_slo",
)


@dataclass
class RequestRecord:
    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    scheduled_s: float  # first admitted into a batch
    first_token_s: float
    finish_s: float
    preemptions: int
    transfer_s: float  # disaggregated: the KV transfer (0 otherwise)
    meets_slo: bool | None = None  # None: no SLO was given, nothing to meet

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        if self.output_tokens <= 1:
            return None
        return (self.finish_s - self.first_token_s) / (self.output_tokens - 1)

    def row(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(ttft_s=self.ttft_s, tpot_s=self.tpot_s, e2e_s=self.e2e_s)
        return out


@dataclass
class ServingResult:
    config: ServingConfig
    records: list[RequestRecord]
    kv_series: dict[str, list[tuple[float, float]]]  # instance kind → (time s, fraction of pages in use)
    kv_pages: dict[str, int]  # instance kind → pages (all its replicas)
    kv_page_tokens: int
    in_flight_s: float  # ∫ requests in the system dt (arrival to finish), for Little's law
    iterations: int
    preemptions: int
    notes: list[str] = field(default_factory=list)
    tbt_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # every gap between two tokens of a request
    wall_time_s: float = 0.0

    @property
    def span_s(self) -> float:
        """First arrival to last finish."""
        if not self.records:
            return 0.0
        return max(r.finish_s for r in self.records) - min(r.arrival_s for r in self.records)

    def goodput_fraction(self) -> float | None:
        """The fraction of requests meeting every SLO given; None when none was given."""
        if not self.config.has_slo:
            return None
        return sum(bool(r.meets_slo) for r in self.records) / len(self.records) if self.records else 0.0

    def meets_slo(self, target: float = GOODPUT_TARGET) -> bool:
        """At least ``target`` of the requests meet the SLO; False with no SLO (no rate "meets" nothing)."""
        fraction = self.goodput_fraction()
        return fraction is not None and fraction >= target

    def metrics(self) -> dict[str, Any]:
        recs = self.records
        span = self.span_s
        out: dict[str, Any] = {
            "requests": len(recs),
            "span_s": span,
            "iterations": self.iterations,
            "preemptions": self.preemptions,
        }
        for name in ("ttft_s", "tpot_s", "e2e_s"):
            values = np.array([v for r in recs if (v := getattr(r, name)) is not None], dtype=float)
            out[name] = _summary(values)
        out["tbt_s"] = _summary(self.tbt_s)
        out["kv_transfer_s"] = _summary(np.array([r.transfer_s for r in recs if r.transfer_s > 0], dtype=float))
        out["throughput_requests_per_s"] = len(recs) / span if span > 0 else None
        out["throughput_output_tokens_per_s"] = sum(r.output_tokens for r in recs) / span if span > 0 else None
        met = sum(bool(r.meets_slo) for r in recs)
        slo = self.config.has_slo
        out["goodput"] = {
            "slo_ttft_s": self.config.slo_ttft_s,
            "slo_tpot_s": self.config.slo_tpot_s,
            "fraction_meeting_slo": self.goodput_fraction(),
            "requests_per_s": met / span if slo and span > 0 else None,
            "meets_target": self.meets_slo() if slo else None,
            "target_fraction": GOODPUT_TARGET,
        }
        out["mean_in_flight"] = self.in_flight_s / span if span > 0 else None
        out["kv"] = {
            kind: {
                "pages": self.kv_pages[kind],
                "page_tokens": self.kv_page_tokens,
                "peak_fraction": max((f for _, f in s), default=0.0),
                "mean_fraction": _time_mean(s),
            }
            for kind, s in self.kv_series.items()
        }
        return out

    def to_json(self, records: bool = True) -> dict[str, Any]:
        settings = {k: v for k, v in dataclasses.asdict(self.config).items() if k != "requests"}
        settings["trace"] = self.config.requests is not None
        out = {
            "settings": settings,
            "metrics": self.metrics(),
            "notes": list(self.notes),
            "wall_time_s": self.wall_time_s,
            "kv_occupancy": {
                k: [[t, f] for t, f in thin(v, self.config.series_points)] for k, v in self.kv_series.items()
            },
        }
        if records:
            out["records"] = [r.row() for r in self.records]
        return out

    def write_csv(self, path: str | Path) -> None:
        """The per-request records, one row each; the file is replaced atomically (``io.atomic``)."""
        out = io.StringIO(newline="")
        w = csv.DictWriter(out, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in self.records:
            row = r.row()
            w.writerow({k: ("" if row[k] is None else row[k]) for k in CSV_FIELDS})
        write_atomic(path, out.getvalue())

    def summary_text(self) -> str:
        m = self.metrics()
        lines = [
            f"{counted(m['requests'], 'request')} in {number(m['span_s'])} s, "
            f"{counted(m['iterations'], 'iteration')}, {counted(m['preemptions'], 'preemption')}"
        ]
        spec = self.config.spec
        # with speculative decoding a step emits several tokens: its gaps are steps', longer than TPOT
        between = ("tbt_s", "TBT") if spec is None else ("tbt_s", "step")
        latencies = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), between, ("e2e_s", "E2E"))
        for name, label in (*latencies, ("kv_transfer_s", "KV transfer")):
            s = m[name]
            if s["count"]:
                lines.append(
                    f"  {label:<5} p50 {_ms(s['p50'])}  p90 {_ms(s['p90'])}  p99 {_ms(s['p99'])}  mean {_ms(s['mean'])}"
                    + (_step_gloss(spec) if label == "step" else "")
                )
        if m["throughput_requests_per_s"] is not None:
            lines.append(
                f"  throughput {per_second(m['throughput_requests_per_s'], 'request')}, "
                f"{per_second(m['throughput_output_tokens_per_s'], 'output token')}"
            )
        g = m["goodput"]
        if not self.config.has_slo:
            lines.append("  goodput: no SLO given (--slo-ttft, --slo-tpot), so none is reported")
        else:
            slo = ", ".join(
                f"{k[4:8].upper()} ≤ {_ms(v)}"
                for k, v in (("slo_ttft_s", g["slo_ttft_s"]), ("slo_tpot_s", g["slo_tpot_s"]))
                if v
            )
            rate = g["requests_per_s"]
            lines.append(
                f"  goodput ({slo}): {_percent(g['fraction_meeting_slo'])} of requests"
                + (f", {per_second(rate, 'request')}" if rate is not None else "")
            )
        for kind, kv in m["kv"].items():
            lines.append(
                f"  KV cache ({kind}): {counted(kv['pages'], 'page')} of {counted(kv['page_tokens'], 'token')}, "
                f"peak {_percent(kv['peak_fraction'])}, mean {_percent(kv['mean_fraction'])} in use"
            )
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def per_second(value: float, noun: str) -> str:
    """"1 request/s", "2.5 requests/s": the noun's number follows the value as printed."""
    shown = number(value)
    return f"{shown} {noun if shown == '1' else noun + 's'}/s"


def _step_gloss(spec) -> str:
    """What the "step" row times under speculative decoding, so it does not read as a TBT above TPOT."""
    shown = number(spec.tokens_per_step)
    tokens = "token" if shown == "1" else "tokens"
    return f"  (time between verify steps of {shown} {tokens} on average; per token: TPOT)"


def thin(series: list[tuple[float, float]], points: int) -> list[tuple[float, float]]:
    """At most ``points`` samples: the series cut into equal runs, each kept as its busiest sample (peaks
    survive)."""
    if len(series) <= points:
        return list(series)
    edges = np.linspace(0, len(series), points + 1).astype(int)
    return [max(series[a:b], key=lambda s: s[1]) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def _summary(values: np.ndarray) -> dict[str, Any]:
    if values.size == 0:
        return {"count": 0, "mean": None, **{f"p{p}": None for p in PERCENTILES}}
    out: dict[str, Any] = {"count": int(values.size), "mean": float(values.mean())}
    for p in PERCENTILES:
        out[f"p{p}"] = float(np.percentile(values, p))
    return out


def _time_mean(series: list[tuple[float, float]]) -> float:
    """Time-weighted mean of a step series (each value holds until the next sample)."""
    if len(series) < 2:
        return series[0][1] if series else 0.0
    t = np.array([s[0] for s in series])
    f = np.array([s[1] for s in series])
    dt = np.diff(t)
    total = dt.sum()
    return float((f[:-1] * dt).sum() / total) if total > 0 else float(f.mean())


def _percent(fraction: float) -> str:
    """"95.0 %": a share written as ``tilewright run`` writes MFU (a space before the sign)."""
    return f"{100 * fraction:.1f} %"


def _ms(seconds: float | None) -> str:
    """A latency at a readable scale (``results.text.duration``: µs, ms or s), "—" when there is none."""
    from tilewright.engine.results.text import duration

    return "—" if seconds is None else duration(seconds)
