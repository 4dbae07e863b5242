"""An imbalanced router (``mapping.expert_imbalance``) sizes the expert all-to-all by its busiest rank
(``plan.experts.busiest``): that rank receives imbalance × its balanced share of token-slots in the dispatch
and sends as many back in the combine, and every rank waits for it; the expert-tensor gather of what it
received grows alike, the permutation of its own tokens does not. Both engines and the search see it."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.experts import dispatch_work, shard_experts
from tilewright.engine.simulate import make_plan, simulate

SEQ, HIDDEN, EXPERTS, TOP_K, MB, TP, EP = 1024, 1024, 8, 2, 2, 2, 4
BF16 = 2
SPEC = GPTSpec(name="moe", layers=2, hidden=HIDDEN, heads=16, seq_len=SEQ, vocab=32000,
               moe={"experts": EXPERTS, "top_k": TOP_K, "expert_ffn": 2 * HIDDEN})


def _project(imbalance: float, engine: str = "analytic") -> Project:
    mapping = Mapping(tp=TP, dp=4, ep=EP, expert_imbalance=imbalance, micro_batch=MB, global_batch=16,
                      sequence_parallel=True)
    return Project(name="imb", hardware=load_system("dgx-a100"), workload=SPEC, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _a2a(plan, kind: str) -> list[float]:
    return [s.comm[1] for s in plan.stages[0].passes[(0, kind)].segments if s.comm and s.comm[0].startswith("ep:")]


@pytest.mark.parametrize("imbalance", [1.0, 1.5, 2.0])
def test_the_busiest_rank_receives_imbalance_times_its_share(imbalance):
    """Per tensor rank and MoE layer: s · b · top_k hidden vectors (bf16) over tp, times the imbalance, in
    the dispatch and in the combine, forward and backward."""
    plan = make_plan(_project(imbalance))
    balanced = SEQ * MB * TOP_K * HIDDEN * BF16 / TP
    for kind in ("F", "B"):
        sizes = _a2a(plan, kind)
        assert len(sizes) == 2 * SPEC.layers
        assert sizes == pytest.approx([imbalance * balanced] * len(sizes))


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_the_exchange_takes_longer_on_an_imbalanced_router(engine):
    even, skewed = simulate(_project(1.0, engine)), simulate(_project(1.5, engine))
    plan = make_plan(_project(1.5))
    per_micro_batch = sum(plan.tp_time(0, 0, "ep:all-to-all", n) for kind in ("F", "B") for n in _a2a(plan, kind))
    assert skewed.time_breakdown_s["ep_comm"] == pytest.approx(plan.micro_batches * per_micro_batch, rel=1e-9)
    assert skewed.time_breakdown_s["ep_comm"] > even.time_breakdown_s["ep_comm"]


def test_engines_agree_on_an_imbalanced_router():
    a, e = simulate(_project(1.5, "analytic")), simulate(_project(1.5, "event"))
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
    assert e.time_breakdown_s["ep_comm"] == pytest.approx(a.time_breakdown_s["ep_comm"], rel=1e-9)


def test_the_gather_of_received_slots_grows_the_permutation_does_not():
    """The expert-tensor group gathers the slots the rank received (imbalance × s · b · top_k · h over the
    group); the permutation before the dispatch reorders the rank's own tokens (balanced); the sort by
    local expert handles what it received."""
    even, skewed = make_plan(_project(1.0)), make_plan(_project(1.5))

    def gathers(plan):
        return [s.comm[1] for s in plan.stages[0].passes[(0, "F")].segments
                if s.comm and s.comm[0] == "all-gather"]

    slots = SEQ * MB * TOP_K * HIDDEN * BF16
    assert slots in [pytest.approx(n) for n in gathers(even)]
    assert 1.5 * slots in [pytest.approx(n) for n in gathers(skewed)]
    up = next(op for op in even.workload.layer_ops(1) if op.name.endswith("experts_up"))
    gpu = even.stages[0].dev.compute
    flat = [o for o in shard_experts([up], EP, 1.0) if o.name == up.name][0]
    busy = [o for o in shard_experts([up], EP, 1.5) if o.name == up.name][0]
    args = (False, MB, TP, EP, BF16, gpu)
    a, b = dispatch_work(flat, *args, framework=False), dispatch_work(busy, *args, framework=False)
    assert b.permute_bytes == pytest.approx(a.permute_bytes) and a.permute_bytes > 0
    assert b.sort_bytes == pytest.approx(1.5 * a.sort_bytes) and a.sort_bytes > 0


def test_the_search_times_an_imbalanced_router_as_run_does():
    """The search's second stage plans its ep candidates (``search.parallel.extended``): with the project's
    imbalance kept on every candidate, each is timed as ``tilewright run`` times its mapping."""
    from tilewright.engine.search.parallel.search import search

    project = _project(1.5).model_copy(update={"mapping": Mapping(expert_imbalance=1.5, micro_batch=MB,
                                                                  global_batch=16)})
    found = search(project, 8, 16, resimulate=False)
    ranked_ep = [r for r in found.ranked if r.candidate.ep > 1]
    assert ranked_ep
    for r in ranked_ep[:2]:
        mapping = r.candidate.mapping(16, project.mapping)
        assert mapping.expert_imbalance == 1.5
        run = simulate(project.model_copy(update={"mapping": mapping}))
        assert r.iteration_time_s == pytest.approx(run.iteration_time_s, rel=1e-9)
        even = simulate(project.model_copy(update={"mapping": mapping.model_copy(update={"expert_imbalance": 1.0})}))
        assert run.time_breakdown_s["ep_comm"] >= even.time_breakdown_s["ep_comm"]  # an overlap may hide both
        plain = mapping.model_copy(update={"overlap_ep_comm": False, "delay_wgrad_compute": False})
        shown = [simulate(project.model_copy(update={"mapping": plain.model_copy(update={"expert_imbalance": f})}))
                 for f in (1.0, 1.5)]
        assert shown[1].time_breakdown_s["ep_comm"] > shown[0].time_breakdown_s["ep_comm"]


def test_one_expert_rank_has_no_busier_rank_than_the_mean():
    """At ep 1 one rank runs every expert over all the routed tokens: the imbalance between experts moves no
    work onto it (its time equals the balanced router's), while at ep > 1 it does."""
    def at(ep: int, imbalance: float) -> float:
        p = _project(imbalance)
        p = p.model_copy(update={"mapping": p.mapping.model_copy(update={"ep": ep})})
        return simulate(p).iteration_time_s

    assert at(1, 1.5) == at(1, 1.0)
    assert at(EP, 1.5) > at(EP, 1.0)
