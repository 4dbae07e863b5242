"""Pareto fronts: the points no other point beats on every objective at once.

A point dominates another when it is at least as good on every objective and strictly better on one
(Deb, "Multi-Objective Optimization using Evolutionary Algorithms", 2001, §2.4). Equal points do not
dominate each other, so duplicates on the front are all kept.

Sort-based, never all pairs: a point that dominates another comes before it in lexicographic order
(no worse everywhere and better somewhere), so after one sort a point need only be compared with the
front found so far. One objective is a minimum, two a sweep with a running minimum (O(n log n)), three
Kung's sweep over a staircase (O(n log n) comparisons), more a block filter against the growing front
(numpy, a block of points at a time: O(n × front)).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

Sense = Literal["min", "max"]
BLOCK_CELLS = 1 << 21  # front × block comparisons held at once by the block filter


def dominated(values: np.ndarray) -> np.ndarray:
    """``values[i, j]`` is point i on objective j, all to be minimised; True where a point is dominated."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    if n == 0:
        return np.zeros(0, dtype=bool)
    k = values.shape[1] if values.ndim == 2 else 1
    values = values.reshape(n, k)
    if k == 0:
        return np.zeros(n, dtype=bool)
    if k == 1:
        return values[:, 0] > values[:, 0].min()
    if k == 2:
        return _dominated_2d(values)
    if k == 3:
        return _dominated_3d(values)
    return _dominated_block(values)


def _dominated_2d(values: np.ndarray) -> np.ndarray:
    """Sorted by (first, second): a point is dominated by one with a smaller first objective and no
    larger second (the running minimum of the second over earlier groups), or by one with the same first
    and a smaller second (the minimum of its group, which sorts first in it)."""
    a, b = values[:, 0], values[:, 1]
    order = np.lexsort((b, a))
    a, b = a[order], b[order]
    new_group = np.empty(len(a), dtype=bool)
    new_group[0] = True
    new_group[1:] = a[1:] != a[:-1]
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(len(a)), 0))
    running_min = np.minimum.accumulate(b)
    before = np.concatenate([[np.inf], running_min])[group_start]  # min of b over smaller first objectives
    out = np.empty(len(a), dtype=bool)
    out[order] = ((group_start > 0) & (before <= b)) | (b > b[group_start])
    return out


def _dominated_3d(values: np.ndarray) -> np.ndarray:
    """Kung's sweep: in order of the first objective, a staircase of the (second, third) projections
    seen so far (second rising, third falling) answers "does an earlier point weakly beat this one on
    the other two?" by one bisection. Points tied on the first objective are settled among themselves
    by the two-objective sweep and join the staircase together, after they are all judged."""
    order = np.lexsort(values.T[::-1])
    v = values[order]
    a = v[:, 0]
    n = len(v)
    out_sorted = np.zeros(n, dtype=bool)
    bs: list[float] = []  # the staircase: bs rising, cs falling
    cs: list[float] = []
    starts = np.flatnonzero(np.concatenate([[True], a[1:] != a[:-1]])).tolist() + [n]
    b_all, c_all = v[:, 1].tolist(), v[:, 2].tolist()
    for lo, hi in zip(starts, starts[1:], strict=False):
        if hi - lo > 1:
            out_sorted[lo:hi] = _dominated_2d(v[lo:hi, 1:])
        for i in range(lo, hi):
            j = bisect_right(bs, b_all[i])
            if j and cs[j - 1] <= c_all[i]:
                out_sorted[i] = True
        for i in range(lo, hi):
            if out_sorted[i]:
                continue
            b, c = b_all[i], c_all[i]
            j = bisect_right(bs, b)
            if j and cs[j - 1] <= c:  # a tied point of this group already stands for it
                continue
            end = j
            while end < len(bs) and cs[end] >= c:  # the steps it covers (second ≥ b, third ≥ c)
                end += 1
            start = j - 1 if j and bs[j - 1] == b else j  # same second, larger third: covered too
            bs[start:end] = [b]
            cs[start:end] = [c]
    out = np.empty(n, dtype=bool)
    out[order] = out_sorted
    return out


def _dominated_block(values: np.ndarray) -> np.ndarray:
    """Lexicographic order, then blocks: each block is filtered against the front of the blocks before
    it (only front points need checking: whoever dominates a point is dominated by, or is, a front
    point that sorts earlier), then against itself; its survivors join the front."""
    n = len(values)
    order = np.lexsort(values.T[::-1])
    v = values[order]
    out_sorted = np.zeros(n, dtype=bool)
    front = np.empty((0, v.shape[1]))
    lo = 0
    while lo < n:
        size = int(np.clip(BLOCK_CELLS // max(len(front), 1), 64, 1024))
        block = v[lo : lo + size]
        dom = np.zeros(len(block), dtype=bool)
        if len(front):
            dom = _any_dominates(front, block)
        alive = np.flatnonzero(~dom)
        cand = block[alive]
        if len(cand) > 1:
            dom[alive[_any_dominates(cand, cand)]] = True
        front = np.concatenate([front, block[~dom]])
        out_sorted[lo : lo + len(block)] = dom
        lo += len(block)
    out = np.empty(n, dtype=bool)
    out[order] = out_sorted
    return out


def _any_dominates(by: np.ndarray, points: np.ndarray) -> np.ndarray:
    """For each of ``points``: does any row of ``by`` dominate it?"""
    le = by[:, None, :] <= points[None, :, :]
    lt = by[:, None, :] < points[None, :, :]
    return np.any(le.all(axis=2) & lt.any(axis=2), axis=0)


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
    rows = [[float(points[i][k]) for k, _ in objectives] for i in usable]
    values = np.array(rows).reshape(len(usable), len(objectives))
    keep = ~dominated(values * signs)
    return [i for i, k in zip(usable, keep, strict=True) if k]
