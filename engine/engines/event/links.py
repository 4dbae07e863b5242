"""Link utilisation series of an event run, busiest first, and Gantt lanes for ``MAX_LINK_LANES`` links,
each coloured by the category that carried most of its bytes (expert all-to-all, pipeline sends, DRAM, …).

Which links get lanes: the busiest for each category that loaded any link, the categories taking links in
turn (``laned_links``), so a collective whose links are not the run's busiest — the expert all-to-all on a
node's NVLinks while the data-parallel reduction fills the NICs — still has lanes the studio can attribute it
from. The budget is the same, so the recorder's slices and memory are too.
"""

from __future__ import annotations

import numpy as np
from tilewright.engine.engines.event.network import FlowNetwork
from tilewright.engine.engines.event.recorder import Recorder
from tilewright.engine.plan.plan import Plan
from tilewright.engine.results.result import Series, window_means

CARRIED = {  # what a link lane's traffic mostly was, by category
    "tp_comm": "tensor-parallel collectives",
    "pp_comm": "pipeline sends",
    "dp_comm": "data-parallel reductions",
    "ep_comm": "expert all-to-all",
    "cp_comm": "context ring",
    "memory": "DRAM streams",
}
MAX_LINK_LANES = 64  # links with Gantt lanes: the busiest for each category in turn (``laned_links``)
MAX_LINK_SLICES = 50_000  # past this many utilisation changes, links keep their series but no Gantt slices
MAX_SERIES_POINTS = 500_000  # full-resolution series for the busiest links, within this many points
COARSE_WINDOWS = 64  # every other link: its mean utilisation over this many equal windows


def link_series(plan: Plan, net: FlowNetwork, end: float, rec: Recorder) -> list[Series]:
    """Utilisation (0–1) of every link that carried traffic, busiest first (by bytes over bandwidth),
    so the canvas heat map can colour any of them; the busiest also get Gantt lanes of busy slices.
    Past ``MAX_SERIES_POINTS`` (a long run on a large system has thousands of busy links with thousands
    of changes each), a link's series is its mean over ``COARSE_WINDOWS`` windows: the same average, at
    a coarser time resolution."""
    hw = plan.hw
    carried = net.link_bytes()
    ranked = sorted(
        (lk for lk, b in carried.items() if b > 0), key=lambda lk: (-carried[lk] / hw.links[lk].bandwidth, lk)
    )
    out = []
    slice_budget = MAX_LINK_SLICES
    point_budget = MAX_SERIES_POINTS
    edges = np.linspace(0.0, end, COARSE_WINDOWS + 1) if end > 0 else np.zeros(2)
    per_category = net.link_category_bytes()
    moved_by = net.link_categories(per_category)  # a lane's colour: what carried most of its bytes (ep_comm, …)
    laned = laned_links(ranked, per_category, [hw.links[lk].bandwidth for lk in range(len(hw.links))])
    by_category = net.category_traces([lk for lk in ranked if lk in laned])  # a slice's: what carried most of it then
    coarse_times = edges[:-1].tolist()  # one list shared by every coarse series
    for lk, trace in net.iter_link_traces(ranked):
        cap = hw.links[lk].bandwidth
        link = hw.links[lk]
        point_budget -= len(trace.times)
        if point_budget >= 0 or lk in laned:
            times, values = trace.times.tolist(), (trace.loads / cap).tolist()
        else:
            times, values = coarse_times, (window_means(trace.times, trace.loads, edges) / cap).tolist()
        s = Series(_link_name(plan, lk), "fraction", times, values, capacity=1.0, src=link.src, dst=link.dst)
        out.append(s)
        if lk not in laned:
            continue
        slice_budget -= len(trace.times)
        if slice_budget < 0:
            continue
        group = "memory" if hw.links[lk].kind == "memory" else "links"
        category = moved_by.get(lk, "network")
        detail = f"{cap / 1e9:.0f} GB/s" + (f" · mostly {CARRIED[category]}" if category in CARRIED else "")
        lane = rec.timeline.lane(s.name, group, detail=detail)
        by_time = _dominant(by_category.get(lk, {}), np.asarray(s.times)) if s.times else []
        for i, t in enumerate(s.times):
            if s.values[i] <= 0:
                continue
            t_next = s.times[i + 1] if i + 1 < len(s.times) else end
            rec.slice(lane, t, t_next - t, by_time[i] or category, f"{100 * s.values[i]:.0f} %", -1, -1, -1)
    return out


def laned_links(ranked: list[int], per_category: dict[int, dict[str, float]], bandwidth: list[float],
                budget: int | None = None) -> set[int]:
    """The links that get Gantt lanes, at most ``budget`` (``MAX_LINK_LANES``). Each category that loaded any
    link ranks the links by its own bytes over their bandwidth (``per_category``:
    ``FlowNetwork.link_category_bytes``); the categories then take links in turn, the one with the heaviest
    load on a single link first, each skipping links already taken — so every category gets its busiest links
    while the budget lasts. ``ranked``: every link that carried bytes, busiest first (all of them get lanes
    when they fit the budget)."""
    budget = MAX_LINK_LANES if budget is None else budget
    if len(ranked) <= budget:
        return set(ranked)
    lists: dict[str, list[int]] = {}
    for lk in ranked:
        for category, nbytes in per_category.get(lk, {}).items():
            if nbytes > 0:
                lists.setdefault(category, []).append(lk)
    loads = {c: sorted(((per_category[lk][c] / bandwidth[lk], lk) for lk in found), key=lambda x: (-x[0], x[1]))
             for c, found in lists.items()}
    orders = [[lk for _load, lk in loads[c]] for c in sorted(loads, key=lambda c: -loads[c][0][0])]
    taken: set[int] = set()
    heads = [0] * len(orders)
    while len(taken) < budget:
        moved = False
        for i, order in enumerate(orders):
            while heads[i] < len(order) and order[heads[i]] in taken:
                heads[i] += 1
            if heads[i] < len(order) and len(taken) < budget:
                taken.add(order[heads[i]])
                moved = True
        if not moved:
            break
    return taken


def _dominant(traces: dict, times: np.ndarray) -> list[str]:
    """At each of ``times``, the category with the highest load on the link ("" where none has any)."""
    if not traces:
        return [""] * len(times)
    names = list(traces)
    loads = np.zeros((len(names), len(times)))
    for row, name in enumerate(names):
        tr = traces[name]
        if len(tr.times):
            at = np.searchsorted(tr.times, times, side="right") - 1
            loads[row] = np.where(at >= 0, tr.loads[np.clip(at, 0, None)], 0.0)
    best = loads.argmax(axis=0)
    return [names[b] if loads[b, i] > 0 else "" for i, b in enumerate(best)]


def _link_name(plan: Plan, lk: int) -> str:
    link = plan.hw.links[lk]
    return f"{link.src} → {link.dst}"
