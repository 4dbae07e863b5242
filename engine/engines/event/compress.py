"""Shrink link-usage patterns for the max-min solver without changing any rate.

Two links crossed by exactly the same patterns, with the same multiplicities, impose constraints that
differ only in capacity, so only the tighter one can bind. Keeping one representative per such class
is exact. A pipeline send between two DGX nodes crosses 16 InfiniBand links that all fall into two
classes, so the solver sees 2 links instead of 16.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping


def compress_patterns(
    patterns: Iterable[Mapping[int, float]], capacity: list[float]
) -> dict[int, dict[int, float]]:
    """Map ``id(pattern)`` → reduced usage, for a fixed universe of patterns."""
    pats = list({id(p): p for p in patterns}.values())
    signature: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for i, p in enumerate(pats):
        for link, u in p.items():
            signature[link].append((i, u))
    best: dict[tuple, int] = {}
    for link, sig in signature.items():
        key = tuple(sig)
        cur = best.get(key)
        if cur is None or capacity[link] < capacity[cur] or (capacity[link] == capacity[cur] and link < cur):
            best[key] = link
    keep = set(best.values())
    return {id(p): {lk: u for lk, u in p.items() if lk in keep} for p in pats}
