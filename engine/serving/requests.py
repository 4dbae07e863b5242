"""The requests a serving simulation replays: Poisson arrivals (seeded) or a trace file.

A trace is JSON — a list of objects, or ``{"requests": [...]}`` — or CSV with a header row. Each request
has an arrival time in seconds (``arrival_s``; ``arrival`` or ``arrival_time`` also accepted), a prompt
length and an output length in tokens (``prompt_tokens``, ``output_tokens``). Requests are sorted by
arrival. A bad file is an ``InputError`` naming the file, the request and the field.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tilewright.engine.errors import InputError, Problem

ARRIVAL_NAMES = ("arrival_s", "arrival", "arrival_time")
MAX_ARRIVAL_S = 1e7  # ~116 days: simulated seconds as float64 still resolve ~2 ns, below any kernel's time


@dataclass(frozen=True, slots=True)
class RequestSpec:
    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int


def poisson_requests(
    rate: float,
    count: int,
    prompt_tokens: int,
    output_tokens: int,
    seed: int = 0,
) -> list[RequestSpec]:
    """``count`` requests with exponential gaps of mean 1/``rate`` seconds, the first at its first gap."""
    if rate <= 0:
        raise ValueError(f"rate {rate} must be positive")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, count)
    times = np.cumsum(gaps)
    return [RequestSpec(i, float(t), prompt_tokens, output_tokens) for i, t in enumerate(times)]


def load_trace(path: str | Path) -> list[RequestSpec]:
    """Requests of a JSON or CSV trace, sorted by arrival."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(source, f"not a text file ({exc.reason})") from None
    if Path(path).suffix.lower() == ".csv" or (text.lstrip()[:1] not in ("[", "{")):
        rows = _csv_rows(text, source)
        where = "row"
    else:
        rows = _json_rows(text, source)
        where = "requests"
    if not rows:
        raise InputError(source, "no requests")
    out = [_request(i, row, source, where) for i, row in enumerate(rows)]
    out.sort(key=lambda r: (r.arrival_s, r.id))
    return out


def _json_rows(text: str, source: str) -> list:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(source, f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    if isinstance(data, dict):
        if "requests" not in data:
            raise InputError(
                source, Problem("requests", 'missing: a trace is a list of requests or {"requests": [...]}')
            )
        data = data["requests"]
    if not isinstance(data, list):
        raise InputError(source, Problem("requests", f"must be a list, not {type(data).__name__}"))
    return data


def _csv_rows(text: str, source: str) -> list[dict]:
    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames:
        raise InputError(source, "empty CSV: a header row names arrival_s, prompt_tokens, output_tokens")
    return [dict(row) for row in reader]


def _request(i: int, row: object, source: str, where: str) -> RequestSpec:
    at = f"{where}[{i}]" if where == "requests" else f"row {i + 2}"
    if not isinstance(row, dict):
        raise InputError(
            source,
            Problem(at, f"must be an object with arrival_s, prompt_tokens, output_tokens, not {type(row).__name__}"),
        )
    key = next((k for k in ARRIVAL_NAMES if k in row), None)
    if key is None:
        raise InputError(source, Problem(f"{at}.arrival_s", "missing (seconds since the trace starts)"))
    arrival = _number(row[key], f"{at}.{key}", source)
    if not math.isfinite(arrival) or arrival < 0 or arrival > MAX_ARRIVAL_S:
        raise InputError(source, Problem(f"{at}.{key}", f"{row[key]} must be a time within 0–{MAX_ARRIVAL_S:.0e} s"))
    tokens = []
    for name in ("prompt_tokens", "output_tokens"):
        if name not in row:
            raise InputError(source, Problem(f"{at}.{name}", "missing (tokens)"))
        value = _number(row[name], f"{at}.{name}", source)
        if value != int(value) or value < 1:
            raise InputError(source, Problem(f"{at}.{name}", f"{row[name]} must be a whole number of tokens ≥ 1"))
        tokens.append(int(value))
    return RequestSpec(i, arrival, tokens[0], tokens[1])


def _number(value: object, path: str, source: str) -> float:
    if isinstance(value, bool):
        raise InputError(source, Problem(path, f"{value} must be a number"))
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise InputError(source, Problem(path, f"{value!r} must be a number"))
