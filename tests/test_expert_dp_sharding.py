"""ZeRO-2/3 and FSDP with expert parallelism: a layer's routed-expert weights are gathered and their gradients
reduce-scattered over the expert-data-parallel group — the dp / ep replicas holding the same experts
(Megatron-Core's expert data parallel group, DeepSpeed-MoE) — and its other weights over all dp replicas
(``engine.plan.sharding``, ``edp:`` collectives). ZeRO-0/1's end-of-iteration reduction follows the same groups.

Expected bytes come from the model's ops (experts split over ep, Megatron's tensor splits over tp) and the ring
formula; expected seconds from the dgx-a100 preset's NVSwitch figures — never read back from the engine."""

from __future__ import annotations

import pytest
from tilewright.engine.ir.ops import MoERole, TensorSplit
from tilewright.engine.plan.group_comm import expert_groups
from tilewright.engine.simulate import make_plan, simulate

from tests.test_moe_plan_traffic import MOE, _project

DP = 8  # one DGX A100 node, every GPU one NVSwitch hop from the others
BF16, FP32 = 2, 4
NVLINK_BYTES_PER_S = 300e9 * 0.75  # dgx-a100 preset: NVLink3 300 GB/s per direction, efficiency 0.75
SPLIT = {TensorSplit.column, TensorSplit.row, TensorSplit.heads, TensorSplit.vocab}  # Megatron: 1/tp per rank


def _moe(ep: int, zero: int, tp: int = 1, engine: str = "analytic", **mapping):
    project = _project(tp=tp, dp=DP // tp, ep=ep, zero=zero, global_batch=4 * DP // tp * 2, **mapping)
    return project.model_copy(update={"run": project.run.model_copy(update={"engine": engine})})


def _layer_params(plan, index: int, ep: int, tp: int) -> tuple[float, float]:
    """(dense, routed-expert) parameters of one layer on one device."""
    dense = experts = 0.0
    for op in plan.workload.layer_ops(index):
        p = op.params / (tp if op.split in SPLIT else 1)
        if op.moe is not None and op.moe.role is MoERole.expert:
            experts += p / ep
        else:
            dense += p
    return dense, experts


def _ring_bytes(p: int, nbytes: float) -> float:
    """Bytes per member of one ring all-gather / reduce-scatter phase: (p − 1)/p of the buffer, split over
    both directions of a bidirectional ring except when p = 2 (one peer)."""
    return (p - 1) / p * nbytes / (2 if p > 2 else 1)


def _wire(plan, kind: str, nbytes: float) -> float:
    """Payload bytes per member the plan's collective moves (NCCL's LL protocol puts flags on the wire too)."""
    coll = plan.tp_collective(0, 0, kind, nbytes)
    return sum(ph.bytes_per_member for ph in coll.phases) * coll.payload_fraction


def _comms(plan, kind: str, prefix: str) -> list[tuple[str, float]]:
    segs = plan.stages[0].passes[(0, kind)].segments
    return [s.comm for s in segs if s.comm and s.comm[0].startswith(prefix)]


@pytest.mark.parametrize(("ep", "tp"), [(2, 1), (4, 1), (2, 2)])
def test_zero3_gathers_experts_over_the_replicas_that_hold_them(ep, tp):
    """Per layer, before its forward: the dense weights all-gathered over the dp replicas, the layer's experts
    (1/ep of them on this device) over the g = dp/ep replicas holding the same ones: (g − 1)/g of their bytes."""
    plan = make_plan(_moe(ep, 3, tp, overlap_param_gather=False))
    dp = DP // tp
    g = dp // ep
    dense_items = _comms(plan, "F", "dp:all-gather")
    expert_items = _comms(plan, "F", "edp:all-gather")
    layers = [li.index for li in plan.workload.layers]
    moe_layers = [i for i in layers if _layer_params(plan, i, ep, tp)[1] > 0]
    assert len(dense_items) == len(layers) and len(expert_items) == len(moe_layers) > 0
    for index, (kind, nbytes) in zip(layers, dense_items, strict=True):
        assert nbytes == pytest.approx(_layer_params(plan, index, ep, tp)[0] * BF16)
        assert _wire(plan, kind, nbytes) == pytest.approx(_ring_bytes(dp, nbytes))
    for index, (kind, nbytes) in zip(moe_layers, expert_items, strict=True):
        assert nbytes == pytest.approx(_layer_params(plan, index, ep, tp)[1] * BF16)
        assert _wire(plan, kind, nbytes) == pytest.approx(_ring_bytes(g, nbytes))


@pytest.mark.parametrize("ep", [2, 4])
def test_zero2_reduce_scatters_expert_gradients_over_the_expert_data_parallel_group(ep):
    """Each backward: every layer's fp32 gradients reduce-scattered, the experts' over dp/ep replicas."""
    plan = make_plan(_moe(ep, 2))
    g = DP // ep
    items = _comms(plan, "B", "edp:reduce-scatter")
    moe_layers = [li.index for li in plan.workload.layers if _layer_params(plan, li.index, ep, 1)[1] > 0]
    assert len(items) == len(moe_layers) > 0
    for index, (kind, nbytes) in zip(reversed(moe_layers), items, strict=True):  # the backward runs in reverse
        assert nbytes == pytest.approx(_layer_params(plan, index, ep, 1)[1] * FP32)
        assert _wire(plan, kind, nbytes) == pytest.approx(_ring_bytes(g, nbytes))
    dense = sum(n for _, n in _comms(plan, "B", "dp:reduce-scatter"))
    expected = sum(_layer_params(plan, li.index, ep, 1)[0] for li in plan.workload.layers) * FP32
    assert dense == pytest.approx(expected)


@pytest.mark.parametrize("zero", [2, 3])
def test_experts_held_by_one_replica_are_neither_gathered_nor_reduced(zero):
    """dp = ep: each replica holds its own experts, so there is no expert-data-parallel group to talk to."""
    plan = make_plan(_moe(DP, zero, overlap_param_gather=False, overlap_grad_reduce=False))
    for kind in ("F", "B"):
        assert not _comms(plan, kind, "edp:")
    total = sum(n for k in ("F", "B") for _, n in _comms(plan, k, "dp:"))
    dense = sum(_layer_params(plan, li.index, DP, 1)[0] for li in plan.workload.layers)
    # stage 3: weights gathered before the forward and the backward, gradients reduced; stage 2: reduced only
    assert total == pytest.approx(dense * (2 * BF16 + FP32 if zero == 3 else FP32))


def test_zero2_time_follows_the_expert_groups():
    """ZeRO-2 over ZeRO-1 adds m − 1 reduce-scatters of every layer's gradients per iteration (stage 1 reduces
    once at the end, over the same groups): over 8 replicas for the dense weights, over dp/ep = 4 for the
    experts. A wide model, so bandwidth dominates: with the experts over all 8 replicas their share would cost
    7/8 instead of 3/4 of their bytes."""
    ep, g = 2, DP // 2
    wide = MOE.model_copy(update={"hidden": 4096, "heads": 32, "moe": MOE.moe.model_copy(update={"expert_ffn": 8192})})
    projects = [_moe(ep, zero) for zero in (1, 2)]
    projects = [p.model_copy(update={"workload": wide}) for p in projects]
    one, two = simulate(projects[0]), simulate(projects[1])
    plan = make_plan(projects[1])
    dense = sum(_layer_params(plan, li.index, ep, 1)[0] for li in plan.workload.layers) * FP32
    experts = sum(_layer_params(plan, li.index, ep, 1)[1] for li in plan.workload.layers) * FP32
    m = plan.micro_batches

    def seconds(p: int, nbytes: float) -> float:
        return (p - 1) / p * nbytes / NVLINK_BYTES_PER_S

    extra = (m - 1) * (seconds(DP, dense) + seconds(g, experts))
    over_all = (m - 1) * (seconds(DP, dense) + seconds(DP, experts))
    measured = two.time_breakdown_s["dp_comm"] - one.time_breakdown_s["dp_comm"]
    # the rest is latency, at most NCCL Simple's 8.4 us + 3.4 us per ring step (dgx-a100 preset) for each of the
    # m per-layer reduce-scatters of every micro-batch
    latency = m * sum(
        8.4e-6 + (p - 1) * 3.4e-6
        for prefix, p in (("dp:", DP), ("edp:", g))
        for _ in _comms(plan, "B", prefix)
    )
    assert extra < measured <= extra + latency < over_all
@pytest.mark.parametrize("zero", [0, 1])
def test_unsharded_expert_gradients_reduce_over_the_expert_data_parallel_group(zero):
    """ZeRO-0 all-reduces, ZeRO-1 reduce-scatters the gradients once per iteration: the dense ones over the
    8 replicas, the routed experts' over the dp/ep = 4 holding them; the time is theirs, one after the other."""
    ep, g = 2, DP // 2
    plan = make_plan(_moe(ep, zero))
    dense = sum(_layer_params(plan, li.index, ep, 1)[0] for li in plan.workload.layers) * FP32
    experts = sum(_layer_params(plan, li.index, ep, 1)[1] for li in plan.workload.layers) * FP32
    assert plan.stages[0].expert_grad_bytes[0] == pytest.approx(experts)
    passes = 2 if zero == 0 else 1  # a ring all-reduce is a reduce-scatter then an all-gather
    coll = plan.dp_collective(0, 0)
    bandwidth = passes * ((DP - 1) / DP * dense + (g - 1) / g * experts) / NVLINK_BYTES_PER_S
    latency = 2 * (8.4e-6 + passes * (DP - 1) * 3.4e-6)  # two collectives, NCCL Simple at most
    assert bandwidth < coll.time(plan.hw) <= bandwidth + latency


def test_expert_data_parallel_groups_cross_the_expert_parallel_groups():
    """The replicas of an expert-data-parallel group hold the same experts: one from each expert-parallel group
    (replicas k·ep … k·ep + ep − 1, the all-to-all's groups), all at the same expert rank."""
    ep = 2
    plan = make_plan(_moe(ep, 3))
    groups = plan.stages[0].groups
    edp = expert_groups(groups, ep)
    assert len(edp) == ep and all(len(g) == DP // ep for g in edp)
    for e, members in enumerate(edp):
        replicas = [groups.index(tg) for tg in members]
        assert all(j % ep == e for j in replicas)
        assert sorted(j // ep for j in replicas) == list(range(DP // ep))


@pytest.mark.parametrize(("ep", "zero", "fsdp", "tp"), [(2, 2, False, 1), (4, 3, False, 1), (2, 3, True, 2)])
def test_both_engines_agree(ep, zero, fsdp, tp):
    a = simulate(_moe(ep, zero, tp, fsdp=fsdp))
    e = simulate(_moe(ep, zero, tp, "event", fsdp=fsdp))
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
    assert e.time_breakdown_s["dp_comm"] == pytest.approx(a.time_breakdown_s["dp_comm"], rel=1e-9)
    per_device = _moe(ep, zero, tp, "event", fsdp=fsdp)
    per_device = per_device.model_copy(update={"run": per_device.run.model_copy(update={"aggregate": False})})
    assert simulate(per_device).iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
