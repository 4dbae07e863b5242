"""Link utilisation series of an event run, busiest first, and Gantt lanes for the busiest links, each
coloured by the category that carried most of its bytes (expert all-to-all, pipeline sends, DRAM, …)."""

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
MAX_LINK_LANES = 64  # the busiest links get Gantt lanes
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
    moved_by = net.link_categories()  # a lane's colour: what carried most of its bytes (ep_comm, memory, …)
    by_category = net.category_traces(ranked[:MAX_LINK_LANES])  # a slice's: what carried most of it then
    coarse_times = edges[:-1].tolist()  # one list shared by every coarse series
    for rank, (lk, trace) in enumerate(net.iter_link_traces(ranked)):
        cap = hw.links[lk].bandwidth
        link = hw.links[lk]
        point_budget -= len(trace.times)
        if point_budget >= 0 or rank < MAX_LINK_LANES:
            times, values = trace.times.tolist(), (trace.loads / cap).tolist()
        else:
            times, values = coarse_times, (window_means(trace.times, trace.loads, edges) / cap).tolist()
        s = Series(_link_name(plan, lk), "fraction", times, values, capacity=1.0, src=link.src, dst=link.dst)
        out.append(s)
        if rank >= MAX_LINK_LANES:
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
