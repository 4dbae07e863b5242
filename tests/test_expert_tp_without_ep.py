"""Expert tensor parallelism below tp without expert parallelism (``mapping.ep`` 1, ``mapping.expert_tp`` < tp):
Megatron-Core's MoE parallel folding with ``--expert-model-parallel-size 1``. Each expert-tensor group of
expert_tp ranks runs every routed expert on its own tokens — no all-to-all; at expert_tp 1 no gather either —
the experts' weights split by expert_tp only, their gradients reduced over tp / expert_tp × dp ranks
(``plan.experts``). Expected numbers are derived by hand from the model's dimensions."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.perf.collectives import collective
from tilewright.engine.perf.memory import params_on_device
from tilewright.engine.perf.op_cost import _sharded_gemm, op_time
from tilewright.engine.plan.checks import check_project
from tilewright.engine.plan.device_layers import sharded_layer_ops
from tilewright.engine.plan.experts import routed_experts
from tilewright.engine.plan.group_comm import edp_group_collective, folded_groups
from tilewright.engine.simulate import make_plan, simulate

SEQ, HIDDEN, EXPERTS, TOP_K, FFN, LAYERS, MB = 1024, 1024, 8, 2, 2048, 2, 2
TP, DP = 4, 2
SPEC = GPTSpec(
    name="moe", layers=LAYERS, hidden=HIDDEN, heads=16, seq_len=SEQ, vocab=32000, mlp_bias=False,
    moe={"experts": EXPERTS, "top_k": TOP_K, "expert_ffn": FFN},
)
BF16 = 2
OWN_TOKENS = SEQ * MB // TP  # a device's sequence-parallel share of a micro-batch's tokens


def _project(etp: int | None, tp: int = TP, dp: int = DP, sp: bool = True, engine: str = "analytic",
             zero: int = 1, spec: GPTSpec = SPEC) -> Project:
    mapping = Mapping(tp=tp, dp=dp, ep=1, expert_tp=etp, sequence_parallel=sp, micro_batch=MB,
                      global_batch=4 * MB * dp, zero=zero)
    return Project(name="etp-ep1", hardware=load_system("dgx-a100"), workload=spec, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _moe_layer(plan) -> int:
    return next(li.index for li in plan.workload.layers
                if any(o.moe is not None for o in plan.workload.layer_ops(li.index)))


def _expert_ops(plan) -> list:
    m = plan.project.mapping
    layer = sharded_layer_ops(plan.workload, [_moe_layer(plan)], m.ep, 1.0, m.tp, m.expert_tp)[0]
    return [op for op in routed_experts(layer) if op.gemm is not None]


def _comms(plan, kind: str = "F") -> list[tuple[str, float]]:
    return [s.comm for s in plan.stages[0].passes[(0, kind)].segments if s.comm]


@pytest.mark.parametrize("etp", [1, 2])
def test_accepted_with_sequence_parallelism(etp):
    assert not check_project(_project(etp))


@pytest.mark.parametrize(("kw", "path", "text"), [
    ({"etp": 3}, "mapping.expert_tp", "3 does not divide tp (4)"),
    ({"etp": 1, "sp": False}, "mapping.sequence_parallel", "needs sequence parallelism"),
    ({"etp": 1, "spec": SPEC.model_copy(update={"moe": None})}, "mapping.expert_tp", "no mixture-of-experts"),
])
def test_bad_combinations_name_the_field(kw, path, text):
    problems = check_project(_project(**kw))
    assert any(p.path == path and text in str(p) for p in problems), problems


@pytest.mark.parametrize("etp", [1, 2])
def test_expert_gemms_run_every_expert_on_the_groups_own_tokens(etp):
    """A device runs all routed experts on the token-slots of its expert-tensor group's own tokens
    (etp × S·b/tp tokens, top_k slots each) on 1/etp of each expert's width; FLOPs per device, by hand:
    up h×f and down f×h, 2·h·f each per slot, over the own tokens' slots (etp × the slots on 1/etp width)."""
    plan = make_plan(_project(etp))
    dev = plan.stages[0].dev
    ops = _expert_ops(plan)
    assert {op.name.split(".")[1] for op in ops} == {"experts_up", "experts_down"}
    slots = OWN_TOKENS * TOP_K * etp
    for op in ops:
        m, n, k = _sharded_gemm(op, MB, TP)
        assert m == pytest.approx(slots)
        assert (n, k) == pytest.approx((FFN / etp, HIDDEN) if op.name.endswith("up") else (HIDDEN, FFN / etp))
    flops = sum(op_time(op, dev, MB, TP, True, False, BF16).flops for op in ops)
    assert flops == pytest.approx(OWN_TOKENS * TOP_K * 2 * (2 * HIDDEN * FFN))


def test_no_all_to_all_and_no_expert_gather_at_etp_1():
    """ep 1: no expert all-to-all in any pass; etp 1: the dispatcher gathers nothing, so the tensor group's
    gather before the experts and reduce-scatter after them (there at etp = tp) are gone, 2 per MoE layer."""
    whole, split = make_plan(_project(1)), make_plan(_project(None))
    for kind in ("F", "B"):
        assert not any(c[0].startswith(("ep:", "etp:")) for c in _comms(whole, kind))
    assert len(_comms(split)) - len(_comms(whole)) == 2 * LAYERS
    assert whole.stages[0].passes[(0, "F")].flops == pytest.approx(split.stages[0].passes[(0, "F")].flops)


def test_expert_tensor_collective_at_etp_2_gathers_over_two_ranks():
    """etp 2: the all-gather dispatcher gathers over the expert-tensor group (Megatron-Core's tp_ep group,
    etp × ep = 2 ranks) the group's tokens, 2 × S·b/tp hidden vectors: each rank receives its peer's."""
    plan = make_plan(_project(2))
    etp = [c for c in _comms(plan) if c[0].startswith("etp:")]
    assert [k for k, _ in etp] == ["etp:all-gather", "etp:reduce-scatter"] * LAYERS  # before up, after down
    group_tokens = 2 * OWN_TOKENS * HIDDEN * BF16
    assert all(n == pytest.approx(group_tokens) for _, n in etp)
    coll = plan.tp_collective(0, 0, "etp:all-gather", group_tokens)
    received = OWN_TOKENS * HIDDEN * BF16  # the peer's tokens
    assert sum(ph.bytes_per_member for ph in coll.phases) == pytest.approx(received)
    assert not any(c[0].startswith("ep:") for c in _comms(plan) + _comms(plan, "B"))


@pytest.mark.parametrize("etp", [1, 2])
def test_expert_weights_state_and_gradient_group(etp):
    """Routed-expert parameters per device: E · 2·h·f / etp per MoE layer (split by etp, replicated over the
    tp / etp groups); their gradients reduced (ZeRO-1: reduce-scattered) over the expert-data-parallel group
    of tp / etp × dp ranks — the ranks with the same expert-tensor index, stride etp over the stage — and
    their optimizer state sharded over it; the dense weights' over dp."""
    plan, base = make_plan(_project(etp)), make_plan(_project(None))
    st, sb = plan.stages[0], base.stages[0]
    expert_params = EXPERTS * 2 * HIDDEN * FFN * LAYERS / etp
    assert params_on_device(routed_experts(_expert_ops(plan)), TP) * LAYERS == pytest.approx(expert_params)
    per_grad = sum(sb.grad_bytes.values()) / sb.params  # the gradient format's bytes per parameter
    expert_bytes = expert_params * per_grad
    assert sum(st.expert_grad_bytes.values()) == pytest.approx(expert_bytes)
    edp = TP * DP // etp
    flat = [d for g in st.groups for d in g]  # stage rank r = replica · tp + tensor rank
    expected = [[r for i, r in enumerate(flat) if i % etp == u] for u in range(etp)]
    assert folded_groups(st.groups, 1, etp)[1] == expected and all(len(g) == edp for g in expected)
    assert plan.replicas == edp
    coll = edp_group_collective(plan.hw, st.groups, 1, "reduce-scatter", expert_bytes, etp)
    one = collective(plan.hw, "reduce-scatter", expected[0], expert_bytes)  # each group alike, all at once
    assert [ph.bytes_per_member for ph in coll.phases] == pytest.approx([ph.bytes_per_member for ph in one.phases])
    assert len(plan.dp_collective(0, 0).phases) == 2  # the dense weights' over dp, then the experts'
    opt_per_param = sb.state.optimizer * DP / sb.params  # ZeRO-1 at etp = tp: every weight's over dp
    dense = st.params - expert_params
    assert st.state.optimizer == pytest.approx(opt_per_param * (dense / DP + expert_params / edp))


def test_experts_reduce_over_tensor_ranks_even_without_dp():
    """dp 1, etp 1: the tp ranks hold the same whole experts, so their gradients are still reduced over
    the 4 tensor ranks (expert-data-parallel group tp / etp), while the dense weights need no reduction."""
    plan = make_plan(_project(1, dp=1))
    assert plan.replicas == TP
    coll = plan.dp_collective(0, 0)
    expert_bytes = sum(plan.stages[0].expert_grad_bytes.values())
    one = collective(plan.hw, "reduce-scatter", plan.stages[0].groups[0], expert_bytes)  # the 4 tensor ranks
    assert coll.phases and [ph.bytes_per_member for ph in coll.phases] == pytest.approx(
        [ph.bytes_per_member for ph in one.phases])


def test_zero_2_reduce_scatters_the_experts_over_their_group():
    """ZeRO-2: each layer's gradients are reduce-scattered in the backward, the routed experts' apart over
    their expert-data-parallel group (``edp:``), E · 2·h·f / etp parameters' gradients per MoE layer."""
    plan, base = make_plan(_project(1, zero=2)), make_plan(_project(None, zero=2))
    edp = [c for c in _comms(plan, "B") if c[0].startswith("edp:")]
    assert not [c for c in _comms(base, "B") if c[0].startswith("edp:")]
    per_grad = sum(base.stages[0].grad_bytes.values()) / base.stages[0].params
    assert len(edp) == LAYERS
    assert all(n == pytest.approx(EXPERTS * 2 * HIDDEN * FFN * per_grad) for _, n in edp)


@pytest.mark.parametrize(("etp", "zero"), [(1, 1), (2, 1), (1, 3)])
def test_both_engines_agree(etp, zero):
    a, e = simulate(_project(etp, engine="analytic", zero=zero)), simulate(_project(etp, engine="event", zero=zero))
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
    for k, v in e.time_breakdown_s.items():
        assert v == pytest.approx(a.time_breakdown_s[k], rel=1e-9, abs=1e-12), k
    assert e.peak_memory_bytes == a.peak_memory_bytes


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_etp_equal_tp_at_ep_1_is_the_default_exactly(engine):
    a, b = simulate(_project(None, engine=engine)), simulate(_project(TP, engine=engine))
    assert b.iteration_time_s == a.iteration_time_s
    assert b.time_breakdown_s == a.time_breakdown_s
    assert b.peak_memory_bytes == a.peak_memory_bytes


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tilewright.engine.cli", "run", "mixtral-8x7b-dgx-h100",
                           "--engine", "analytic", "--quiet", "--tp", "4", "--ep", "1", *args],
                          capture_output=True, text=True, timeout=300)


def test_cli_expert_tp_without_ep():
    ok = _cli("--expert-tp", "1", "--sequence-parallel")
    assert ok.returncode == 0, ok.stderr
    no_sp = _cli("--expert-tp", "1")  # the preset runs without sequence parallelism
    assert no_sp.returncode == 2 and "mapping.sequence_parallel" in no_sp.stderr
    bad = _cli("--expert-tp", "3", "--sequence-parallel")
    assert bad.returncode == 2 and "mapping.expert_tp" in bad.stderr


def test_the_search_tries_whole_experts_without_expert_parallelism():
    """The second stage's variants of a sequence-parallel tp > 1 seed of a MoE model include ep 1 with whole
    experts per rank; a seed without sequence parallelism (refused by the checks) or a dense model gets none."""
    from dataclasses import replace

    from tilewright.engine.search.parallel.candidate import Candidate
    from tilewright.engine.search.parallel.extended import Extensions, variants

    ext = Extensions(eps=[1, 2], cps=[1], zeros=[1], fsdp=False, offload=None, overlap=False,
                     dispatchers=["alltoall"], node_devices=8)
    seed = Candidate(tp=TP, pp=1, dp=DP, micro_batch=MB, sequence_parallel=True)
    base = _project(None)
    found = [c for c in variants(seed, ext, SPEC, fits=True) if c.ep == 1 and c.expert_tp == 1]
    assert len(found) == 1
    chosen = base.model_copy(update={"mapping": found[0].mapping(base.mapping.global_batch, base.mapping)})
    assert chosen.mapping.expert_tp == 1 and check_project(chosen) == []
    assert not [c for c in variants(replace(seed, sequence_parallel=False), ext, SPEC, fits=True) if c.expert_tp]
    dense = SPEC.model_copy(update={"moe": None})
    assert not [c for c in variants(seed, ext, dense, fits=True) if c.expert_tp]
