"""The routed experts' tensor-parallel gather and reduce-scatter (``plan.experts.gathered_elems``): with expert
parallelism Megatron-Core's all-to-all dispatcher gathers the *received token-slots* over the expert-tensor
group after the all-to-all and reduce-scatters as many before the combine
(``MoEAlltoAllTokenDispatcher.dispatch_postprocess`` / ``combine_preprocess``): top_k × tokens × hidden; without
it the all-gather dispatcher gathers the layer's tokens before routing (tokens × hidden)."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.perf.collectives import collective
from tilewright.engine.plan.experts import expert_tp_comm, gathered_elems
from tilewright.engine.simulate import make_plan, simulate

SEQ, HIDDEN, EXPERTS, TOP_K, FFN, LAYERS, MB, DP = 1024, 1024, 8, 2, 2048, 2, 2, 4
BF16 = 2
MICRO_BATCHES = 4  # global batch / (micro-batch · dp)


def _spec(capacity_factor: float | None = None) -> GPTSpec:
    moe = {"experts": EXPERTS, "top_k": TOP_K, "expert_ffn": FFN, "capacity_factor": capacity_factor}
    return GPTSpec(name="moe", layers=LAYERS, hidden=HIDDEN, heads=16, seq_len=SEQ, vocab=32000, mlp_bias=False,
                   moe=moe)


def _project(tp: int = 2, ep: int = 2, etp: int | None = None, engine: str = "analytic",
             capacity_factor: float | None = None) -> Project:
    mapping = Mapping(tp=tp, dp=DP, ep=ep, expert_tp=etp, expert_imbalance=1.0, sequence_parallel=True, micro_batch=MB,
                      global_batch=MICRO_BATCHES * MB * DP, zero=1)
    return Project(name="slots", hardware=load_system("dgx-a100"), workload=_spec(capacity_factor), mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _tp_bytes(plan, kind: str) -> list[float]:
    """Bytes of every tensor-group collective (no group prefix, no broadcast) of stage 0's first pass of a kind."""
    return [s.comm[1] for s in plan.stages[0].passes[(0, kind)].segments
            if s.comm and ":" not in s.comm[0] and s.comm[0] in ("all-gather", "reduce-scatter")]


def _routed_bytes(plan, folded, kind: str) -> float:
    """The routed experts' tensor collectives of one pass: what the plan has beyond the same mapping at etp 1,
    where the dispatcher gathers nothing and every other collective is the same."""
    return sum(_tp_bytes(plan, kind)) - sum(_tp_bytes(folded, kind))


@pytest.mark.parametrize("kind", ["F", "B"])
def test_all_to_all_dispatcher_gathers_token_slots(kind):
    """ep 2, etp = tp = 2: per layer a gather before experts_up and a reduce-scatter after experts_down (their
    mirror images in the backward), each of the whole group's received slots: s · b · top_k · h bf16."""
    plan, folded = make_plan(_project()), make_plan(_project(etp=1))
    slots = SEQ * MB * TOP_K * HIDDEN * BF16
    assert _routed_bytes(plan, folded, kind) == pytest.approx(2 * LAYERS * slots)
    assert sum(1 for n in _tp_bytes(plan, kind) if n == pytest.approx(slots)) == 2 * LAYERS


def test_gathered_slots_are_what_the_all_to_all_delivered_to_the_group():
    """Cross-check against the dispatch all-to-all: each of the etp ranks receives its own tokens' slots
    (the ep buffer per tensor rank); the gather assembles etp of them."""
    tp = 2
    plan = make_plan(_project(tp=tp))
    a2a = [s.comm[1] for s in plan.stages[0].passes[(0, "F")].segments if s.comm and s.comm[0].startswith("ep:")]
    assert a2a and max(_tp_bytes(plan, "F")) == pytest.approx(tp * a2a[0])


def test_folded_expert_tensor_group_carries_its_share_of_the_slots():
    """tp 4, etp 2: the gather runs over each pair of tensor ranks, etp / tp of the tensor group's slots."""
    tp, etp = 4, 2
    plan = make_plan(_project(tp=tp, etp=etp))
    etp_comms = [s.comm for s in plan.stages[0].passes[(0, "F")].segments if s.comm and s.comm[0].startswith("etp:")]
    assert len(etp_comms) == 2 * LAYERS
    assert all(n == pytest.approx(SEQ * MB * TOP_K * HIDDEN * BF16 * etp / tp) for _, n in etp_comms)


def test_without_expert_parallelism_the_all_gather_dispatcher_gathers_tokens():
    """ep 1 (etp = tp): the routed experts' collectives are the dense layer's, s · b · h, whatever top_k."""
    dense, folded = make_plan(_project(ep=1)), make_plan(_project(etp=1))
    tokens = SEQ * MB * HIDDEN * BF16
    for kind in ("F", "B"):
        assert _routed_bytes(dense, folded, kind) == pytest.approx(2 * LAYERS * tokens)


@pytest.mark.parametrize(("ep", "per_token"), [(2, TOP_K * 1.25), (1, 1.0)])
def test_capacity_factor_pads_the_gathered_slots(ep, per_token):
    """A padded capacity (factor 1.25) fills every expert to capacity: the all-to-all dispatcher gathers
    s · top_k · 1.25 slots, the all-gather dispatcher still the s tokens."""
    plan, folded = make_plan(_project(ep=ep, capacity_factor=1.25)), make_plan(_project(etp=1, capacity_factor=1.25))
    assert _routed_bytes(plan, folded, "F") == pytest.approx(2 * LAYERS * SEQ * per_token * MB * HIDDEN * BF16)


def test_expert_tp_one_gathers_nothing():
    """Whole experts (etp 1): no routed collective at all; the plan's remaining tensor collectives are the
    attention's and the embedding's, tokens · hidden as at ep 1."""
    folded, dense = make_plan(_project(etp=1)), make_plan(_project(ep=1))
    assert not [s for s in folded.stages[0].passes[(0, "F")].segments if s.comm and s.comm[0].startswith("etp:")]
    tokens = SEQ * MB * HIDDEN * BF16
    assert len(_tp_bytes(dense, "F")) - len(_tp_bytes(folded, "F")) == 2 * LAYERS
    assert all(n == pytest.approx(tokens) for n in _tp_bytes(folded, "F"))


def test_other_ops_and_etp_one_in_expert_tp_comm():
    """Non-expert ops pass through unchanged; a routed expert at etp 1 has no collective."""
    plan = make_plan(_project())
    ops = {op.name.split(".", 1)[-1]: op for op in plan.workload.layer_ops(1)}
    assert expert_tp_comm(ops["qkv"], "all-gather", 5.0, 2, None, 2) == ("all-gather", 5.0)
    assert gathered_elems(ops["qkv"], 5.0, 1) == 5.0
    assert expert_tp_comm(ops["experts_up"], "all-gather", 5.0, 2, 1, 2) is None
    up = ops["experts_up"]
    assert gathered_elems(up, up.in_elems, 2) == pytest.approx(SEQ * TOP_K * HIDDEN)
    assert gathered_elems(up, up.in_elems, 1) == pytest.approx(SEQ * HIDDEN)


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_tensor_comm_time_grows_by_the_slot_collectives(engine):
    """Both engines: tp_comm at etp = tp exceeds etp 1 by the routed gathers and reduce-scatters of the
    slots, timed on their own (``collective``): micro-batches × (forward, backward) × layers × (AG + RS)."""
    a, b = simulate(_project(engine=engine)), simulate(_project(etp=1, engine=engine))
    plan = make_plan(_project())
    group, nbytes = plan.stages[0].groups[0], SEQ * MB * TOP_K * HIDDEN * BF16
    pair = sum(collective(plan.hw, k, group, nbytes).time(plan.hw) for k in ("all-gather", "reduce-scatter"))
    extra = a.time_breakdown_s["tp_comm"] - b.time_breakdown_s["tp_comm"]
    assert extra == pytest.approx(MICRO_BATCHES * 2 * LAYERS * pair, rel=1e-9)


@pytest.mark.parametrize("etp", [None, 2])
def test_both_engines_agree(etp):
    kw = {"tp": 4, "etp": etp}
    a, e = simulate(_project(engine="analytic", **kw)), simulate(_project(engine="event", **kw))
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
    assert e.time_breakdown_s["tp_comm"] == pytest.approx(a.time_breakdown_s["tp_comm"], rel=1e-9)


@pytest.mark.parametrize("etp", [1, 2])
def test_dispatch_sorts_cover_the_expert_tensor_groups_gathered_slots(etp):
    """tp 2, ep 2 (4 local experts: the sort runs). Per device and forward: the dispatch permutation reads
    and writes the device's own token-slots, s · b · top_k · h / tp bf16, whatever etp; the sort by local
    expert after the expert-tensor gather, and its inverse before the reduce-scatter, read and write the etp
    ranks' gathered slots, etp × as many (Megatron-Core ``dispatch_postprocess`` / ``combine_preprocess``).
    The up projection is the dispatch side, the down projection the combine side."""
    from tilewright.engine.plan.experts import dispatch_work

    tp, ep = 2, 2
    plan = make_plan(_project(tp=tp, ep=ep, etp=etp))
    ops = {op.name.split(".", 1)[-1]: op for op in plan.workload.layer_ops(1)}
    compute = plan.stages[0].dev.compute
    own = SEQ * MB * TOP_K * HIDDEN * BF16 / tp
    up = dispatch_work(ops["experts_up"], False, MB, tp, ep, BF16, compute, etp=etp)
    down = dispatch_work(ops["experts_down"], False, MB, tp, ep, BF16, compute, etp=etp)
    assert up.permute_bytes == pytest.approx(2 * own) and down.permute_bytes == 0.0
    assert up.sort_bytes == pytest.approx(2 * etp * own) and down.sort_bytes == pytest.approx(2 * etp * own)
    back = dispatch_work(ops["experts_up"], True, MB, tp, ep, BF16, compute, etp=etp)
    assert (back.permute_bytes, back.sort_bytes) == pytest.approx((up.permute_bytes, up.sort_bytes))
    default = dispatch_work(ops["experts_up"], False, MB, tp, ep, BF16, compute)  # None: etp = tp
    assert default.sort_bytes == pytest.approx(2 * tp * own)


@pytest.mark.parametrize("etp", [1, 2])
def test_the_plan_sizes_the_sorts_by_its_expert_tp(etp, monkeypatch):
    """``PassBuilder.add_op`` hands the mapping's expert tensor parallelism to ``dispatch_work`` (its ``etp``
    argument), so the plan's sorts are the ones sized above."""
    import inspect

    from tilewright.engine.plan import pass_builder

    seen = []
    real = pass_builder.dispatch_work
    bind = inspect.signature(real).bind
    monkeypatch.setattr(pass_builder, "dispatch_work",
                        lambda *a, **k: seen.append(bind(*a, **k).arguments.get("etp")) or real(*a, **k))
    make_plan(_project(tp=2, ep=2, etp=etp))
    assert seen and set(seen) == {etp}
