"""Expert parallelism when serving (``plan.served_experts``): data-parallel attention, the experts over the ep ranks.

Expected numbers come from the model's dimensions, not from the engine: a routed expert of a SwiGLU MoE block holds
3 · hidden · expert_ffn weights, n tokens each picking top_k of E experts reach E · (1 − (1 − k/E)ⁿ) of them, and a
rank's all-to-all buffer is its own tokens' top_k hidden vectors.
"""

from __future__ import annotations

import pytest
from tilewright.engine.ir import Project
from tilewright.engine.plan.program import InferenceProgram
from tilewright.engine.serving import ServingConfig, ServingSetupError, build_instances
from tilewright.engine.simulate import make_plan, simulate

from tests.engine_cases import llama_inference

EXPERTS, TOP_K, EXPERT_FFN = 8, 2, 1408
LAYERS, HIDDEN = 4, 1024  # llama_inference's
BATCH, PROMPT, OUTPUT = 3, 40, 12
BF16 = 2


def _moe(ep: int, engine: str = "analytic", **mapping) -> Project:
    data = llama_inference().model_dump(mode="json")
    data["workload"]["moe"] = {"experts": EXPERTS, "top_k": TOP_K, "expert_ffn": EXPERT_FFN}
    data["mapping"] |= {"tp": 1, "pp": 1, "dp": max(ep, 1), "global_batch": max(ep, 1), "ep": ep} | mapping
    data["run"] |= {"engine": engine, "contention": True, "dtype": "bf16"}
    data["run"]["inference"] = {"batch": BATCH, "prompt_tokens": PROMPT, "output_tokens": OUTPUT}
    return Project.model_validate(data)


def _reached(tokens: int) -> float:
    return EXPERTS * (1.0 - (1.0 - TOP_K / EXPERTS) ** tokens)


EXPERT_BYTES = 3 * HIDDEN * EXPERT_FFN * BF16  # one routed expert's weights


def test_each_rank_holds_the_dense_weights_and_its_share_of_the_experts():
    one, four = (make_plan(_moe(ep)).stages[0].state.weights for ep in (1, 4))
    assert one - four == pytest.approx(LAYERS * EXPERTS * EXPERT_BYTES * (1 - 1 / 4), rel=1e-12)


def test_a_decode_step_exchanges_its_tokens_twice_per_moe_layer_over_the_ep_ranks():
    ps = InferenceProgram(make_plan(_moe(4))).phases.pass_for(0, 1)
    sent = [s.comm for s in ps.segments if s.comm]
    assert sent == [("ep:all-to-all", BATCH * TOP_K * HIDDEN * BF16)] * (2 * LAYERS)  # dispatch and combine
    alone = InferenceProgram(make_plan(_moe(1))).phases.pass_for(0, 1)
    assert not any(s.comm for s in alone.segments)


def test_a_decode_step_reads_the_local_experts_the_ranks_tokens_reach():
    """ep 1: the batch reaches E(1 − (1 − k/E)^b) experts, all on the device; ep 4: the 4 ranks' tokens reach
    E(1 − (1 − k/E)^(4b)), a quarter of them local. Everything else a step reads is the same."""
    read = {ep: sum(s.local_bytes for s in InferenceProgram(make_plan(_moe(ep))).phases.pass_for(0, 1).segments)
            for ep in (1, 4)}
    expected = LAYERS * EXPERT_BYTES * (_reached(BATCH) - _reached(4 * BATCH) / 4)
    assert read[1] - read[4] == pytest.approx(expected, rel=1e-9)


def test_both_engines_book_the_all_to_all_as_expert_comm():
    times = [simulate(_moe(4, engine)).metrics_json()["time_breakdown_s"] for engine in ("analytic", "event")]
    assert times[0]["ep_comm"] > 0 and times[0]["tp_comm"] == 0
    assert times[1]["ep_comm"] == pytest.approx(times[0]["ep_comm"], rel=1e-9)
    assert simulate(_moe(1)).metrics_json()["time_breakdown_s"]["ep_comm"] == 0


def test_serving_plans_one_ep_group_and_serves_every_rank_as_a_replica():
    project = _moe(2, dp=4, global_batch=4)
    (instance,) = build_instances(project, ServingConfig().token_budget, None)
    assert instance.replicas == 4  # each rank its own requests and KV pages
    assert (instance.plan.project.mapping.dp, instance.plan.ep) == (2, 2)
    assert instance.kv.weights_bytes == make_plan(project).stages[0].state.weights


@pytest.mark.parametrize(
    ("mapping", "disaggregate"),
    [({}, (2, 2)),  # the groups are re-cut by tensor parallelism: no replicas to share the experts over
     ({"tp": 2, "dp": 1, "global_batch": 1, "expert_tp": 1}, None)],  # ep over tensor ranks: a training layout
    ids=["disaggregated", "folded over tp"],
)
def test_expert_parallelism_serving_does_not_run_is_refused(mapping, disaggregate):
    with pytest.raises(ServingSetupError) as exc:
        build_instances(_moe(2, **mapping), ServingConfig().token_budget, disaggregate)
    assert exc.value.setting == "mapping.ep"


def test_run_infer_takes_ep_over_the_data_parallel_ranks_of_a_preset(capsys):
    """``run --mode infer --ep`` on the Mixtral preset (dp 16): each device holds its stage's dense weights and
    1/ep of its experts; --ep is refused only where it would fold over tensor ranks (no data-parallel ranks)."""
    import json

    from tilewright.engine.cli import main

    base = ["run", "mixtral-8x7b-dgx-h100", "--mode", "infer", "--engine", "analytic", "--json", "--quiet"]

    def weights(ep: str) -> float:
        assert main([*base, "--ep", ep]) == 0
        return json.loads(capsys.readouterr().out)["memory_breakdown_bytes"]["weights"]

    per_stage = 32 // 4 * 8 * 3 * 4096 * 14336 * BF16  # 8 layers of 8 experts of 3 · hidden · expert_ffn weights
    assert weights("1") - weights("8") == pytest.approx(per_stage * (1 - 1 / 8), rel=1e-12)
