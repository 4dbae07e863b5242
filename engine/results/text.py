"""How the engine's plain-text reports write numbers, counts and cut-off text.

One style for every line a user reads (``tilewright run``, ``serve``, ``search``, ``presets``): 3–4
significant digits, thousands separators, no scientific notation for ordinary magnitudes ("10,170
tokens/s" beside "1,169 tokens/s", not "1.017e+04" beside "1169"), a noun that agrees with its count ("1
device"), and text shortened at a word boundary with an ellipsis. JSON outputs never go through here: they
keep full precision.
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
