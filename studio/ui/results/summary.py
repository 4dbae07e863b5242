"""Text of the summary: headline, metric tables, every number with its unit. No Qt, so it is easy to test.

Memory sizes are shown in GiB (capacities are binary: an "80 GB" HBM stack holds 80 GiB), like the
memory view and the command line, so the same peak reads the same everywhere.
"""

from __future__ import annotations

import html
from typing import Any

from tilewright.engine.results.result import ENERGY_PART_NAMES, Result, counts_only
from tilewright.studio.model.palette import category_label
from tilewright.studio.units import (
    FLOP,
    SAMPLES_PER_S,
    SECONDS,
    TOKENS_PER_S,
    WATTS,
    Unit,
    format_bytes,
    format_percent,
    format_value,
    plural,
)

Rows = list[tuple[str, str]]
JOULES = Unit("J", "5 kJ", small=True)
JOULES_PER_TOKEN = Unit("J/token", "40 mJ/token", small=True)
ROWS_PER_COLUMN = 6
GIB = 2.0**30
LABELS = {
    "samples_per_s": "throughput",
    "tokens_per_s": "token throughput",
    "model_flops_per_iteration": "model FLOPs / iteration",
    "wall_time_s": "engine wall time",
    "ttft_s": "time to first token",
    "tpot_s": "time per output token",
    "energy_j": "energy",
    "average_power_w": "average power",
    "average_power_per_device_w": "average power per device (hosts excluded)",
    "host_energy_upper_bound_j": "hosts, at most (rated power, not in the energy)",
    "energy_per_token_j": "energy per token",
    "energy_per_sample_j": "energy per sample",
    "energy_per_request_j": "energy per request",
    "tokens_per_s_per_user": "output tokens/s per user",
    "tokens_per_s_per_device": "output tokens/s per device",
    "host_peak_memory_bytes": "host memory (offloaded)",
}
# shown below (splits), in the notes panel, or in --json and the metrics CSV
SKIPPED = ("energy_sources", "spatial_splits", "notes")
# in the host-memory table, next to the device's: one place for each figure
HOST_KEYS = ("host_peak_memory_bytes", "host_memory_capacity_bytes")
HOST_TITLE = "Host memory (offloaded, per device)"
HOST_FULL_TITLE = "HOST MEMORY FULL"
CONTINUED = "{}, continued"  # the title of a table's later columns: they may wrap onto another line
ENERGY_KEYS = ("energy_j", "average_power_w", "average_power_per_device_w", "energy_per_token_j",
               "energy_per_sample_j", "energy_per_request_j")
POWER_KEYS = ("average_power_w", "average_power_per_device_w")
# the energy table's rows: what each part is, so "static" and "host" read as the power drawn all along
ENERGY_PART_LABELS = ENERGY_PART_NAMES | {"static": "static (idle devices)", "host": "host (node, rated max)"}
UNKNOWN_ENERGY = "not known"
SPLITS_TITLE = "Split over the cores"
RUN_TITLE = "Run"  # the table of headline metrics (an out-of-memory run puts its OUT OF MEMORY table before it)


def format_metric(key: str, value: Any) -> str:
    """A metric by its name's unit suffix, so every number shown carries its unit."""
    if value is None:
        return "—"
    if not isinstance(value, int | float) or isinstance(value, bool):
        return str(value)
    if key in ("mfu", "hfu"):
        return format_percent(value)
    if key.endswith("_bytes"):
        return format_bytes(value)
    if key.endswith("tokens_per_s") or key.startswith("tokens_per_s_per_"):
        return format_value(value, TOKENS_PER_S)
    if key.endswith("samples_per_s"):
        return format_value(value, SAMPLES_PER_S)
    if key.endswith("flops_per_iteration"):
        return format_value(value, FLOP)
    if key.endswith("per_token_j"):
        return format_value(value, JOULES_PER_TOKEN)
    if key.endswith("_j"):
        return format_value(value, JOULES)
    if key.endswith("_w"):
        return format_value(value, WATTS)
    if key.endswith("_s"):
        return format_value(value, SECONDS)
    if key == "devices":
        return f"{int(value)} {plural('device', int(value))}"
    if key == "events":
        return f"{int(value):,} events"
    return f"{value:.4g}"


def label(key: str) -> str:
    if key in LABELS:
        return LABELS[key]
    for suffix in ("_bytes", "_s"):
        if key.endswith(suffix) and key != suffix:
            key = key[: -len(suffix)]
    return key.replace("_", " ").replace("mfu", "MFU").replace("hfu", "HFU")


def energy_known(metrics: dict[str, Any]) -> bool:
    """Whether the run priced any energy: a hardware IR without pJ/byte or pJ/bit figures gives 0 J in
    every part, which is "not known", not "free" (the command line's summary says the same)."""
    parts = metrics.get("energy_breakdown_j")
    return parts is not None and any(parts.values())


def result_tables(result: Result) -> list[tuple[str, Rows]]:
    """Headline metrics, time breakdown and memory breakdown, each a list of (label, value with unit).
    The per-op core splits are not among them: their long descriptions get their own full-width block
    (``split_rows``) instead of squeezing the metric columns."""
    m = result.metrics_json()
    known = energy_known(m)
    partial = counts_only(m["energy_breakdown_j"]) if known else ""
    head = [
        (label(k), UNKNOWN_ENERGY if k in ENERGY_KEYS and not known else format_metric(k, v)
         + (f" ({partial.split(';')[0]})" if k in POWER_KEYS and partial else ""))
        for k, v in m.items() if not isinstance(v, dict) and k not in SKIPPED and k not in HOST_KEYS
    ]
    if m.get("mode") == "infer" and round(result.samples_per_iteration) != 1:  # every request at once
        whole = f"energy (batch of {plural_count(round(result.samples_per_iteration), 'request')})"
        head = [(whole if k == label("energy_j") else k, v) for k, v in head]
    if m.get("mode") == "infer":  # the batch's energy over the tokens it generated
        head = [("energy per output token" if k == label("energy_per_token_j") else k, v) for k, v in head]
    tables = [(RUN_TITLE, head)]
    breakdowns = (("time_breakdown_s", "Time per iteration"), ("memory_breakdown_bytes", "Memory (peak device)"))
    for key, title in breakdowns:
        unit_key = "x_s" if key.endswith("_s") else "x_bytes"
        rows = [(category_label(k), format_metric(unit_key, v)) for k, v in m[key].items() if v]
        if rows:
            tables.append((title, rows))
    if "host_peak_memory_bytes" in m:
        tables.append((HOST_TITLE, host_rows(m)))
    if "energy_breakdown_j" in m and known:
        n = round(result.samples_per_iteration)
        per = ("iteration" if m.get("mode") != "infer" else "request" if n == 1
               else f"batch of {plural_count(n, 'request')}")
        rows = [(ENERGY_PART_LABELS.get(k, k), format_metric("x_j", v))
                for k, v in m["energy_breakdown_j"].items()]
        rows.append(("total", format_metric("energy_j", m["energy_j"])))
        if "energy_per_request_j" in m and n != 1:
            rows.append(("per request", format_metric("energy_per_request_j", m["energy_per_request_j"])))
        tables.append((f"Energy per {per}", rows))
    if result.oom is not None:
        need = format_metric("x_bytes", result.oom.need_bytes)
        have = format_metric("x_bytes", result.oom.capacity_bytes)
        tables.insert(0, ("OUT OF MEMORY", [(result.oom.device, f"needs {need}, has {have}")]))
    if "host_oom" in m:  # the node's host memory overflowed, not the device's own: said so by name
        over = m["host_oom"]
        need, have = format_metric("x_bytes", over["need_bytes"]), format_metric("x_bytes", over["capacity_bytes"])
        tables.insert(0, (HOST_FULL_TITLE, [(over["device"], f"needs {need}, has {have}")]))
    return tables


def host_rows(m: dict[str, Any]) -> Rows:
    """What one device keeps in its node's host memory (``Result.host_memory``): the share's peak against
    its capacity, then the categories held there, each row saying "host" so no one reads it as HBM."""
    rows = [("host peak", format_metric("x_bytes", m["host_peak_memory_bytes"])),
            ("host capacity", format_metric("x_bytes", m["host_memory_capacity_bytes"]))]
    rows += [(f"host {category_label(k)}", format_metric("x_bytes", v))
             for k, v in m["host_memory_breakdown_bytes"].items() if v]
    return rows


def plural_count(n: int, noun: str) -> str:
    return f"{n:,} {plural(noun, n)}"


def split_rows(result: Result) -> Rows:
    """On a grid device, how each op was spread over the cores: ("stage 0, decode · 32 × qkv", split)."""
    return [(f"{sp['where']} · {sp['count']} × {sp['op']}", str(sp["split"])) for sp in result.spatial_splits]


def in_columns(tables: list[tuple[str, Rows]], rows: int = ROWS_PER_COLUMN) -> list[tuple[str, Rows]]:
    """Split long tables into balanced columns of at most ``rows`` rows: the results dock is wide and low.
    A table's later columns are titled "…, continued": in a narrow window they wrap onto the next line,
    away from the first."""
    out: list[tuple[str, Rows]] = []
    for title, body in tables:
        columns = max(1, -(-len(body) // rows))
        per = max(1, -(-len(body) // columns))  # balanced: 8 rows make two columns of 4, not 6 and 2
        for start in range(0, max(len(body), 1), per):
            out.append((title if start == 0 else CONTINUED.format(title), body[start : start + per]))
    return out


def table_html(title: str, rows: Rows) -> str:
    """A titled two-column table; a continuation's title in grey, the labels in grey, values right-aligned."""
    body = "".join(
        f"<tr><td style='color:#566573; padding-right:10px'>{html.escape(k)}</td>"
        f"<td align='right'>{html.escape(v)}</td></tr>"
        for k, v in rows
    )
    head = (f"<span style='color:#808b96'>{html.escape(title)}</span>" if title.endswith(CONTINUED.format(""))
            else f"<b>{html.escape(title) or '&nbsp;'}</b>")
    return f"{head}<table cellspacing='0' cellpadding='1'>{body}</table>"


NOTES_TITLE = "Notes: what the engine assumed or left out"


def notes_html(notes: list[str]) -> str:
    """The result's notes (``Result.notes``: an era's default assumed, an offload's layers, formats applied)
    as a titled list, each note a paragraph of its own: they are sentences, not figures."""
    items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return f"<b>{html.escape(NOTES_TITLE)}</b><ul style='margin-left:-20px'>{items}</ul>"


def headline(result: Result) -> str:
    """One line of HTML with what an architect checks first; an out-of-memory leads, in red."""
    m = result.metrics_json()
    name = html.escape(result.project)
    where = " · ".join(p for p in (name and f"<b>{name}</b>", m.get("mode"), m.get("engine") and
                                   f"{m['engine']} engine", format_metric("devices", m.get("devices"))
                                   if m.get("devices") else "") if p)
    wanted = [("iteration_time_s", "{} per iteration"), ("ttft_s", "TTFT {}"), ("tpot_s", "TPOT {}"),
              ("samples_per_s", "{}"), ("tokens_per_s", "{}"), ("mfu", "MFU {}"),
              ("peak_memory_bytes", "peak memory {}"), ("host_peak_memory_bytes", "host memory {}")]
    if m.get("mode") == "infer":
        wanted = [w for w in wanted if w[0] != "samples_per_s"]  # one request at a time: tokens/s says it
    facts = [template.format(format_metric(key, m[key])) for key, template in wanted if m.get(key) is not None]
    if facts and "iteration_time_s" in m:
        facts[0] = f"<b>{html.escape(format_metric('iteration_time_s', m['iteration_time_s']))}</b> per iteration"
    text = (f"{where} — " if where else "") + " · ".join(html.escape(f) if "<b>" not in f else f for f in facts)
    oom = result.oom
    if oom is not None:
        text = (f"<span style='color:#c0392b'><b>OUT OF MEMORY</b> on {html.escape(oom.device)}: "
                f"needs {format_bytes(oom.need_bytes)}, has {format_bytes(oom.capacity_bytes)}</span> · " + text)
    if "host_oom" in m:
        over = m["host_oom"]
        text = (f"<span style='color:#c0392b'><b>HOST MEMORY FULL</b> for {html.escape(over['device'])}: needs "
                f"{format_bytes(over['need_bytes'])}, has {format_bytes(over['capacity_bytes'])}</span> · " + text)
    return text
