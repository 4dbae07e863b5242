"""How the engine's plain-text reports write numbers, counts and cut-off text.

One style for every line a user reads (``tilewright run``, ``serve``, ``search``, ``presets``): 3–4
significant digits, thousands separators, no scientific notation for ordinary magnitudes ("10,170
tokens/s" beside "1,169 tokens/s", not "1.017e+04" beside "1169"), a noun that agrees with its count ("1
device"), and text shortened at a word boundary with an ellipsis. A quantity carries its unit at a
readable scale: durations as ns/µs/ms/s ("84 µs", "57.55 s", never "8.393e-05 s" or "57,550 ms"), powers
and the like with an SI prefix ("26 kW"), and a metric named by its unit suffix (``power_w``,
``iteration_time_s``) is written through ``quantity``. JSON outputs never go through here: they keep
full precision.
"""

from __future__ import annotations

import math

# outside [1e-4, 1e12) a number is written in scientific notation (no run of zeros to count)
SMALLEST_PLAIN, LARGEST_PLAIN = 1e-4, 1e12


def number(x: float, digits: int = 4) -> str:
    """``x`` to ``digits`` significant digits, trailing zeros dropped, thousands separated: 1234.5 → "1,234"
    (4), 198_123 → "198,100", 0.58 → "0.58", 0.001337 → "0.001337"; only magnitudes below 1e-4 (which a
    report rarely holds) and from 1e12 on keep an exponent."""
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    kept = float(f"{x:.{digits}g}")  # rounded first: 9999.6 is 10,000 to 4 digits, a magnitude more
    if not SMALLEST_PLAIN <= abs(kept) < LARGEST_PLAIN:
        return f"{x:.{digits}g}"
    if math.floor(math.log10(abs(kept))) >= digits:  # 'g' would switch to an exponent: print the integer
        return f"{kept:,.0f}"
    return f"{kept:,.{digits}g}"


def duration(seconds: float) -> str:
    """A time at a scale a person reads: "0 s", "12.5 ns", "83.93 µs", "4.2 ms", "57.55 s", "8,684 s".
    Below a second the largest of ns/µs/ms that keeps the number ≥ 1; from a second on, seconds (a run's
    iteration time is compared in seconds across lines)."""
    if not math.isfinite(seconds) or seconds == 0:
        return f"{number(seconds)} s"
    a = abs(seconds)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if a >= scale * (1 - 5e-5) or scale == 1e-9:  # 0.99999 s rounds to "1 s", not "1,000 ms"
            return f"{number(seconds / scale)} {unit}"
    raise AssertionError("unreachable")


_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si(value: float, unit: str) -> str:
    """``value`` with an SI prefix from k to T: si(26_000, "W") → "26 kW"; below 1,000 unprefixed."""
    if math.isfinite(value):
        for scale, prefix in _PREFIXES:
            if abs(value) >= scale * (1 - 5e-5):
                return f"{number(value / scale)} {prefix}{unit}"
    return f"{number(value)} {unit}"


# a metric's unit from its name's suffix, as the engine's JSON names them (``power_w``, ``ttft_s``)
_UNIT_SUFFIXES = {
    "_s": duration,
    "_w": lambda v: si(v, "W"),
    "_j": lambda v: si(v, "J"),
    "_bytes": lambda v: f"{number(v / 2**30)} GiB",
    "_usd": lambda v: f"${number(v)}",
    "_mm2": lambda v: f"{number(v)} mm²",
}


def quantity(name: str, value: object) -> str:
    """``value`` of the metric or field ``name`` with the unit its suffix names ("power_w" → "26 kW",
    "iteration_time_s" → "1.23 s", "samples_per_s" → "36.51 samples/s", "mfu" → "0.4123"); other values as
    they are (strings) or as plain numbers (a swept field such as ``mapping.tp``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    field = name.rsplit(".", 1)[-1]
    if field.endswith("_bytes_per_s"):  # a bandwidth: "2 TB/s", not "2e+12 bandwidth bytes/s"
        return si(float(value), "B/s")
    if field.endswith("_per_s"):  # a rate, named by what it counts: "samples_per_s" → "36.51 samples/s"
        return f"{number(float(value))} {field[: -len('_per_s')].replace('_', ' ')}/s"
    for suffix in _UNIT_SUFFIXES:
        if field.endswith(suffix):
            return _UNIT_SUFFIXES[suffix](float(value))
    return number(float(value))


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """"1 device", "8 devices", "3,072 devices" (``plural`` for irregular nouns: "batch", "batches")."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def shorten(text: str, width: int) -> str:
    """``text`` if it fits in ``width`` characters, else cut at the last word boundary that leaves room
    for "…" (trailing punctuation dropped); a single word longer than ``width`` is cut inside it."""
    if len(text) <= width:
        return text
    head = text[: width - 1]
    cut = head.rfind(" ")
    if cut > 0:
        head = head[:cut]
    return head.rstrip(" ,;:–—-(") + "…"
