"""QK-norm, attention sinks and the gated shared expert through both engines.

The three spec fields the Qwen3, gpt-oss and Qwen2-MoE imports set add ops (``qk_norm``,
``shared_expert_gate``) and parameters (sinks on the softmax): the analytic and the event engine must
still agree on every category, and the added ops must cost time (the QK-norm's heads are split by
tensor parallelism, like attention's)."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.simulate import make_plan, simulate

SPEC = LlamaSpec(
    name="qk-sinks-gated", layers=4, hidden=1024, heads=16, kv_heads=4, head_dim=128, ffn=2816, vocab=32000,
    seq_len=1024, sliding_window=256, sliding_window_layers="even",
    moe={"experts": 8, "top_k": 2, "expert_ffn": 704, "shared_experts": 1, "shared_expert_ffn": 1408},
)
NEW = {"qk_norm": True, "attention_sinks": True}


def _project(spec: LlamaSpec, engine: str = "analytic", **mapping: object) -> Project:
    m = {"tp": 2, "dp": 4, "ep": 2, "micro_batch": 2, "global_batch": 16} | mapping
    return Project(name="t", hardware=load_system("dgx-a100"), workload=spec, mapping=Mapping(**m),
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _with_new_fields() -> LlamaSpec:
    moe = SPEC.moe.model_copy(update={"shared_expert_gate": True})
    return SPEC.model_copy(update=NEW | {"moe": moe})


@pytest.mark.parametrize(("sp", "windows"), [(False, "even"), (True, 3)])
def test_both_engines_agree(sp: bool, windows: str | int) -> None:
    spec = _with_new_fields().model_copy(update={"sliding_window_layers": windows})
    a = simulate(_project(spec, sequence_parallel=sp))
    e = simulate(_project(spec, "event", sequence_parallel=sp))
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
    for category in a.time_breakdown_s.keys() | e.time_breakdown_s.keys():
        expected = a.time_breakdown_s.get(category, 0.0)
        assert e.time_breakdown_s.get(category, 0.0) == pytest.approx(expected, rel=1e-9, abs=1e-15), category


def test_the_new_ops_cost_time_and_the_sinks_only_parameters() -> None:
    base = simulate(_project(SPEC))
    sinks = simulate(_project(SPEC.model_copy(update={"attention_sinks": True})))
    full = simulate(_project(_with_new_fields()))
    assert full.time_breakdown_s["compute"] > base.time_breakdown_s["compute"]
    # sinks: heads parameters per block, no FLOPs and no stored activations
    plan, plan_sinks = make_plan(_project(SPEC)), make_plan(_project(SPEC.model_copy(update={"attention_sinks": True})))
    assert plan_sinks.workload.params - plan.workload.params == SPEC.layers * SPEC.heads
    assert plan_sinks.workload.flops_per_sample == plan.workload.flops_per_sample
    assert sinks.time_breakdown_s["compute"] == pytest.approx(base.time_breakdown_s["compute"], rel=1e-3)
