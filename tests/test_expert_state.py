"""ZeRO shards the routed experts' state over the dp / ep replicas that hold the same experts (Megatron-Core's
expert-data-parallel group), every other parameter's over all dp replicas."""

from __future__ import annotations

import pytest
from tilewright.engine.perf.memory import bytes_per_param, params_on_device
from tilewright.engine.plan.experts import routed_experts
from tilewright.engine.simulate import make_plan

from tests.test_expert_parallel import _project


@pytest.mark.parametrize("ep", [1, 2, 4, 8])
def test_zero1_shards_expert_optimizer_state_over_the_expert_data_parallel_group(ep):
    project = _project(ep)  # dp 8, bf16 mixed precision, Adam
    project = project.model_copy(update={"mapping": project.mapping.model_copy(update={"zero": 1})})
    plan = make_plan(project)
    st = plan.stages[0]
    ops = [op for idx in st.chunk_layers.values() for i in idx for op in plan.workload.layer_ops(i)]
    one = make_plan(_project(1))
    all_experts = sum(
        params_on_device(routed_experts(one.workload.layer_ops(i)), 1)
        for idx in one.stages[0].chunk_layers.values() for i in idx
    )
    dense = sum(op.params for op in ops) - all_experts
    adam = bytes_per_param(2, True, project.run.optimizer).optimizer  # 12 B: fp32 master, momentum, variance
    held = all_experts / ep  # this device's experts
    expected = dense * adam / 8 + held * adam / (8 // ep)
    assert st.state.optimizer == pytest.approx(expected, rel=1e-9)
    # the experts' optimizer state per device does not shrink with ep: fewer experts, fewer replicas to share
    assert held * adam / (8 // ep) == pytest.approx(all_experts * adam / 8, rel=1e-12)
