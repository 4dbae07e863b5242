"""Physics the engine must never violate, and the contracts between its two engines."""

from __future__ import annotations

import pytest
from tilewright.engine.simulate import make_plan, simulate

from tests.engine_cases import dgx, llama_inference, small_cluster, small_wafer

CASES = {
    "dgx": dgx,
    "dgx-interleaved": lambda: dgx(pp=2, interleave=2, layers=None) if False else dgx(pp=2, interleave=2),
    "dgx-full-recompute-sp": lambda: dgx(recompute="full", sequence_parallel=True),
    "dgx-selective-zero1": lambda: dgx(recompute="selective", zero=1),
    "dgx-gpipe": lambda: dgx(schedule="gpipe"),
    "dgx-overlap-grad": lambda: dgx(dp=4, overlap_grad_reduce=True),
    "cluster": small_cluster,
    "wafer": small_wafer,
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    project = CASES[request.param]()
    plan = make_plan(project)
    return project, plan, simulate(project, plan)


def test_time_at_least_roofline_and_critical_compute(case):
    _project, plan, res = case
    roofline = res.hardware_flops_per_iteration / (res.devices * res.peak_flops_per_device)
    assert res.iteration_time_s >= roofline
    for r, st in enumerate(plan.stages):  # each stage must at least compute all its micro-batches
        per_mb = sum(ps.compute_s for ps in st.passes.values())
        assert res.iteration_time_s >= plan.micro_batches * per_mb * (1 - 1e-9), r


def test_breakdown_adds_up_to_iteration_time(case):
    _project, _plan, res = case
    assert sum(res.time_breakdown_s.values()) == pytest.approx(res.iteration_time_s, rel=1e-6)


def test_link_utilisation_at_most_one(case):
    _project, _plan, res = case
    for series in res.link_utilisation:
        assert max(series.values, default=0.0) <= 1.0 + 1e-9, series.name


def test_memory_within_capacity_unless_oom(case):
    _project, _plan, res = case
    over = [t for t in res.memory if t.peak() > t.capacity_bytes]
    assert bool(over) == (res.oom is not None)
    if res.oom:
        assert res.oom.need_bytes > res.oom.capacity_bytes


def test_model_flops_match_megatron_formula_for_gpt():
    project = dgx(recompute="full")
    res = simulate(project)
    w = project.workload
    s, h, layers, v, b = w.seq_len, w.hidden, w.layers, w.vocab, project.mapping.global_batch
    with_recompute = 96 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    assert res.hardware_flops_per_iteration == pytest.approx(with_recompute, rel=1e-9)


def test_same_input_same_output():
    a, b = simulate(small_wafer()), simulate(small_wafer())
    ja, jb = a.metrics_json(), b.metrics_json()
    ja.pop("wall_time_s"), jb.pop("wall_time_s")
    assert ja == jb
    assert (a.timeline.arrays()["start"] == b.timeline.arrays()["start"]).all()


@pytest.mark.parametrize("make", [dgx, small_cluster, lambda: dgx(pp=4, dp=2, interleave=2)])
def test_aggregated_equals_per_device_on_symmetric_systems(make):
    agg = make()
    full = make()
    full.run.aggregate = False
    ra, rf = simulate(agg), simulate(full)
    assert rf.iteration_time_s == pytest.approx(ra.iteration_time_s, rel=1e-9)
    assert rf.events > ra.events  # it really simulated more


@pytest.mark.parametrize("name", sorted(CASES))
def test_event_equals_analytic_without_contention(name):
    event = CASES[name]()
    event.run.contention = False
    analytic = CASES[name]()
    analytic.run.contention = False
    analytic.run.engine = "analytic"
    te, ta = simulate(event).iteration_time_s, simulate(analytic).iteration_time_s
    assert ta == pytest.approx(te, rel=1e-9)  # the same steps by the same table: only rounding differs


def test_contention_never_speeds_up():
    free = small_wafer()
    free.run.contention = False
    assert simulate(small_wafer()).iteration_time_s >= simulate(free).iteration_time_s * (1 - 1e-9)


def test_wafer_streams_dram_over_the_noc():
    res = simulate(small_wafer())
    memory_lanes = [s for s in res.link_utilisation if "dram" in s.name]
    assert memory_lanes, "DRAM ports should carry traffic on an SRAM-only wafer"


def test_more_micro_batches_shrink_the_bubble():
    few = simulate(dgx(pp=4, dp=1, global_batch=4)).time_breakdown_s
    many = simulate(dgx(pp=4, dp=1, global_batch=32)).time_breakdown_s
    share = lambda b: b["bubble"] / sum(b.values())  # noqa: E731
    assert share(many) < share(few)


def test_inference_reports_ttft_and_tpot():
    res = simulate(llama_inference())
    m = res.metrics_json()
    assert m["ttft_s"] > m["tpot_s"] > 0
    assert m["memory_breakdown_bytes"]["kv_cache"] > 0
    assert res.iteration_time_s == pytest.approx(m["ttft_s"] + 31 * m["tpot_s"], rel=0.05)


def test_critical_path_is_contiguous_and_spans_the_iteration(case):
    project, _plan, res = case
    if project.run.engine != "event":
        return
    path = res.critical_path
    assert path and path[0][1] == pytest.approx(0.0, abs=1e-12)
    for (_, s0, d0), (_, s1, _) in zip(path, path[1:], strict=False):
        assert s1 == pytest.approx(s0 + d0, rel=1e-9, abs=1e-12)
    assert sum(d for _, _, d in path) == pytest.approx(res.iteration_time_s, rel=1e-9)


def test_overlapping_gradient_reduction_hides_communication():
    plain, overlapped = simulate(dgx(pp=1, dp=8)), simulate(dgx(pp=1, dp=8, overlap_grad_reduce=True))
    assert overlapped.time_breakdown_s["dp_comm"] < plain.time_breakdown_s["dp_comm"]
    assert overlapped.iteration_time_s < plain.iteration_time_s


def test_decode_stays_near_its_memory_bound():
    """A decode step reads every weight once: it must cost about weights / HBM bandwidth, not be charged
    as a badly quantized 8-row GEMM (cuBLAS uses narrow tiles and split-K for skinny products)."""
    from tilewright.engine.io import load_project
    from tilewright.engine.io.presets import preset_path

    project = load_project(preset_path("projects", "llama2-70b-h100-inference"))
    plan = make_plan(project)
    result = simulate(project, plan)
    floor = plan.stages[0].state.weights / plan.stages[0].dev.dram_bandwidth
    assert floor <= result.tpot_s <= 2.5 * floor
