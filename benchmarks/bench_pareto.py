"""Pareto front speed (issue 13): the all-pairs front took 4.8 s at 10k points and 43 s at 30k.

Targets: 2 objectives, 30k points < 0.5 s; also reported: 100k points, and 3 objectives (random and
anti-correlated, a large front). Times include building the value table from dicts, as sweeps do.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from tilewright.engine.search.pareto import pareto_front

CASES = [  # (name, points, objectives, anti-correlated, target s)
    ("2 objectives, 30k", 30_000, 2, False, 0.5),
    ("2 objectives, 100k", 100_000, 2, False, None),
    ("2 objectives, 100k, anti-correlated", 100_000, 2, True, None),
    ("3 objectives, 30k", 30_000, 3, False, None),
    ("3 objectives, 100k", 100_000, 3, False, None),
    ("3 objectives, 100k, anti-correlated", 100_000, 3, True, None),
    ("4 objectives, 30k", 30_000, 4, False, None),
]
SENSES = ("min", "max", "min", "max")


def points(n: int, k: int, anti: bool, rng: np.random.Generator) -> list[dict[str, float]]:
    v = rng.random((n, k))
    if anti:  # most points near the plane sum = 1: a large front
        v[:, -1] = 1.0 - v[:, :-1].sum(axis=1) / (k - 1) + 0.01 * rng.random(n)
    signs = np.array([1.0 if s == "min" else -1.0 for s in SENSES[:k]])
    v = v * signs
    names = [f"o{j}" for j in range(k)]
    return [dict(zip(names, row, strict=True)) for row in v.tolist()]


def main() -> int:
    rng = np.random.default_rng(0)
    failed = False
    print(f"{'case':<40} {'front':>7} {'s':>8} {'target':>7}")
    for name, n, k, anti, target in CASES:
        pts = points(n, k, anti, rng)
        objectives = [(f"o{j}", SENSES[j]) for j in range(k)]
        start = time.perf_counter()
        front = pareto_front(pts, objectives)
        took = time.perf_counter() - start
        verdict = "" if target is None else ("ok" if took < target else "SLOW")
        failed |= verdict == "SLOW"
        print(f"{name:<40} {len(front):>7} {took:>8.3f} {'' if target is None else target:>7} {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
