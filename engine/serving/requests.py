"""The requests a serving simulation replays: Poisson arrivals (seeded) or a trace file.

A trace is JSON — a list of objects, or ``{"requests": [...]}`` — or CSV with a header row. Each request
has an arrival time in seconds (``arrival_s``; ``arrival`` or ``arrival_time`` also accepted), a prompt
length and an output length in tokens (``prompt_tokens``, ``output_tokens``). Requests are sorted by
arrival. A bad file is an ``InputError`` naming the file, the request (``requests[i]``, or the CSV's line
``row N``) and the field. Parsing is strict, as project files are: in JSON a number is a JSON number (not
``"0"``, not ``true``) and token counts are whole numbers; a key or column the trace format has no use for,
a second arrival name, or a CSV row with more or fewer cells than its header is refused rather than
silently dropped (a misspelt ``output_token`` would otherwise be ignored).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tilewright.engine.errors import InputError, Problem
from tilewright.engine.results.text import counted

ARRIVAL_NAMES = ("arrival_s", "arrival", "arrival_time")
LENGTH_NAMES = ("prompt_tokens", "output_tokens")
KNOWN_NAMES = (*ARRIVAL_NAMES, *LENGTH_NAMES)
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
    suffix = Path(path).suffix.lower()
    if not text.strip():
        kind = {".json": "JSON file", ".csv": "CSV file"}.get(suffix, "file")
        raise InputError(source, f"empty {kind}: a trace is a JSON list of requests, or CSV whose header row names "
                                 "arrival_s, prompt_tokens, output_tokens")
    strict = suffix != ".csv" and text.lstrip()[:1] in ("[", "{")
    if strict:
        rows = _json_rows(text, source)
        where = "requests"
    else:
        rows = _csv_rows(text, source)
        where = "row"
    if not rows:
        raise InputError(source, "no requests")
    out = [_request(i, row, source, where, strict) for i, row in enumerate(rows)]
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
        extra = sorted(set(data) - {"requests"})
        if extra:
            raise InputError(source, Problem(extra[0], 'unknown key: a trace object holds only "requests"'))
        data = data["requests"]
    if not isinstance(data, list):
        raise InputError(source, Problem("requests", f"must be a list, not {type(data).__name__}"))
    return data


def _csv_rows(text: str, source: str) -> list[dict]:
    """The CSV's rows as dicts; a header naming a column twice or one the format has no use for, and a row
    whose cells do not match the header's, are refused naming the line."""
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if not header or not any(h.strip() for h in header):
        raise InputError(source, "empty CSV: a header row names arrival_s, prompt_tokens, output_tokens")
    names = [h.strip() for h in header]
    for name in names:
        if name not in KNOWN_NAMES:
            raise InputError(source, Problem(f"row 1.{name}" if name else "row 1", _unknown(name or "''")))
        if names.count(name) > 1:
            raise InputError(source, Problem(f"row 1.{name}", "named twice in the header"))
    rows = []
    for cells in reader:
        if not cells:  # a blank line
            continue
        if len(cells) != len(names):
            raise InputError(source, Problem(f"row {reader.line_num}", f"{counted(len(cells), 'cell')}, the header "
                                             f"names {len(names)} ({', '.join(names)})"))
        rows.append((reader.line_num, dict(zip(names, cells, strict=True))))
    return rows


def _unknown(name: str) -> str:
    fields = ", ".join(KNOWN_NAMES[:1] + LENGTH_NAMES)
    return f"unknown field {name}: a request has {fields} ({ARRIVAL_NAMES[0]} may be spelt " \
        f"{' or '.join(ARRIVAL_NAMES[1:])})"


def _request(i: int, row: object, source: str, where: str, strict: bool) -> RequestSpec:
    if where == "requests":
        at = f"requests[{i}]"
    else:
        line, row = row  # type: ignore[misc]  # (line number, cells by column)
        at = f"row {line}"
    if not isinstance(row, dict):
        raise InputError(
            source,
            Problem(at, f"must be an object with arrival_s, prompt_tokens, output_tokens, not {type(row).__name__}"),
        )
    for name in row:
        if name not in KNOWN_NAMES:
            raise InputError(source, Problem(f"{at}.{name}", _unknown(str(name))))
    arrivals = [k for k in ARRIVAL_NAMES if k in row]
    if len(arrivals) > 1:
        raise InputError(source, Problem(f"{at}.{arrivals[1]}", f"a second arrival time beside {arrivals[0]}"))
    key = arrivals[0] if arrivals else None
    if key is None:
        raise InputError(source, Problem(f"{at}.arrival_s", "missing (seconds since the trace starts)"))
    arrival = _number(row[key], f"{at}.{key}", source, strict)
    if not math.isfinite(arrival) or arrival < 0 or arrival > MAX_ARRIVAL_S:
        raise InputError(source, Problem(f"{at}.{key}", f"{row[key]} must be a time within 0–{MAX_ARRIVAL_S:.0e} s"))
    tokens = []
    for name in ("prompt_tokens", "output_tokens"):
        if name not in row:
            raise InputError(source, Problem(f"{at}.{name}", "missing (tokens)"))
        value = _number(row[name], f"{at}.{name}", source, strict)
        if not math.isfinite(value) or value != int(value) or value < 1 or (strict and isinstance(row[name], float)):
            raise InputError(source, Problem(f"{at}.{name}", f"{row[name]} must be a whole number of tokens ≥ 1"))
        tokens.append(int(value))
    return RequestSpec(i, arrival, tokens[0], tokens[1])


def _number(value: object, path: str, source: str, strict: bool) -> float:
    """A JSON number (``strict``: a string is refused, as project files refuse ``"8"``), or a CSV cell's text."""
    if isinstance(value, bool):
        raise InputError(source, Problem(path, f"{value} must be a number"))
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and strict:
        raise InputError(source, Problem(path, f"{value!r} is a string; give a JSON number"))
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise InputError(source, Problem(path, f"{value!r} must be a number"))
