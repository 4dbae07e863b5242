"""What the serving view shows, shaped from the engine's ``ServingResult``s without Qt.

The serving simulation (``tilewright.engine.serving``) answers per-request records, KV occupancy series
and a metrics dict; the views need arrays (latency percentiles against arrival rate, KV occupancy
against time, Gantt bars per request phase) and rows of text with units. All of that is computed here,
on the worker thread that ran the simulation (``studio.serving_controller``), so the GUI thread only
hands arrays to pyqtgraph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tilewright.engine.cli.serve import parse_rates
from tilewright.engine.errors import InputError
from tilewright.engine.serving import GOODPUT_TARGET, ServingConfig, ServingResult
from tilewright.studio.units import SECONDS, TOKENS_PER_S, Unit, format_percent, format_value

REQUESTS_PER_S = Unit("requests/s", "2 requests/s", prefixed=False)
LATENCIES = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"))
PERCENTILES = (50, 90, 99)
SLO_KEYS = {"ttft_s": "slo_ttft_s", "tpot_s": "slo_tpot_s"}  # latency → its SLO in the config

# Phases of a request on the timeline, in drawing order, with their colours.
PHASE_COLOURS: dict[str, str] = {
    "queued": "#bab0ac",
    "prefill": "#f58518",
    "KV transfer": "#e45756",
    "decode": "#4c78a8",
}
KIND_COLOURS: dict[str, str] = {"serve": "#4c78a8", "prefill": "#f58518", "decode": "#54a24b"}
PERCENTILE_STYLES: dict[int, str] = {50: "solid", 90: "dash", 99: "dot"}


def read_rates(text: str) -> list[float]:
    """ "2", "1, 2, 4" or "0.5:4:0.5" (start, stop inclusive, step) in requests/s — the grammar of
    ``tilewright serve --sweep-rates``; a trailing "/s" or "requests/s" is allowed. ``ValueError``
    with the reason otherwise."""
    body = text.strip()
    for suffix in ("requests/s", "req/s", "/s"):
        if body.endswith(suffix):
            body = body[: -len(suffix)].strip()
            break
    try:
        return parse_rates(body)
    except InputError as exc:
        raise ValueError("; ".join(p.reason for p in exc.problems)) from None


@dataclass(frozen=True)
class ServingRequest:
    """What the serving dialog asks for: the settings, the arrival rates (more than one is a sweep) and a
    trace file to replay instead of Poisson arrivals (read on the worker)."""

    config: ServingConfig
    rates: tuple[float, ...] = (1.0,)
    trace: str | None = None

    @property
    def is_sweep(self) -> bool:
        return len(self.rates) > 1 and self.trace is None


@dataclass
class LatencyCurves:
    """Latency percentiles (seconds) against arrival rate (requests/s), one point per simulation."""

    rates: np.ndarray
    values: dict[str, dict[int, np.ndarray]]  # "ttft_s" → percentile → seconds (NaN where absent)
    slo: dict[str, float | None]  # "ttft_s"/"tpot_s" → the SLO in seconds, if set
    goodput_fraction: np.ndarray
    best_rate: float | None  # the highest rate meeting the SLO (≥ GOODPUT_TARGET of requests)


@dataclass
class KVCurve:
    """One instance kind's KV occupancy as a step series: ``times`` s, ``percent`` of its pages in use."""

    kind: str
    times: np.ndarray
    percent: np.ndarray
    pages: int
    page_tokens: int
    peak_percent: float
    mean_percent: float


@dataclass
class TimelineBars:
    """The Gantt of the requests: row ``i`` is the i-th request by arrival; per phase the bars' rows,
    starts and widths (seconds), ready for one ``BarGraphItem`` per colour."""

    ids: np.ndarray
    phases: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # phase → (rows, start s, width s)
    start_s: float
    end_s: float


@dataclass
class ServingRun:
    """One simulation, shaped: its metrics, table rows, KV curves and timeline."""

    rate: float | None  # None for a trace
    result: ServingResult
    metrics: dict[str, Any]
    rows: list[tuple[str, str]]
    kv: list[KVCurve]
    timeline: TimelineBars

    @property
    def label(self) -> str:
        return "trace" if self.rate is None else format_value(self.rate, REQUESTS_PER_S)


@dataclass
class ServingView:
    """Everything the serving view draws: the runs (one per rate), the curves across them, and which run
    the per-run views start on (the best rate of a sweep, else the only one)."""

    project: str
    runs: list[ServingRun]
    latency: LatencyCurves
    chosen: int = 0
    notes: list[str] = field(default_factory=list)
    wall_time_s: float = 0.0

    @property
    def is_sweep(self) -> bool:
        return len(self.runs) > 1


def latency_curves(
    rates: list[float], metrics: list[dict[str, Any]], config: ServingConfig, best_rate: float | None
) -> LatencyCurves:
    values = {
        name: {p: np.array([_nan(m[name][f"p{p}"]) for m in metrics], dtype=float) for p in PERCENTILES}
        for name, _ in LATENCIES
    }
    return LatencyCurves(
        rates=np.asarray(rates, dtype=float),
        values=values,
        slo={name: getattr(config, key) for name, key in SLO_KEYS.items()},
        goodput_fraction=np.array([m["goodput"]["fraction_meeting_slo"] for m in metrics], dtype=float),
        best_rate=best_rate,
    )


def kv_curves(result: ServingResult, metrics: dict[str, Any]) -> list[KVCurve]:
    out = []
    for kind, series in result.kv_series.items():
        data = np.asarray(series, dtype=float).reshape(-1, 2)
        kv = metrics["kv"][kind]
        out.append(
            KVCurve(
                kind,
                data[:, 0],
                100.0 * data[:, 1],
                kv["pages"],
                kv["page_tokens"],
                100.0 * kv["peak_fraction"],
                100.0 * kv["mean_fraction"],
            )
        )
    return out


def step_xy(times: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A step series as a polyline: each value held from its time to the next sample's (plain x/y, so a
    plot may clip and downsample it, which pyqtgraph's ``stepMode`` does not survive)."""
    if len(times) == 0:
        return np.empty(0), np.empty(0)
    x = np.repeat(times, 2)[1:]
    y = np.repeat(values, 2)[:-1]
    return x, y


def timeline_bars(result: ServingResult) -> TimelineBars:
    """Queued (arrival → first admitted), prefill (→ first token), decode (→ finish); with disaggregation
    the KV transfer's duration is drawn from the first token (the wait for the link is not recorded, so it
    shows as decode)."""
    recs = sorted(result.records, key=lambda r: (r.arrival_s, r.id))
    arrival = np.array([r.arrival_s for r in recs], dtype=float)
    scheduled = np.array([r.scheduled_s for r in recs], dtype=float)
    first = np.array([r.first_token_s for r in recs], dtype=float)
    finish = np.array([r.finish_s for r in recs], dtype=float)
    transfer = np.array([r.transfer_s for r in recs], dtype=float)
    rows = np.arange(len(recs), dtype=float)
    moved = np.minimum(transfer, finish - first)
    phases = {
        "queued": (arrival, scheduled - arrival),
        "prefill": (scheduled, first - scheduled),
        "KV transfer": (first, moved),
        "decode": (first + moved, finish - first - moved),
    }
    out = {}
    for name, (start, width) in phases.items():
        keep = width > 0
        out[name] = (rows[keep], start[keep], width[keep])
    return TimelineBars(
        ids=np.array([r.id for r in recs], dtype=int),
        phases=out,
        start_s=float(arrival.min()) if len(recs) else 0.0,
        end_s=float(finish.max()) if len(recs) else 0.0,
    )


def metric_rows(result: ServingResult, m: dict[str, Any], rate: float | None) -> list[tuple[str, str]]:
    """(what, value with its unit) for the metrics table."""
    rows: list[tuple[str, str]] = [
        ("arrival rate", "trace" if rate is None else format_value(rate, REQUESTS_PER_S)),
        ("requests", f"{m['requests']} requests"),
        ("simulated span", format_value(m["span_s"], SECONDS)),
        ("iterations", f"{m['iterations']} iterations"),
        ("preemptions", f"{m['preemptions']} preemptions"),
        ("throughput", format_value(m["throughput_requests_per_s"], REQUESTS_PER_S)),
        ("output throughput", format_value(m["throughput_output_tokens_per_s"], TOKENS_PER_S)),
    ]
    g = m["goodput"]
    slo = ", ".join(
        f"{label} ≤ {format_value(g[key], SECONDS)}"
        for label, key in (("TTFT", "slo_ttft_s"), ("TPOT", "slo_tpot_s"))
        if g[key] is not None
    )
    rows += [
        ("SLO", slo or "none set (nothing to meet)"),
        ("goodput", format_value(g["requests_per_s"], REQUESTS_PER_S)),
        (
            "requests meeting the SLO",
            "— (no SLO set)" if g["fraction_meeting_slo"] is None  # engine: null without an SLO
            else format_percent(g["fraction_meeting_slo"])
            + (" (meets the target)" if g["meets_target"] else f" (target {format_percent(GOODPUT_TARGET)})"),
        ),
    ]
    for name, label in (*LATENCIES, ("tbt_s", "time between tokens"), ("kv_transfer_s", "KV transfer")):
        s = m.get(name)
        if s is None or (name in ("tbt_s", "kv_transfer_s") and not s["count"]):  # transfers: disaggregated only
            continue
        for key in (*(f"p{p}" for p in PERCENTILES), "mean"):
            rows.append((f"{label} {key}", format_value(s[key], SECONDS)))
    if m["mean_in_flight"] is not None:
        rows.append(("mean requests in flight", f"{m['mean_in_flight']:.3g} requests"))
    for kind, kv in m["kv"].items():
        rows += [
            (f"KV cache ({kind})", f"{kv['pages']:,} pages × {kv['page_tokens']:,} tokens"),
            (f"KV peak ({kind})", format_percent(kv["peak_fraction"]) + " of pages"),
            (f"KV mean ({kind})", format_percent(kv["mean_fraction"]) + " of pages"),
        ]
    rows.append(("wall time to simulate", format_value(result.wall_time_s, SECONDS)))
    return rows


def shape_run(result: ServingResult, rate: float | None) -> ServingRun:
    m = result.metrics()
    return ServingRun(rate, result, m, metric_rows(result, m, rate), kv_curves(result, m), timeline_bars(result))


def serving_view(
    project: str, rates: list[float | None], results: list[ServingResult], best_rate: float | None
) -> ServingView:
    """The view of one simulation (``rates`` = [rate], or [None] for a trace) or of a sweep. Without an
    SLO every request "meets" it, so no rate is marked best."""
    config = results[0].config
    if config.slo_ttft_s is None and config.slo_tpot_s is None:
        best_rate = None
    runs = [shape_run(res, rate) for rate, res in zip(rates, results, strict=True)]
    curve_rates = [r if r is not None else 0.0 for r in rates]
    latency = latency_curves(curve_rates, [r.metrics for r in runs], config, best_rate)
    chosen = rates.index(best_rate) if best_rate is not None and best_rate in rates else 0
    notes = list(dict.fromkeys(n for res in results for n in res.notes))
    return ServingView(project, runs, latency, chosen, notes, sum(res.wall_time_s for res in results))


def _nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)
