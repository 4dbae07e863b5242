"""Turn what the event engine recorded into a ``Result``: metrics, breakdowns, series, critical path."""

from __future__ import annotations

import numpy as np
from tilewright.engine.plan.plan import Plan
from tilewright.engine.results.result import MemoryTrack, Result, Series, memory_verdict, window_means
from tilewright.engine.sim.network import FlowNetwork
from tilewright.engine.sim.recorder import Recorder

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
        lane = rec.timeline.lane(s.name, group, detail=f"{cap / 1e9:.0f} GB/s")
        for i, t in enumerate(s.times):
            if s.values[i] <= 0:
                continue
            t_next = s.times[i + 1] if i + 1 < len(s.times) else end
            rec.slice(lane, t, t_next - t, "network", f"{100 * s.values[i]:.0f} %", -1, -1, -1)
    return out


def _link_name(plan: Plan, lk: int) -> str:
    link = plan.hw.links[lk]
    return f"{link.src} → {link.dst}"


def assemble(
    plan: Plan,
    rec: Recorder,
    net: FlowNetwork | None,
    *,
    engine: str,
    events: int,
    wall: float,
    critical: list[tuple[str, float, float]] | None = None,
    lane_devices: dict[str, list[str]] | None = None,
    series: bool = True,
) -> Result:
    project = plan.project
    finish = max((led.finish for led in rec.ledgers.values()), default=0.0)
    critical_stage = max(rec.ledgers, key=lambda r: rec.ledgers[r].finish) if rec.ledgers else 0
    ledger = rec.ledgers.get(critical_stage)
    critical_steps = critical or []
    breakdown = dict(ledger.times) if ledger else {}
    breakdown["bubble"] = breakdown.get("bubble", 0.0) + max(0.0, finish - (ledger.finish if ledger else 0.0))
    memory: list[MemoryTrack] = []
    for r, led in sorted(rec.ledgers.items()):
        st = plan.stages[r]
        times, columns = led.columns()
        node = plan.hw.devices[st.groups[0][0]].node
        memory.append(MemoryTrack(device=node, capacity_bytes=st.capacity, times=times, by_category=columns))
    peak_row, oom = memory_verdict(memory)
    links = link_series(plan, net, finish, rec) if net is not None and series else []
    m = project.mapping
    samples = m.global_batch if project.run.mode.value == "train" else project.run.inference.batch
    return Result(
        project=project.name,
        mode=project.run.mode.value,
        engine=engine,
        iteration_time_s=finish,
        samples_per_iteration=samples,
        tokens_per_sample=plan.workload.tokens_per_sample,
        model_flops_per_iteration=plan.model_flops,
        hardware_flops_per_iteration=plan.hardware_flops,
        devices=m.tp * m.pp * m.dp,
        peak_flops_per_device=plan.stages[0].dev.peak_flops,
        memory_breakdown_bytes=peak_row,
        time_breakdown_s=breakdown,
        events=events,
        wall_time_s=wall,
        oom=oom,
        timeline=rec.timeline,
        link_utilisation=links,
        memory=memory,
        critical_path=critical_path(critical_steps, ledger, finish),
        lane_devices=dict(lane_devices or {}),
        notes=list(plan.notes),
    )


def critical_path(steps: list[tuple[str, float, float]], ledger, finish: float) -> list[tuple[str, float, float]]:
    """The pipeline steps that set the finish, then the stage's tail (reduction, optimizer)."""
    out = list(steps)
    end = steps[-1][1] + steps[-1][2] if steps else 0.0
    if finish - end > 1e-12:
        out.append(("gradient reduction + optimizer step", end, finish - end))
    return out
