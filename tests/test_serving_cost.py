"""The serving iteration cost model prices a batch as ``tilewright run`` prices the same passes."""

from __future__ import annotations

import numpy as np
import pytest
from tilewright.engine.io.presets import load_project_preset
from tilewright.engine.ir import Project
from tilewright.engine.serving.cost_model import IterationCostModel, Work, decode, split_micro_batches
from tilewright.engine.simulate import make_plan, simulate

from tests.engine_cases import dgx, llama_inference, small_wafer


def _infer(project: Project, mapping: dict | None = None, **inference) -> Project:
    data = project.model_dump(mode="json")
    data["run"] |= {"engine": "analytic", "contention": False, "mode": "infer"}
    data["run"]["inference"] = (data["run"].get("inference") or {}) | inference
    data["mapping"] |= mapping or {}
    return Project.model_validate(data)


def _preset(name: str) -> Project:
    return load_project_preset(name)


def _moe(ep: int, pp: int = 1) -> Project:
    """A small mixture-of-experts decoder on a DGX A100, its ``ep`` expert ranks over dp = ep replicas."""
    data = llama_inference().model_dump(mode="json")
    data["workload"]["moe"] = {"experts": 8, "top_k": 2, "expert_ffn": 1408}
    data["mapping"] |= {"tp": 1, "pp": pp, "dp": ep, "global_batch": ep, "ep": ep}
    return Project.model_validate(data)


CASES = {
    "gpu tp4": (llama_inference(), {}, 3),
    "gpu tp1 (one segment: host dispatch and device time meet)": (llama_inference(), {"tp": 1}, 2),
    "pipeline of 2": (dgx(tp=2, pp=2, dp=1), {}, 1),
    "wafer tiles streaming edge DRAM": (small_wafer(), {}, 1),
    # tt-transformers prefills prompts one after another (``PrefillOrder.sequential``)
    "tiled chip, sequential prefill": (_preset("wormhole-n150-llama2-7b-inference"), {}, 3),
    # 2-D tensor parallelism over a mesh of chips; the decode program's own collectives on padded user rows
    "tiled mesh, 2-D collectives": (_preset("wormhole-galaxy-llama3-70b-inference"), {}, 3),
    # data-parallel attention, the experts over 4 ranks: their all-to-alls in every MoE layer (plan.served_experts)
    "expert parallel ep 4": (_moe(4), {}, 3),
    "expert parallel ep 2, pipeline of 2": (_moe(2, pp=2), {}, 1),
    "expert parallel ep 2 of tensor groups of 2": (_moe(2), {"tp": 2}, 3),
    "tiled mesh, tt-transformers decode": (
        _preset("wormhole-galaxy-llama3-70b-inference"), {"tp_axes_collectives": "tt-transformers"}, 3
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_prefill_batch_and_its_decode_steps_cost_what_run_says(name):
    base, mapping, batch = CASES[name]
    prompt, output = 40, 12
    project = _infer(base, mapping, batch=batch, prompt_tokens=prompt, output_tokens=output)
    plan = make_plan(project)
    model = IterationCostModel(plan, batch * prompt)  # the prefill's token count is a table point
    metrics = simulate(project, plan=plan).metrics_json()
    assert model.iteration_seconds([Work(prompt, prompt, 1)] * batch) == pytest.approx(metrics["prefill_s"], rel=1e-9)
    steps = [model.iteration_seconds([decode(prompt + k + 1)] * batch) for k in range(output - 1)]
    assert np.mean(steps) == pytest.approx(metrics["tpot_s"], rel=1e-6)


def test_between_table_points_the_interpolated_cost_stays_close_to_the_exact_one():
    plan = make_plan(_infer(llama_inference()))
    coarse = IterationCostModel(plan, 4096)
    for n in (100, 777, 1500, 3001):
        exact = IterationCostModel(plan, n)  # n is its table's last point
        work = [Work(n, n, 1)]
        assert coarse.iteration_seconds(work) == pytest.approx(exact.iteration_seconds(work), rel=0.01)


def test_batching_shares_the_weights_a_mixed_batch_costs_less_than_its_parts_apart():
    model = IterationCostModel(make_plan(_infer(llama_inference())), 2048)
    prefill = [Work(256, 512, 1)]
    decodes = [decode(300 + 7 * i) for i in range(24)]
    mixed = model.iteration_seconds(prefill + decodes)
    alone = model.iteration_seconds(prefill), model.iteration_seconds(decodes)
    assert max(alone) < mixed < sum(alone)


def test_longer_contexts_and_more_sequences_cost_more_once_the_device_not_the_host_sets_the_pace():
    model = IterationCostModel(make_plan(_infer(llama_inference())), 2048)
    short, long = model.iteration_seconds([decode(100)] * 64), model.iteration_seconds([decode(30_000)] * 64)
    assert short < long < model.iteration_seconds([decode(30_000)] * 128)
    # pure decode replays a captured graph (runtime_graphs 'decode'): no host dispatch, so context shows even
    # for two sequences; a mixed batch runs eager and waits for the host to issue kernels (8 µs each): flat
    assert model.iteration_seconds([decode(100)] * 2) < model.iteration_seconds([decode(200)] * 2)
    assert model.iteration_seconds([Work(8, 100, 1)] * 2) == model.iteration_seconds([Work(8, 200, 1)] * 2)


def test_micro_batches_for_a_pipeline_balance_the_new_tokens():
    work = [Work(100, 100, 1), Work(60, 60, 1), Work(50, 50, 1), decode(9), decode(9)]
    groups = split_micro_batches(work, 2)
    assert len(groups) == 2 and sorted(len(g) for g in groups) == [2, 3]
    assert sorted(sum(w.tokens for w in g) for g in groups) == [102, 110]  # largest first onto the lightest
    assert split_micro_batches(work, 1) == [work]


def test_a_sequential_prefill_runtime_runs_prompts_in_turn_but_batches_decode_and_verify_steps():
    base = _infer(_preset("wormhole-n150-llama2-7b-inference"), batch=4, prompt_tokens=64, output_tokens=8)
    batched = _infer(base, prefill="batched")
    seq_model, batch_model = (IterationCostModel(make_plan(p), 512) for p in (base, batched))
    assert seq_model.sequential and not batch_model.sequential
    steps = [Work(4, 100 + i, 4) for i in range(4)] + [decode(90), decode(91)]  # speculative verify steps, decodes
    assert seq_model.iteration_seconds(steps) == pytest.approx(batch_model.iteration_seconds(steps), rel=1e-12)
    prompts = [Work(64, 64, 1)] * 4
    one = seq_model.iteration_seconds(prompts[:1]) - seq_model.runtime_step_s
    assert seq_model.iteration_seconds(prompts) == pytest.approx(4 * one + seq_model.runtime_step_s, rel=1e-9)
    assert batch_model.iteration_seconds(prompts) < seq_model.iteration_seconds(prompts)
