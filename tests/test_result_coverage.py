"""What results carry for the views: the analytic engine's per-stage timeline, and a utilisation series
for every link that carried traffic (so the canvas heat map can colour any link, not only the busiest)."""

from __future__ import annotations

import numpy as np
import pytest
from tilewright.engine.engines.analytic.engine import AnalyticEngine
from tilewright.engine.engines.event.engine import EventEngine
from tilewright.engine.engines.event.simulation import Simulation
from tilewright.engine.engines.result_builder import build_result
from tilewright.engine.plan.program import program_for
from tilewright.engine.simulate import make_plan

from tests.engine_cases import dgx, small_wafer


def _lane_rows(result, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(starts, durations) of one lane's slices, in time order."""
    tl = result.timeline
    a = tl.arrays()
    lane = next(i for i, ln in enumerate(tl.lanes) if ln.name == name)
    rows = np.flatnonzero(a["lane"] == lane)
    return a["start"][rows], a["dur"][rows]


def test_analytic_timeline_has_every_pass_per_stage_without_overlap():
    project = dgx(tp=2, pp=2, dp=1, recompute="full")
    plan = make_plan(project)
    result = AnalyticEngine().run(plan)
    assert set(result.lane_devices) == {f"stage {r}" for r in range(plan.pp)}
    assert sorted(d for nodes in result.lane_devices.values() for d in nodes) == sorted(
        plan.hw.devices[d].node for st in plan.stages for g in st.groups for d in g
    )
    for r in range(plan.pp):
        start, dur = _lane_rows(result, f"stage {r}")
        assert np.all(dur > 0)
        assert np.all(start[1:] >= start[:-1] + dur[:-1] - 1e-12)  # one pass at a time
        # forward, recompute and backward of every micro-batch, then the optimizer step
        assert len(start) >= 3 * plan.micro_batches + 1
    ends = [float(np.max(np.add(*_lane_rows(result, f"stage {r}")))) for r in range(plan.pp)]
    assert abs(max(ends) - result.iteration_time_s) <= 1e-12 * result.iteration_time_s


def test_analytic_timeline_busy_time_matches_its_breakdown():
    project = dgx(tp=2, pp=1, dp=1)
    plan = make_plan(project)
    result = AnalyticEngine().run(plan)
    busy = result.timeline.busy_time(0)
    b = result.time_breakdown_s
    accounted = (
        b["compute"] + b["recompute"] + b["memory_stall"] + b["host_wait"] + b["tp_comm"] + b["optimizer"]
        + b["dp_comm"]
    )
    assert b["host_wait"] > 0  # eager kernels on a small model: the host issues slower than they run
    assert abs(busy - accounted) <= 1e-9 * max(1.0, accounted)


def test_analytic_without_timeline_gives_the_same_numbers():
    plan = make_plan(dgx(tp=2, pp=2, dp=2))
    full, bare = AnalyticEngine().run(plan), AnalyticEngine(timeline=False).run(plan)
    assert len(bare.timeline) == 0 and len(full.timeline) > 0
    assert full.iteration_time_s == bare.iteration_time_s
    assert full.time_breakdown_s == bare.time_breakdown_s


def test_every_link_that_carried_traffic_has_a_series():
    plan = make_plan(small_wafer())
    sim = Simulation(program_for(plan))
    sim.run()
    result = build_result(sim.program, EventEngine().measure(sim))
    carried = {lk for lk, b in sim.net.link_bytes().items() if b > 0}
    assert len(carried) > 64  # more than the Gantt lanes, so the test means something
    names = {s.name for s in result.link_utilisation}
    assert len(names) == len(carried)
    for s in result.link_utilisation:
        assert max(s.values) <= 1.0 + 1e-9
    # busiest first: the mean utilisation never rises down the list
    means = [s.mean(result.iteration_time_s) for s in result.link_utilisation]
    hw = plan.hw
    by_bytes = [sim.net.link_bytes()[lk] / hw.links[lk].bandwidth for lk in sorted(
        carried, key=lambda lk: -sim.net.link_bytes()[lk] / hw.links[lk].bandwidth)]
    assert by_bytes == sorted(by_bytes, reverse=True)
    assert means[0] >= means[-1]


def test_window_means_keep_the_integral():
    from tilewright.engine.results.result import window_means

    times = np.array([0.5, 1.0, 2.5, 4.0])
    values = np.array([2.0, 0.0, 1.0, 3.0])
    edges = np.linspace(0.0, 5.0, 6)
    means = window_means(times, values, edges)
    # by hand: [0,1): 0.5·2 → 1.0; [1,2): 0; [2,3): 0.5·1 → 0.5; [3,4): 1; [4,5): 3
    assert means.tolist() == pytest.approx([1.0, 0.0, 0.5, 1.0, 3.0])
    assert np.sum(means * np.diff(edges)) == pytest.approx(2.0 * 0.5 + 1.0 * 1.5 + 3.0 * 1.0)


def test_links_past_the_point_budget_get_coarse_series_with_the_same_mean(monkeypatch):
    import tilewright.engine.engines.event.links as asm

    plan = make_plan(small_wafer())
    sim = Simulation(program_for(plan))
    sim.run()
    full = build_result(sim.program, EventEngine().measure(sim))
    monkeypatch.setattr(asm, "MAX_SERIES_POINTS", 0)
    monkeypatch.setattr(asm, "MAX_LINK_LANES", 2)
    coarse = build_result(sim.program, EventEngine().measure(sim))
    assert [s.name for s in coarse.link_utilisation] == [s.name for s in full.link_utilisation]
    end = full.iteration_time_s
    exact = 0
    for a, b in zip(full.link_utilisation, coarse.link_utilisation, strict=True):
        if len(b.times) != asm.COARSE_WINDOWS:  # a laned link (``links.laned_links``) stays exact
            exact += 1
            assert b.times == a.times
        assert b.mean(end) == pytest.approx(a.mean(end), rel=1e-9, abs=1e-12)
    assert 0 < exact <= 2
    assert len(coarse.link_utilisation[0].times) == len(full.link_utilisation[0].times)  # the busiest stay exact


def test_metrics_do_not_depend_on_recording_link_series():
    from tilewright.engine.simulate import simulate

    project = small_wafer()
    with_series, without = simulate(project), simulate(project, series=False)
    assert with_series.link_utilisation and not without.link_utilisation
    assert with_series.metrics_json() | {"wall_time_s": 0} == without.metrics_json() | {"wall_time_s": 0}
