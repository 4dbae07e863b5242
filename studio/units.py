"""Numbers with units, both ways: every figure the studio shows carries its unit, and every figure a user
types may carry one ("2 TB/s", "80 GiB", "400 Gb/s", "1.5 us").

Kept free of Qt so the parsing rules are easy to test and reuse (the inspector, labels and later the
result views all share them).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_PREFIXES: list[tuple[float, str]] = [
    (1e18, "E"),
    (1e15, "P"),
    (1e12, "T"),
    (1e9, "G"),
    (1e6, "M"),
    (1e3, "k"),
    (1.0, ""),
    (1e-3, "m"),
    (1e-6, "µ"),
    (1e-9, "n"),
    (1e-12, "p"),
]
_PREFIX_VALUE = {p: v for v, p in _PREFIXES if p} | {"K": 1e3, "u": 1e-6, "μ": 1e-6}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}


class UnitError(ValueError):
    """A typed value the studio cannot read; the message is shown beside the field."""


@dataclass(frozen=True)
class Unit:
    """How one kind of quantity is shown and read.

    ``symbol`` is the canonical unit ("B/s"); ``aliases`` map other spellings to a factor of the
    canonical unit (so "b/s" is 1/8 of "B/s"); ``prefixed`` says whether SI prefixes apply (they do not
    for mm² or dollars); ``small`` allows sub-unit prefixes (milli…pico), sensible only for seconds.
    """

    symbol: str
    example: str
    aliases: tuple[tuple[str, float], ...] = ()
    prefixed: bool = True
    small: bool = False
    integer: bool = False


BYTES = Unit("B", "80 GB", (("b", 1 / 8), ("bytes", 1.0), ("byte", 1.0)))
BYTES_PER_S = Unit("B/s", "900 GB/s", (("b/s", 1 / 8), ("bps", 1 / 8), ("Bps", 1.0)))
FLOP = Unit("FLOP", "3.6 PFLOP")
FLOPS = Unit("FLOP/s", "312 TFLOP/s", (("FLOPS", 1.0), ("flop/s", 1.0), ("flops", 1.0)))
SECONDS = Unit("s", "1 µs", (("sec", 1.0),), small=True)
WATTS = Unit("W", "700 W")
AREA = Unit("mm²", "826 mm²", (("mm2", 1.0), ("mm^2", 1.0)), prefixed=False)
DOLLARS = Unit("$", "15000 $", (("USD", 1.0), ("usd", 1.0)), prefixed=False)
PJ_PER_BYTE = Unit("pJ/B", "30 pJ/B", prefixed=False)
PJ_PER_BIT = Unit("pJ/bit", "5 pJ/bit", (("pJ/b", 1.0),), prefixed=False)
FRACTION = Unit("", "0.9", prefixed=False)
FACTOR = Unit("", "1.2", prefixed=False)  # a multiple of something (× the mean), not a share of it
COUNT = Unit("", "4", prefixed=False, integer=True)
SAMPLES_PER_S = Unit("samples/s", "120 samples/s")
TOKENS_PER_S = Unit("tokens/s", "250 ktokens/s")


def format_percent(fraction: float) -> str:
    return f"{100 * fraction:.1f} %"


def format_number(value: float, digits: int = 3) -> str:
    """``digits`` significant figures, no trailing zeros, thousands kept plain ("312", "2.04", "1500")."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def format_bytes(value: float) -> str:
    """Sizes of memory contents in binary units, as capacities are stated (12 GiB GDDR6): "59.9 GiB",
    "512 MiB", "1018 MiB", "3 KiB"; plain bytes below a KiB. Every capacity the studio shows (cards,
    captions, memory lines) goes through here, so a line never mixes conventions: "16 TB DDR · 5 TiB HBM"
    (a decimal-round and a binary-round capacity, each shown its own way) read as two unit systems."""
    for prefix, scale in (("Ti", 2.0**40), ("Gi", 2.0**30), ("Mi", 2.0**20), ("Ki", 2.0**10)):
        if abs(value) >= scale:
            return f"{format_number(value / scale)} {prefix}B"
    return f"{format_number(value)} B"


def share_of_capacity(used: float, capacity: float, short: bool = False) -> str:
    """"74.9 % of capacity", or "37.3× capacity" once it is far over (percentages in the thousands blur);
    ``short``: "74.9 %", "37.3×" (in a column that says what it is a share of)."""
    if capacity <= 0:
        return "no capacity given"
    share = used / capacity
    if share >= 2:
        return f"{share:.3g}×" + ("" if short else " capacity")
    return format_percent(share) + ("" if short else " of capacity")


def format_value(value: float | None, unit: Unit, digits: int = 3) -> str:
    """"2.04 TB/s", "80 GB", "1 µs"; ``None`` shows as an em dash so an absent figure is visible."""
    if value is None:
        return "—"
    if unit.integer:
        return str(int(value))
    if not unit.prefixed or value == 0:
        body = format_number(value, digits) if unit.prefixed else _plain(value)
        return f"{body} {unit.symbol}".strip()
    if unit.symbol == "B":
        binary = _binary_bytes(value)
        if binary is not None:
            return binary
    if unit.small and abs(value) < 1e-15:
        return f"≈ 0 {unit.symbol}"  # below a femtosecond: rounding noise, not a duration
    for scale, prefix in _PREFIXES:
        if not unit.small and scale < 1:
            break
        # 999.6 rounds to "1000" at 3 digits; move it up a prefix instead.
        if abs(value) >= scale * 0.9995 or (scale == 1e-12):
            return f"{format_number(value / scale, digits)} {prefix}{unit.symbol}"
    return f"{format_number(value, digits)} {unit.symbol}"


def _is_round(x: float) -> bool:
    return abs(x - round(x, 2)) < 1e-9 * max(1.0, abs(x))


def _binary_bytes(value: float) -> str | None:
    """"32 GiB" for 34359738368 bytes: a capacity that is round in binary but not in decimal prefixes
    is shown the way its datasheet states it (HBM stacks, SRAM banks)."""
    if value < 1024:
        return None
    for scale, _prefix in _PREFIXES:
        if 1 <= scale and abs(value) >= scale * 0.9995:
            if _is_round(value / scale):
                return None
            break
    for prefix, scale in reversed(_BINARY.items()):
        if value >= scale:
            x = value / scale
            return f"{format_number(x, 6)} {prefix}B" if _is_round(x) else None
    if _is_round(value / 1024):
        return f"{format_number(value / 1024, 6)} KiB"
    return None


def _plain(value: float) -> str:
    if float(value).is_integer():
        return f"{int(value)}"
    return format_number(value, 4)


_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")


def parse_value(text: str, unit: Unit) -> float:
    """Read "2 TB/s", "2e12", "400 Gb/s" or "80 GiB" as a number in ``unit``'s canonical unit.

    A bare number is taken in the canonical unit. Raises ``UnitError`` with a reason a person can act on.
    """
    match = _NUMBER.match(text.replace(",", "").replace("_", ""))
    if not match:
        raise UnitError(f"not a number (e.g. {unit.example})")
    number = float(match.group(1))
    suffix = match.group(2)
    if unit.integer:
        if suffix or not number.is_integer():
            raise UnitError("must be a whole number")
        return float(int(number))
    if not suffix:
        return number
    factor = _suffix_factor(suffix, unit)
    if factor is None:
        expected = f"in {unit.symbol}" if unit.symbol else "a plain number"
        raise UnitError(f"unknown unit '{suffix}' (expected {expected}, e.g. {unit.example})")
    return number * factor


def _suffix_factor(suffix: str, unit: Unit) -> float | None:
    names = [(unit.symbol, 1.0), *unit.aliases] if unit.symbol else []
    for name, base in names:
        if suffix == name:
            return base
        if not unit.prefixed or not suffix.endswith(name):
            continue
        prefix = suffix[: -len(name)]
        if prefix in _BINARY and unit.symbol in ("B", "B/s"):
            return base * _BINARY[prefix]
        scale = _PREFIX_VALUE.get(prefix)
        if scale is not None and (scale >= 1 or unit.small):
            return base * scale
    return None


def plural(word: str, n: int) -> str:
    """English plural for component kinds ("switch" → "switches")."""
    if n == 1:
        return word
    if word.endswith(("s", "x", "ch", "sh")):
        return word + "es"
    return word + "s"
