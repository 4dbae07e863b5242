"""The exposed part of an overlapped collective as a collective the engines can time: the bytes of the same
collective that take the seconds left uncovered.

A pass hands the engines each collective as (kind, bytes), and they time it on its group. A collective that
runs beside compute shows only its time beyond the cover, ``total − cover``. Charging that as the collective
carrying the fraction ``(total − cover) / total`` of its bytes pays its fixed latency (launch, per-step
handshakes) a second time — the part a small all-to-all is made of (an 8-GPU all-to-all of a few KB takes
~10 µs: DeepEP issue #303) — so a collective mostly hidden showed as much as its whole latency. Here the bytes
are chosen so that the collective takes the uncovered seconds themselves (``seconds`` is monotone in the
bytes); when those are below the collective's own floor (what it takes for almost no bytes, its latency), the
nearer of nothing and that floor shows. Cached per timing function: a model's identical layers ask the same.
"""

from __future__ import annotations

from collections.abc import Callable
from weakref import WeakKeyDictionary

STEPS = 40  # at most this many steps; the bytes to 2^-40 of the whole, below a byte up to a terabyte
_CACHE: WeakKeyDictionary[Callable[[float], float], dict[tuple[float, float], float]] = WeakKeyDictionary()


def bytes_for(seconds: Callable[[float], float], nbytes: float, shown_s: float) -> float:
    """Bytes of the collective of ``nbytes`` (timed by ``seconds``) that take ``shown_s``: ``nbytes`` when it
    shows whole; below its floor, 0 or the floor's few bytes, whichever is nearer; else solved (``_bisect``)."""
    if nbytes <= 0 or shown_s <= 0:
        return 0.0
    if shown_s >= seconds(nbytes):
        return nbytes
    cache = _CACHE.setdefault(seconds, {})
    hit = cache.get((nbytes, shown_s))
    if hit is None:
        hit = cache[(nbytes, shown_s)] = _bisect(seconds, nbytes, shown_s)
    return hit


def _bisect(seconds: Callable[[float], float], nbytes: float, shown_s: float) -> float:
    """False position on [0, nbytes]: a collective of one algorithm takes its latency plus bytes over its
    bandwidth, so the first interpolation lands (two timings more); a size-dependent choice of algorithm or
    protocol (NCCL's) bends the line, and the bracket, halved when an end stalls, still closes in."""
    tiny = nbytes * 2.0**-STEPS
    lo, f_lo = tiny, seconds(tiny)
    if f_lo >= shown_s:  # the collective takes longer for next to no bytes
        return tiny if shown_s >= f_lo / 2 else 0.0
    hi, f_hi = nbytes, seconds(nbytes)
    side = 0
    for _ in range(STEPS):
        mid = lo + (shown_s - f_lo) * (hi - lo) / (f_hi - f_lo) if f_hi > f_lo else 0.5 * (lo + hi)
        if not lo < mid < hi:
            mid = 0.5 * (lo + hi)
        f_mid = seconds(mid)
        if abs(f_mid - shown_s) <= 1e-12 * shown_s or hi - lo <= tiny:
            return mid
        if f_mid < shown_s:
            lo, f_lo = mid, f_mid
            if side == -1:  # Illinois: the same end twice, so halve the other's weight
                f_hi = shown_s + 0.5 * (f_hi - shown_s)
            side = -1
        else:
            hi, f_hi = mid, f_mid
            if side == 1:
                f_lo = shown_s - 0.5 * (shown_s - f_lo)
            side = 1
    return 0.5 * (lo + hi)
