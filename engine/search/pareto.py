"""Pareto fronts: the points no other point beats on every objective at once.

A point dominates another when it is at least as good on every objective and strictly better on one
(Deb, "Multi-Objective Optimization using Evolutionary Algorithms", 2001, §2.4). Equal points do not
dominate each other, so duplicates on the front are all kept. O(n²) comparisons, vectorised per point:
sweeps have thousands of points, not millions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

Sense = Literal["min", "max"]


def dominated(values: np.ndarray) -> np.ndarray:
    """``values[i, j]`` is point i on objective j, all to be minimised; True where a point is dominated."""
    n = len(values)
    out = np.zeros(n, dtype=bool)
    for i in range(n):
        no_worse = np.all(values <= values[i], axis=1)
        better = np.any(values < values[i], axis=1)
        out[i] = bool(np.any(no_worse & better))
    return out


def pareto_front(points: Sequence[Mapping[str, float]], objectives: Sequence[tuple[str, Sense]]) -> list[int]:
    """Indices (in input order) of the non-dominated points. A point missing an objective, or with a
    NaN there, takes no part."""
    usable = [
        i for i, p in enumerate(points)
        if all(p.get(k) is not None and np.isfinite(float(p[k])) for k, _ in objectives)
    ]
    if not usable:
        return []
    signs = np.array([1.0 if sense == "min" else -1.0 for _, sense in objectives])
    values = np.array([[float(points[i][k]) for k, _ in objectives] for i in usable]) * signs
    keep = ~dominated(values)
    return [i for i, k in zip(usable, keep, strict=True) if k]
