"""Max-min fair rates by progressive filling (SimGrid's flow model), with link-usage multiplicities.

A flow may cross a link more than once (a collective's ring passes a link once per hop that uses it),
so each flow carries ``usage[link] = u`` and consumes ``u · rate`` of that link. All unfrozen flows rise
together until some link saturates; flows crossing it freeze at that rate; repeat.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

EPS = 1e-12


def max_min_rates(
    usages: Sequence[Mapping[int, float]], capacity: Sequence[float] | Mapping[int, float]
) -> list[float]:
    """Rates for flows with the given link usages; a flow on no link gets infinity."""
    n = len(usages)
    rates = [0.0] * n
    active = set(range(n))
    load: dict[int, float] = {}
    flows_on: dict[int, list[int]] = {}
    for f, usage in enumerate(usages):
        if not usage:
            rates[f] = float("inf")
            active.discard(f)
            continue
        for link, u in usage.items():
            load[link] = load.get(link, 0.0) + u
            flows_on.setdefault(link, []).append(f)
    spare = {link: float(capacity[link]) for link in load}
    while active:
        step = min(spare[link] / w for link, w in load.items() if w > EPS)
        step = max(step, 0.0)
        for f in active:
            rates[f] += step
        saturated = []
        for link, w in load.items():
            if w > EPS:
                spare[link] -= step * w
                if spare[link] <= EPS * max(1.0, capacity[link]):
                    saturated.append(link)
        frozen = {f for link in saturated for f in flows_on[link] if f in active}
        if not frozen:  # numerical guard: freeze the tightest link's flows
            link = min((lk for lk, w in load.items() if w > EPS), key=lambda lk: spare[lk] / load[lk])
            frozen = {f for f in flows_on[link] if f in active}
        for f in frozen:
            active.discard(f)
            for link, u in usages[f].items():
                load[link] -= u
        load = {lk: w for lk, w in load.items() if w > EPS}
    return rates


def independent_rates(usages: Sequence[Mapping[int, float]], capacity: Sequence[float]) -> list[float]:
    """Rates with contention switched off: each flow alone on its route."""
    return [min((capacity[lk] / u for lk, u in usage.items()), default=float("inf")) for usage in usages]


def max_min_rates_arrays(rows: Sequence[tuple[np.ndarray, np.ndarray]], capacity: np.ndarray) -> list[float]:
    """``max_min_rates`` for flows given as (link ids, usages) arrays, over a numpy ``capacity``.

    The same progressive filling, operation for operation, so the rates are bit-identical: links are
    numbered in order of first appearance (the dict order ``max_min_rates`` iterates in), every link's
    load is summed and reduced flow by flow in the same order, and frozen flows come from the same set."""
    return progressive_fill(rows, capacity)[0]


def progressive_fill(
    rows: Sequence[tuple[np.ndarray, np.ndarray]], capacity: np.ndarray
) -> tuple[list[float], bool]:
    """``max_min_rates_arrays`` and whether the numerical guard picked a link to freeze.

    The guard is the one step that depends on the order of the flows beyond the order loads are summed
    in (it takes the first of equally tight links), so the flow network only reuses a solution for
    another order of the same flows when the guard did not act (``FlowNetwork._solve``)."""
    n = len(rows)
    rates = [0.0] * n
    guarded = False
    active = set(range(n))
    for f, (links, _u) in enumerate(rows):
        if not len(links):
            rates[f] = float("inf")
            active.discard(f)
    if not active:
        return rates, guarded
    uniq, first, inverse = np.unique(
        np.concatenate([links for links, _u in rows]), return_index=True, return_inverse=True
    )
    rank = np.empty(len(uniq), dtype=np.intp)
    rank[np.argsort(first, kind="stable")] = np.arange(len(uniq))
    local = rank[inverse]
    m = len(uniq)
    load = np.zeros(m)
    cols = []
    start = 0
    for _links, u in rows:
        idx = local[start : start + len(u)]
        start += len(u)
        load[idx] += u
        cols.append((idx, u))
    on = np.zeros((n, m), dtype=bool)
    for f, (idx, _u) in enumerate(cols):
        on[f, idx] = True
    cap = np.empty(m)
    cap[rank] = capacity[uniq]
    spare = cap.copy()
    limit = EPS * np.maximum(1.0, cap)
    alive = load > EPS
    while active:
        step = max(float((spare[alive] / load[alive]).min()), 0.0)
        for f in active:
            rates[f] += step
        spare[alive] -= step * load[alive]
        saturated = np.flatnonzero(alive & (spare <= limit))
        frozen = {f for link in saturated.tolist() for f in np.flatnonzero(on[:, link]).tolist() if f in active}
        if not frozen:  # numerical guard: freeze the tightest link's flows
            guarded = True
            cand = np.flatnonzero(alive)
            link = int(cand[np.argmin(spare[cand] / load[cand])])
            frozen = {f for f in np.flatnonzero(on[:, link]).tolist() if f in active}
        for f in frozen:
            active.discard(f)
            idx, u = cols[f]
            load[idx] -= u
        alive &= load > EPS
    return rates, guarded
