"""Expert tensor parallelism and MoE parallel folding (``mapping.expert_tp``, ``plan.experts``): whole experts
per rank with the ep groups laid over tp × dp, as Megatron-Core's ETP 1 recipes run them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.perf.collectives import collective
from tilewright.engine.plan.checks import check_project
from tilewright.engine.plan.group_comm import dp_group_collective, edp_group_collective, folded_groups
from tilewright.engine.simulate import make_plan, simulate

SEQ, HIDDEN, EXPERTS, TOP_K, FFN, LAYERS, MB = 1024, 1024, 8, 2, 2048, 2, 2
SPEC = GPTSpec(
    name="moe", layers=LAYERS, hidden=HIDDEN, heads=16, seq_len=SEQ, vocab=32000, mlp_bias=False,
    moe={"experts": EXPERTS, "top_k": TOP_K, "expert_ffn": FFN},
)
BF16 = 2


def _project(tp: int = 2, dp: int = 4, ep: int = 4, etp: int | None = None, engine: str = "analytic",
             sp: bool = True, zero: int = 1) -> Project:
    mapping = Mapping(tp=tp, dp=dp, ep=ep, expert_tp=etp, expert_imbalance=1.0,
                      sequence_parallel=sp and tp > 1, micro_batch=MB,
                      global_batch=4 * MB * dp, zero=zero)
    return Project(name="etp", hardware=load_system("dgx-a100"), workload=SPEC, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _comms(plan, prefix: str, kind: str = "F") -> list[tuple[str, float]]:
    return [s.comm for s in plan.stages[0].passes[(0, kind)].segments if s.comm and s.comm[0].startswith(prefix)]


def _expert_params_per_layer() -> float:
    """By hand: E routed GELU experts (no bias) of an up (h × f) and a down (f × h) matrix."""
    return EXPERTS * 2 * HIDDEN * FFN


@pytest.mark.parametrize("etp", [1, 2])
def test_all_to_all_bytes_per_device_are_its_own_tokens_whatever_etp(etp):
    """Each device dispatches its sequence-parallel share of the tokens, s·b/tp, top_k copies of each hidden
    vector (bf16), and gets as much back in the combine: etp does not change it."""
    plan = make_plan(_project(etp=etp))
    per_device = SEQ * MB / 2 * TOP_K * HIDDEN * BF16
    comms = _comms(plan, "ep:")
    assert len(comms) == 2 * LAYERS  # dispatch and combine of every MoE layer
    assert all(n == pytest.approx(per_device) for _, n in comms)
    coll = plan.tp_collective(0, 0, *comms[0])
    assert coll.phases[0].bytes_per_member == pytest.approx(3 / 4 * per_device)  # (ep − 1)/ep leaves


def test_folded_groups_follow_megatron_rank_order():
    """tp 2, dp 4, ep 4, etp 1: stage ranks r = d·tp + t re-read as ((k·ep) + e)·etp + u — ep groups are
    4 consecutive ranks (two replicas, both tensor ranks), expert-data-parallel groups stride 4."""
    groups = [[10 + 2 * d, 11 + 2 * d] for d in range(4)]  # device ids of replica d, tensor rank t
    flat = [10, 11, 12, 13, 14, 15, 16, 17]
    eps, edps = folded_groups(groups, ep=4, etp=1)
    assert eps == [flat[0:4], flat[4:8]]
    assert edps == [[flat[e], flat[4 + e]] for e in range(4)]
    eps2, edps2 = folded_groups(groups, ep=2, etp=2)  # etp = tp: Megatron's old layout, same t across replicas
    assert eps2 == [[10, 12], [11, 13], [14, 16], [15, 17]]
    assert edps2 == [[10, 14], [11, 15], [12, 16], [13, 17]]


@pytest.mark.parametrize(("etp", "edp"), [(1, 2), (2, 1)])
def test_expert_weights_and_their_gradient_group(etp, edp):
    """Routed-expert weights per device: params / (ep · etp); their gradients reduced over the
    tp·dp / (ep·etp) ranks holding the same shard, after the dense weights' reduction over dp."""
    tp, dp, ep = 2, 4, 4
    plan = make_plan(_project(tp=tp, dp=dp, ep=ep, etp=etp))
    st = plan.stages[0]
    expert_params = _expert_params_per_layer() * LAYERS / (ep * etp)
    per_param = sum(st.grad_bytes.values()) / st.params
    expert_bytes = expert_params * per_param
    assert sum(st.expert_grad_bytes.values()) == pytest.approx(expert_bytes)
    edps = folded_groups(st.groups, ep, etp)[1]
    assert len(edps) == ep * etp and all(len(g) == tp * dp // (ep * etp) == edp for g in edps)
    expert = edp_group_collective(plan.hw, st.groups, ep, "reduce-scatter", expert_bytes, etp)
    if edp == 1:  # etp = tp, ep = dp: every replica holds its own experts, nothing to reduce
        assert not expert.phases
    else:  # a reduce-scatter (ZeRO-1) on each expert-data-parallel group of 2, all at once
        one = collective(plan.hw, "reduce-scatter", edps[0], expert_bytes)
        assert expert.phases[0].bytes_per_member == pytest.approx(one.phases[0].bytes_per_member)
        assert one.phases[0].bytes_per_member == pytest.approx((edp - 1) / edp * expert_bytes)
    dense = dp_group_collective(plan.hw, st.groups, "reduce-scatter", st.grad_bytes[0] - expert_bytes)
    assert len(plan.dp_collective(0, 0).phases) == len(dense.phases) + len(expert.phases)


def test_expert_gemm_shapes_and_flops_per_device():
    """etp 1 on tp 2: a device runs etp / tp of the replica's token-slots on the whole expert width (the plan
    splits the rewritten GEMM by tp: m · 1/2, n · 2 / tp) and holds params / ep; FLOPs per device stay
    flops / tp on a balanced router."""
    base, folded = make_plan(_project(etp=None)), make_plan(_project(etp=1))
    layer = next(li.index for li in folded.workload.layers
                 if any(o.moe is not None for o in folded.workload.layer_ops(li.index)))
    raw = {op.name: op for op in folded.workload.layer_ops(layer)}
    ops = {op.name: op for op in _sharded(folded, layer)}
    for name in (n for n in raw if n.endswith(("experts_up", "experts_down"))):
        m, n, k = raw[name].gemm
        if name.endswith("up"):  # column-split: n over tp in the plan → whole
            assert ops[name].gemm == pytest.approx((m / 2, n * 2, k))
        else:  # row-split: k over tp → whole
            assert ops[name].gemm == pytest.approx((m / 2, n, k * 2))
        assert ops[name].params / 2 == pytest.approx(raw[name].params / 4)  # / tp in the plan: / ep
    assert folded.stages[0].passes[(0, "F")].flops == pytest.approx(base.stages[0].passes[(0, "F")].flops)


def _sharded(plan, layer: int):
    from tilewright.engine.plan.device_layers import sharded_layer_ops

    m = plan.project.mapping
    return sharded_layer_ops(plan.workload, [layer], m.ep, 1.0, m.tp, m.expert_tp)[0]


def test_expert_tensor_collectives_follow_etp():
    """Sequence parallelism: the routed experts' gather and reduce-scatter run over the tensor group at
    etp = tp, over each expert-tensor group of etp ranks carrying etp / tp of the bytes below it, not at all
    at etp 1 (whole experts)."""
    tp = 4
    at = {etp: make_plan(_project(tp=tp, dp=2, ep=2, etp=etp)) for etp in (None, 2, 1)}
    dense = [c for c in at[None].stages[0].passes[(0, "F")].segments if c.comm]
    etp2 = _comms(at[2], "etp:")
    assert not _comms(at[1], "etp:") and not _comms(at[None], "etp:")
    assert len(etp2) == 2 * LAYERS  # gather before experts_up, reduce-scatter after experts_down
    full = SEQ * MB * TOP_K * HIDDEN * BF16  # the received token-slots (``experts.gathered_elems``)
    assert all(n == pytest.approx(full * 2 / tp) for _, n in etp2)
    tp_comms = lambda p: sum(1 for s in p.stages[0].passes[(0, "F")].segments if s.comm and ":" not in s.comm[0])  # noqa: E731
    assert tp_comms(at[None]) - tp_comms(at[1]) == 2 * LAYERS
    assert len(dense) > 0
    coll = at[2].tp_collective(0, 0, *etp2[0])
    assert coll.phases and coll.time(at[2].hw) > 0


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_etp_equal_tp_reproduces_the_default_exactly(engine):
    a = simulate(_project(etp=None, engine=engine))
    b = simulate(_project(etp=2, engine=engine))
    assert b.iteration_time_s == a.iteration_time_s
    assert b.time_breakdown_s == a.time_breakdown_s
    assert b.peak_memory_bytes == a.peak_memory_bytes


def test_both_engines_agree_when_folded():
    a, e = simulate(_project(etp=1, engine="analytic")), simulate(_project(etp=1, engine="event"))
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)


def test_ep_may_exceed_dp_once_folded():
    """ep 8 on tp 2 × dp 4: refused at etp = tp (ep carved from dp), accepted at etp 1."""
    assert any("does not divide dp (4)" in str(p) for p in check_project(_project(ep=8)))
    assert not check_project(_project(ep=8, etp=1))
    assert simulate(_project(ep=8, etp=1)).iteration_time_s > 0


@pytest.mark.parametrize(("kw", "path", "text"), [
    ({"etp": 3, "tp": 4, "dp": 2, "ep": 2}, "mapping.expert_tp", "3 does not divide tp (4)"),
    ({"etp": 1, "ep": 1, "sp": False}, "mapping.sequence_parallel", "needs sequence parallelism"),
    ({"etp": 1, "tp": 2, "dp": 2, "ep": 8}, "mapping.ep", "ep × expert_tp (8 × 1) does not divide tp × dp (2 × 2)"),
])
def test_validation_names_the_field(kw, path, text):
    problems = check_project(_project(**kw))
    assert any(p.path == path and text in str(p) for p in problems), problems


def test_saved_project_keeps_expert_tp_quiet_at_its_default():
    assert "expert_tp" not in json.loads(_project().mapping.model_dump_json(exclude_defaults=True))
    assert Mapping(expert_tp=1).expert_tp == 1


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tilewright.engine.cli", "run", "mixtral-8x7b-dgx-h100",
                           "--engine", "analytic", "--quiet", *args], capture_output=True, text=True, timeout=300)


def test_cli_expert_tp_flag_and_set():
    ok = _cli("--tp", "2", "--dp", "8", "--ep", "8", "--sequence-parallel", "--expert-tp", "1")
    assert ok.returncode == 0, ok.stderr
    bad = _cli("--expert-tp", "3")
    assert bad.returncode == 2
    assert "mapping.expert_tp" in bad.stderr
    bad_set = _cli("--set", "mapping.expert_tp=5")
    assert bad_set.returncode == 2 and "mapping.expert_tp" in bad_set.stderr


def test_studio_expert_tp_box(make_window):
    """The workload panel's expert tp box: shows tp while unset, applies with Auto-map as one undo step,
    refuses with the engine's message, and is disabled for a model without mixture-of-experts layers."""
    w = make_window(_project(etp=None))
    panel, doc = w.workload, w.doc
    box = panel.editors["expert_tp"]
    assert box.isEnabled() and box.value == 2
    box.type_and_commit("1")
    assert panel.apply_auto_map()
    assert doc.project.mapping.expert_tp == 1 and doc.undo_stack.count() == 1
    doc.undo_stack.undo()
    assert doc.project.mapping.expert_tp is None
    assert "mapping.expert_tp: 3 does not divide tp (2)" in (panel._would_refuse(expert_tp=3) or "")
    dense = _project(etp=None, ep=1).model_copy(update={"workload": SPEC.model_copy(update={"moe": None})})
    box = make_window(dense).workload.editors["expert_tp"]
    assert not box.isEnabled() and "no mixture-of-experts" in box.toolTip()
