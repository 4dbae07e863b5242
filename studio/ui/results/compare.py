"""Two runs side by side: key metrics with their difference, in units, and whether the change is better.
No Qt: the compare view only lays these rows out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilewright.studio.model.palette import category_label
from tilewright.studio.ui.results.summary import format_bytes, format_metric, label
from tilewright.studio.units import SECONDS, format_value

# (metric key, True when higher is better; None when neither is)
KEY_METRICS: tuple[tuple[str, bool | None], ...] = (
    ("iteration_time_s", False),
    ("samples_per_s", True),
    ("tokens_per_s", True),
    ("ttft_s", False),
    ("tpot_s", False),
    ("mfu", True),
    ("hfu", True),
    ("peak_memory_bytes", False),
    ("host_peak_memory_bytes", False),
    ("energy_j", False),
    ("average_power_w", False),
    ("devices", None),
)


@dataclass(frozen=True)
class CompareRow:
    label: str
    a: str
    b: str
    delta: str  # b − a, with unit
    relative: str  # (b − a) / a, in %
    better: bool | None  # True: b is better; False: worse; None: equal or no preference


def _sign(delta: float) -> str:
    return "+" if delta > 0 else "−" if delta < 0 else "±"


def signed_delta(key: str, delta: float) -> str:
    sign = _sign(delta)
    size = abs(delta)
    if key in ("mfu", "hfu"):
        return f"{sign}{100 * size:.1f} pp"  # percentage points: a difference of two percentages
    if key.endswith("_bytes"):
        return f"{sign}{format_bytes(size)}"
    if key.endswith("_s") and not key.endswith("per_s"):
        return f"{sign}{format_value(size, SECONDS)}"
    return f"{sign}{format_metric(key, size)}"


def _row(key: str, label_text: str, a: Any, b: Any, higher_better: bool | None) -> CompareRow:
    both = isinstance(a, int | float) and isinstance(b, int | float)
    if not both:
        return CompareRow(label_text, format_metric(key, a), format_metric(key, b), "", "", None)
    delta = float(b) - float(a)
    relative = f"{_sign(delta)}{100 * abs(delta) / abs(a):.1f} %" if a else ""
    better = None if higher_better is None or delta == 0 else (delta > 0) == higher_better
    return CompareRow(label_text, format_metric(key, a), format_metric(key, b), signed_delta(key, delta),
                      relative, better)


def compare_rows(a: dict[str, Any], b: dict[str, Any]) -> list[CompareRow]:
    """Key metrics, then the time, device-memory and (when offloaded) host-memory breakdowns, for two
    ``metrics_json()`` dicts."""
    rows = [_row(k, label(k), a.get(k), b.get(k), hb) for k, hb in KEY_METRICS if k in a or k in b]
    groups = (("time_breakdown_s", "time"), ("memory_breakdown_bytes", "device memory"),
              ("host_memory_breakdown_bytes", "host memory"))
    for group, title in groups:
        part_a, part_b = a.get(group) or {}, b.get(group) or {}
        unit_key = "x_s" if group.endswith("_s") else "x_bytes"
        for k in [*part_a, *(k for k in part_b if k not in part_a)]:
            if part_a.get(k) or part_b.get(k):
                rows.append(_row(unit_key, f"{title}: {category_label(k)}", part_a.get(k, 0.0),
                                 part_b.get(k, 0.0), False))
    oom_a, oom_b = isinstance(a.get("oom"), dict), isinstance(b.get("oom"), dict)
    if oom_a or oom_b:
        rows.append(CompareRow("out of memory", "yes" if oom_a else "no", "yes" if oom_b else "no", "", "",
                               None if oom_a == oom_b else oom_a))
    full_a, full_b = isinstance(a.get("host_oom"), dict), isinstance(b.get("host_oom"), dict)
    if full_a or full_b:
        rows.append(CompareRow("host memory full", "yes" if full_a else "no", "yes" if full_b else "no", "", "",
                               None if full_a == full_b else full_a))
    return rows
