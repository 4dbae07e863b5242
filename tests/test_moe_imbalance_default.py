"""An unset ``mapping.expert_imbalance`` resolves, for dropless routing, to the statistical floor of balanced
routing probabilities (``plan.routing_imbalance``): the busiest ep rank's expected token-slots over the mean
when every token's top-k is a uniformly random k-subset of the experts (Megatron-Core's force-balanced router).
A value the project sets wins; capacity-padded routing stays balanced."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.routing_imbalance import expected_max_normal, resolved_imbalance, routing_floor
from tilewright.engine.simulate import make_plan, simulate

EXPERTS, TOP_K, EP, MB, SEQ = 16, 4, 8, 2, 1024
SPEC = GPTSpec(name="moe", layers=2, hidden=512, heads=8, seq_len=SEQ, vocab=32000,
               moe={"experts": EXPERTS, "top_k": TOP_K, "expert_ffn": 256})


def _project(capacity_factor: float | None = None, engine: str = "analytic", **mapping: object) -> Project:
    spec = SPEC.model_copy(update={"moe": SPEC.moe.model_copy(update={"capacity_factor": capacity_factor})})
    m = Mapping(tp=1, dp=EP, ep=EP, micro_batch=MB, global_batch=2 * MB * EP, **mapping)
    return Project(name="moe", hardware=load_system("dgx-h100"), workload=spec, mapping=m,
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def test_expected_maximum_of_normals_matches_the_tables():
    """E[max of n standard normals]: 1/√π for n = 2 (closed form); 1.0294 (4), 1.4236 (8), 2.0697 (32) from
    the published tables (Harter 1961, 'Expected values of normal order statistics', Biometrika 48)."""
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-6)
    for n, table in ((4, 1.02938), (8, 1.42360), (32, 2.06967)):
        assert expected_max_normal(n) == pytest.approx(table, abs=2e-5)


def test_floor_derived_by_hand_for_one_run():
    """ep 8 ranks of 2 of the 16 experts each, top-4, micro-batch 2 × 1024 tokens on each rank (tp 1):
    T = 8 · 2 · 1024 = 16,384 tokens over the group. A token puts a hypergeometric number of its 4 slots on a
    rank: mean 4/8 = 0.5, variance 4 · (1/8)(7/8) · (16 − 4)/(16 − 1) = 0.35. A rank's load: 8,192 ± √(16,384
    · 0.35) = 75.7 token-slots; the 8 loads sum to T · 4, so the busiest is 1.4236 · √(8/7) standard deviations
    up: 1 + 1.4236 · 1.0690 · 75.73 / 8,192 = 1.01407."""
    sd = math.sqrt(16_384 * 4 * (1 / 8) * (7 / 8) * 12 / 15)
    by_hand = 1 + 1.42360 * math.sqrt(8 / 7) * sd / 8_192
    assert by_hand == pytest.approx(1.01407, abs=1e-5)
    assert resolved_imbalance(_project(), MB, EP, 1) == pytest.approx(by_hand, rel=1e-6)


def test_floor_matches_sampled_random_routing():
    """Monte Carlo of the force-balanced router itself: each token's top-k of fresh normal logits, the ranks'
    loads counted, the busiest over the mean averaged over draws."""
    rng = np.random.default_rng(7)
    experts, top_k, ep, tokens, draws = 16, 4, 4, 1000, 400
    ratios = []
    for _ in range(draws):
        chosen = np.argsort(rng.standard_normal((tokens, experts)), axis=1)[:, :top_k]
        load = np.bincount((chosen // (experts // ep)).ravel(), minlength=ep)
        ratios.append(load.max() / load.mean())
    assert routing_floor(experts, top_k, ep, tokens) - 1 == pytest.approx(np.mean(ratios) - 1, abs=0.003)


def test_floor_shrinks_with_tokens_and_vanishes_without_expert_parallelism():
    assert routing_floor(128, 8, 8, 10_000) > routing_floor(128, 8, 8, 40_000) > 1.0
    # four times the tokens: half the excess (the spread goes as 1/√T)
    assert (routing_floor(128, 8, 8, 40_000) - 1) == pytest.approx((routing_floor(128, 8, 8, 10_000) - 1) / 2)
    assert routing_floor(128, 8, 1, 10_000) == 1.0
    assert routing_floor(8, 8, 4, 10_000) == 1.0  # every token on every expert: no fluctuation
    # a handful of tokens: never above the busiest possible rank (all of a token's slots it can hold)
    assert routing_floor(16, 4, 8, 1) <= 8 * 2 / 4


def test_unset_imbalance_is_the_floor_in_the_plan_and_a_set_value_wins():
    """The plan charges the busiest rank the floor when the field is unset (the same plan as setting the floor
    by hand), exactly balanced when 1 is set, the set value otherwise; padded routing stays balanced."""
    floor = resolved_imbalance(_project(), MB, EP, 1)

    def forward_flops(project: Project) -> float:
        return make_plan(project).stages[0].passes[(0, "F")].flops

    unset, balanced = forward_flops(_project()), forward_flops(_project(expert_imbalance=1.0))
    assert unset == pytest.approx(forward_flops(_project(expert_imbalance=floor)), rel=1e-12)
    # only the routed experts' FLOPs scale: by (floor − 1) unset against 0.3 at a set 1.3
    excess_13 = forward_flops(_project(expert_imbalance=1.3)) - balanced
    assert excess_13 > 0
    assert (unset - balanced) / excess_13 == pytest.approx((floor - 1) / 0.3, rel=1e-9)
    padded = _project(capacity_factor=1.0)
    assert resolved_imbalance(padded, MB, EP, 1) == 1.0
    assert forward_flops(padded) == forward_flops(_project(capacity_factor=1.0, expert_imbalance=1.0))


def test_a_saved_project_keeps_the_default_unset():
    """The field stays out of a saved file while unset (``Mapping._quiet``), so a reloaded project resolves the
    floor again; a value given, 1 included, is saved and wins after a reload."""
    m = _project().mapping
    assert "expert_imbalance" not in m.model_dump(mode="json")
    reloaded = _project().model_copy(update={"mapping": Mapping.model_validate(m.model_dump(mode="json"))})
    assert resolved_imbalance(reloaded, MB, EP, 1) == resolved_imbalance(_project(), MB, EP, 1) > 1.0
    balanced = _project(expert_imbalance=1.0).mapping
    assert balanced.model_dump(mode="json")["expert_imbalance"] == 1.0
    again = _project().model_copy(update={"mapping": Mapping.model_validate(balanced.model_dump(mode="json"))})
    assert resolved_imbalance(again, MB, EP, 1) == 1.0


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_both_engines_slow_down_by_the_floor(engine):
    """Both engines run the plan's busiest-rank ops: the unset default is slower than an exactly balanced
    router and faster than the same run at twice the floor's excess."""
    floor = resolved_imbalance(_project(), MB, EP, 1)
    t = {k: simulate(_project(engine=engine, **kw)).iteration_time_s for k, kw in
         (("unset", {}), ("balanced", {"expert_imbalance": 1.0}), ("double", {"expert_imbalance": 2 * floor - 1}))}
    assert t["balanced"] < t["unset"] < t["double"]
