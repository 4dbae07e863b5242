"""Expert parallelism together with context parallelism (``mapping.ep`` with ``mapping.cp``, ``plan.experts``):
Megatron-Core's expert rank generator folds the MoE layer over the stage's tp × cp × dp ranks (dense order
tp-cp-ep-dp-pp with ep 1, expert order tp-ep-dp with cp 1), so the ep, expert-tensor and expert-data-parallel
groups are read off the same flattened stage, r = t + tp · (c + cp · d). The expected groups below are built by
hand from that formula on the hardware's device list, not from the plan's helpers."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.perf.collectives import collective
from tilewright.engine.plan.checks import check_project
from tilewright.engine.plan.experts import all_to_all
from tilewright.engine.plan.group_comm import edp_group_collective, ep_group_collective, folded_groups
from tilewright.engine.simulate import make_plan, simulate

SEQ, HIDDEN, EXPERTS, TOP_K, FFN, LAYERS, MB = 1024, 1024, 8, 2, 2048, 2, 2
SPEC = GPTSpec(
    name="moe", layers=LAYERS, hidden=HIDDEN, heads=16, seq_len=SEQ, vocab=32000, mlp_bias=False,
    moe={"experts": EXPERTS, "top_k": TOP_K, "expert_ffn": FFN},
)
BF16 = 2


def _project(tp: int = 1, cp: int = 2, dp: int = 4, ep: int = 8, etp: int | None = None, zero: int = 1,
             engine: str = "analytic") -> Project:
    mapping = Mapping(tp=tp, cp=cp, dp=dp, ep=ep, expert_tp=etp, expert_imbalance=1.0, sequence_parallel=tp > 1,
                      micro_batch=MB,
                      global_batch=4 * MB * dp, zero=zero)
    return Project(name="ep-cp", hardware=load_system("dgx-a100"), workload=SPEC, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _megatron_stage(plan, tp: int, cp: int, dp: int) -> list[int]:
    """The stage's devices in Megatron's flattened order r = t + tp·(c + cp·d), from the plan's replica
    groups indexed as Megatron lays them out (replica d·cp + c, tensor rank t)."""
    groups = plan.stages[0].groups
    return [groups[d * cp + c][t] for d in range(dp) for c in range(cp) for t in range(tp)]


def _comms(plan, prefix: str) -> list[tuple[str, float]]:
    return [s.comm for s in plan.stages[0].passes[(0, "F")].segments if s.comm and s.comm[0].startswith(prefix)]


def _expert_params_per_layer() -> float:
    """By hand: E routed GELU experts (no bias), an up (h × f) and a down (f × h) matrix each."""
    return EXPERTS * 2 * HIDDEN * FFN


def _usage(coll) -> list[dict[int, float]]:
    return [{k: pytest.approx(v) for k, v in ph.usage.items()} for ph in coll.phases]


def test_checks_accept_ep_over_cp_times_dp_and_name_cp_when_refusing():
    assert not check_project(_project(tp=1, cp=2, dp=4, ep=8))
    assert not check_project(_project(tp=2, cp=2, dp=2, ep=2, etp=1))
    bad = check_project(_project(tp=1, cp=2, dp=2, ep=8))
    assert any(p.path == "mapping.ep" and "8 does not divide cp × dp (2 × 2)" in str(p) for p in bad), bad
    folded = check_project(_project(tp=2, cp=2, dp=1, ep=8, etp=1))
    assert any("does not divide tp × cp × dp (2 × 2 × 1)" in str(p) for p in folded), folded
    assert not any("context parallelism" in str(p) for p in bad + folded)


def test_one_ep_group_spans_the_context_and_data_ranks():
    """tp 1, cp 2, dp 4, ep 8 on 8 GPUs: the all-to-all runs over all eight ranks at once; every rank holds
    experts / ep of the routed weights; the expert-data-parallel group is one rank (nothing to reduce)."""
    plan = make_plan(_project())
    flat = _megatron_stage(plan, 1, 2, 4)
    assert sorted(flat) == list(range(8))
    st = plan.stages[0]
    nbytes = 1e6
    assert _usage(ep_group_collective(plan.hw, st.groups, 8, nbytes)) == _usage(all_to_all(plan.hw, flat, nbytes))
    assert sum(st.params for st in plan.stages) > 0
    per_param = sum(st.grad_bytes.values()) / st.params
    assert sum(st.expert_grad_bytes.values()) == pytest.approx(_expert_params_per_layer() * LAYERS / 8 * per_param)
    assert not edp_group_collective(plan.hw, st.groups, 8, "reduce-scatter", 1e6).phases


def test_all_to_all_bytes_per_device_are_its_share_of_the_sequence():
    """Each rank dispatches the tokens it runs: micro_batch · seq / cp of them, top_k copies of each hidden
    vector, and (ep − 1)/ep of that leaves it."""
    cp, ep = 2, 8
    plan = make_plan(_project(cp=cp, ep=ep))
    per_device = MB * SEQ / cp * TOP_K * HIDDEN * BF16
    comms = _comms(plan, "ep:")
    assert len(comms) == 2 * LAYERS and all(n == pytest.approx(per_device) for _, n in comms)
    coll = plan.tp_collective(0, 0, *comms[0])
    assert coll.phases[0].bytes_per_member == pytest.approx((ep - 1) / ep * per_device)


def test_expert_gradients_reduce_over_ranks_spanning_cp_and_dp():
    """tp 1, cp 2, dp 4, ep 4: ep groups are Megatron ranks 0–3 and 4–7 (both cp ranks of two dp replicas);
    expert rank e's weights live on ranks e and 4 + e: gradients reduced over those 2 = cp·dp / ep ranks."""
    tp, cp, dp, ep = 1, 2, 4, 4
    plan = make_plan(_project(tp=tp, cp=cp, dp=dp, ep=ep))
    flat, st = _megatron_stage(plan, tp, cp, dp), plan.stages[0]
    nbytes = 1e6
    eps = [flat[0:4], flat[4:8]]
    by_hand = [all_to_all(plan.hw, g, nbytes) for g in eps]
    got = ep_group_collective(plan.hw, st.groups, ep, nbytes)
    summed = {k: by_hand[0].phases[0].usage.get(k, 0) + by_hand[1].phases[0].usage.get(k, 0)
              for k in {*by_hand[0].phases[0].usage, *by_hand[1].phases[0].usage}}
    assert _usage(got) == [{k: pytest.approx(v) for k, v in summed.items()}]
    expert_bytes = sum(st.expert_grad_bytes.values())
    edp = edp_group_collective(plan.hw, st.groups, ep, "reduce-scatter", expert_bytes)
    one = collective(plan.hw, "reduce-scatter", [flat[0], flat[4]], expert_bytes)
    assert edp.phases[0].bytes_per_member == pytest.approx(one.phases[0].bytes_per_member)
    assert one.phases[0].bytes_per_member == pytest.approx(1 / 2 * expert_bytes)
    assert plan.replicas == cp * dp


def test_folded_groups_with_context_parallelism():
    """tp 2, cp 2, dp 2, ep 2, etp 1: r = t + 2·(c + 2·d) re-read as r = e + 2·k — an ep group is the two
    tensor ranks of one (d, c) replica, an expert-data-parallel group the 4 = tp·cp·dp / (ep·etp) ranks with
    the same e; per device params / (ep·etp) of the routed experts."""
    tp, cp, dp, ep, etp = 2, 2, 2, 2, 1
    plan = make_plan(_project(tp=tp, cp=cp, dp=dp, ep=ep, etp=etp))
    flat, st = _megatron_stage(plan, tp, cp, dp), plan.stages[0]
    eps, edps = folded_groups(st.groups, ep, etp)
    assert eps == [flat[2 * k:2 * k + 2] for k in range(4)]
    assert edps == [[flat[2 * k + e] for k in range(4)] for e in range(2)]
    per_param = sum(st.grad_bytes.values()) / st.params
    expert_params = _expert_params_per_layer() * LAYERS / (ep * etp)
    assert sum(st.expert_grad_bytes.values()) == pytest.approx(expert_params * per_param)
    coll = edp_group_collective(plan.hw, st.groups, ep, "reduce-scatter", 1e6, etp)
    one = collective(plan.hw, "reduce-scatter", [flat[2 * k] for k in range(4)], 1e6)  # e = 0, by hand
    assert len(coll.phases) == len(one.phases) > 0
    assert [ph.bytes_per_member for ph in coll.phases] == pytest.approx([ph.bytes_per_member for ph in one.phases])


@pytest.mark.parametrize("zero", [1, 2])
def test_zero_shards_experts_over_the_expert_data_parallel_group(zero):
    """ZeRO-1/2: the routed experts' optimizer state (and gradients at 2) divided by cp·dp / ep, the dense
    weights' by cp·dp (Megatron-Core's distributed optimizer shards over the data-parallel group with context
    parallelism, ``plan.sharding``); derived from the unsharded state of the same stage."""
    tp, cp, dp, ep = 1, 2, 4, 4
    plain, sharded = make_plan(_project(tp=tp, cp=cp, dp=dp, ep=ep, zero=0)), make_plan(
        _project(tp=tp, cp=cp, dp=dp, ep=ep, zero=zero))
    st0, st = plain.stages[0], sharded.stages[0]
    per_param_opt = st0.state.optimizer / st0.params
    experts = sum(st.expert_grad_bytes.values()) / (sum(st.grad_bytes.values()) / st.params)
    dense_dp = cp * dp  # context ranks hold the same dense weights: their state is sharded over them too
    expect = (st.params - experts) * per_param_opt / dense_dp + experts * per_param_opt / (cp * dp // ep)
    assert st.state.optimizer == pytest.approx(expect)


@pytest.mark.parametrize("kw", [{}, {"ep": 4}, {"tp": 2, "cp": 2, "dp": 2, "ep": 2, "etp": 1}])
def test_both_engines_agree(kw):
    a = simulate(_project(engine="analytic", **kw))
    e = simulate(_project(engine="event", **kw))
    assert a.iteration_time_s > 0
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
    for cat in ("ep_comm", "dp_comm"):
        assert e.time_breakdown_s.get(cat, 0.0) == pytest.approx(a.time_breakdown_s.get(cat, 0.0), rel=1e-9, abs=1e-12)
