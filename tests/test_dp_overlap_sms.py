"""The backward beside ``overlap_grad_reduce``'s early bucket loses the SMs NCCL's kernel holds (``perf.comm_sm``,
``Plan.dp_overlap_loss``): derived by hand for one overlapped reduction, and charged alike by the analytic
engine, the event engine and the search's tail."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.project import EngineKind
from tilewright.engine.plan import replica_sync
from tilewright.engine.plan.timing import pass_parts
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan, simulate

from tests.agreement import assert_engines_agree, assert_search_matches_engine, engine_result
from tests.engine_cases import dgx

GPT = GPTSpec(name="g", layers=4, hidden=2048, heads=16, seq_len=2048, vocab=32000)


def _on(project: Project, engine: str) -> Project:
    run = project.run.model_copy(update={"engine": EngineKind(engine), "contention": False})
    return project.model_copy(update={"run": run})


def _slowed(result) -> float:
    """Seconds of stage 0's Gantt slice for its backward slowed beside the gradient reduction."""
    tl = result.timeline
    label = tl.labels.index("backward slowed beside the gradient reduction")
    a = tl.arrays()
    lane = next(i for i, ln in enumerate(tl.lanes) if ln.name.startswith("stage 0"))
    return float(a["dur"][(a["label"] == label) & (a["lane"] == lane)].sum())


def _without_loss(monkeypatch, run):
    """``run()`` with the reduction's SM loss alone taken away (every other SM charge kept)."""
    with monkeypatch.context() as m:
        m.setattr(replica_sync, "overlap_loss", lambda *args: 0.0)
        return run()


def _hand_loss(early_s: float, backward_s: float, units: int, sms: int) -> float:
    """The compute runs on units − sms SMs while the collective runs: it would take backward · u / (u − c)
    if the collective lasted throughout; over the window both share, it loses c / u of each second."""
    window = min(early_s, backward_s * units / (units - sms))
    return window * sms / units


def test_the_loss_of_one_overlapped_reduction_by_hand(monkeypatch):
    """One stage, two replicas on a DGX A100 (108 SMs, 24 NCCL channels): the early bucket (all but the first
    layer's gradients) runs beside the last backward; the iteration grows by what that backward loses, which
    also delays the first layer's bucket launched at its end."""
    project = dgx(pp=1, overlap_grad_reduce=True)
    plan = make_plan(project)
    compute = plan.stages[0].dev.compute
    assert (compute.gemm_units, compute.collective_sms) == (108, 24)  # the preset's, sourced in its comment
    early, late = (b.time(plan.hw) for b in plan.dp_buckets(0, 0))
    passes = plan.stages[0].passes
    backward = sum(pass_parts(plan, 0, passes.get((0, k)))[0] for k in ("R", "B"))
    assert early > 0 and late > 0 and backward > 0
    lost = _hand_loss(early, backward, 108, 24)
    assert plan.dp_overlap_loss(0, 0) == pytest.approx(lost, rel=1e-12)

    # one stage: the last backward ends the pipeline (finish); its early bucket started ``backward`` before.
    # reduced − finish = max(0, early − backward, late) without the loss; max(lost + late, early − backward) with
    # it (the compute ends lost later; the late bucket starts lost later)
    with_loss = engine_result(project)
    without = _without_loss(monkeypatch, lambda: engine_result(project))
    grown = max(lost + late, early - backward) - max(0.0, early - backward, late)
    assert grown > 0
    assert with_loss.iteration_time_s - without.iteration_time_s == pytest.approx(grown, rel=1e-9)
    # the seconds lost are compute's (the backward slowed), not the reduction's
    gained = {k: with_loss.time_breakdown_s[k] - without.time_breakdown_s.get(k, 0.0)
              for k in with_loss.time_breakdown_s}
    assert gained["compute"] == pytest.approx(lost, rel=1e-9)


def test_no_overlap_and_no_sm_count_lose_nothing():
    """Without ``overlap_grad_reduce`` nothing runs beside the backward; a device without an SM count
    (``Compute.collective_sms`` unset) keeps its time."""
    plan = make_plan(dgx(pp=1))
    assert plan.dp_overlap_loss(0, 0) == 0.0
    hw = load_system("dgx-a100")
    project = Project(name="n", hardware=hw, workload=GPT,
                      mapping=Mapping(tp=2, pp=1, dp=2, micro_batch=1, global_batch=8, overlap_grad_reduce=True),
                      run=RunSettings(dtype="bf16"))
    compute = make_plan(project).stages[0].dev.compute
    assert replica_sync.overlap_loss(1e-3, 2e-3, compute.model_copy(update={"collective_sms": None})) == 0.0
    assert replica_sync.overlap_loss(1e-3, 2e-3, compute) == pytest.approx(1e-3 * 24 / 108)


@pytest.mark.parametrize("mapping", [
    {"pp": 1},
    {"pp": 2},
    {"tp": 1, "pp": 4, "schedule": "interleaved-1f1b", "interleave": 2},
    {"pp": 2, "zero": 1, "recompute": "full"},
])
def test_both_engines_charge_it_alike(mapping, monkeypatch):
    """The event engine (contention off) times the loss as the analytic engine: the iteration and every
    category of the breakdown; and the loss costs time."""
    project = dgx(overlap_grad_reduce=True, **mapping)
    analytic, event = simulate(_on(project, "analytic")), simulate(_on(project, "event"))
    assert_engines_agree(analytic, event)
    plan = make_plan(project)
    lost = sum(plan.dp_overlap_loss(0, c) for c in plan.stages[0].chunk_layers)
    assert [_slowed(analytic), _slowed(event)] == pytest.approx([lost, lost], rel=1e-9)
    without = _without_loss(monkeypatch, lambda: simulate(_on(project, "analytic")))
    assert analytic.iteration_time_s > without.iteration_time_s


@pytest.mark.parametrize("c", [Candidate(2, 1, 4, 1), Candidate(1, 2, 4, 1, interleave=2, zero=1)],
                         ids=lambda c: c.label())
def test_the_search_tail_charges_it_as_the_engine(c: Candidate):
    """The search's recurrence (``exact_time`` through ``tail._reduced``) times the overlapped reduction with its
    loss as the analytic engine does."""
    base = Project(name="s", hardware=load_system("dgx-h100"), workload=GPT,
                   mapping=Mapping(global_batch=64, overlap_grad_reduce=True), run=RunSettings(dtype="bf16"))
    p = assert_search_matches_engine(base, c, keep_base=True)
    plan = make_plan(p)
    assert any(plan.dp_overlap_loss(r, ch) > 0 for r, st in enumerate(plan.stages) for ch in st.chunk_layers)
