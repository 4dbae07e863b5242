"""Mixture-of-experts traffic in the plan: tensor-parallel collectives of expert layers, the expert gradients'
reduction group, ZeRO-3's per-layer gathers and the mapping checks for MoE and GQA models.

Expected bytes are derived here from the model's dimensions (Megatron-Core's placement of the collectives)
and the ring formula — a reduce-scatter or all-gather of B bytes over p ranks moves (p − 1)/p · B per rank,
split over both directions of a bidirectional ring (``perf.collectives``) except when p = 2, where each rank
has one peer — never read back from the engine's own output."""

from __future__ import annotations

import pytest
from tilewright.engine.errors import InputError
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.ops import MoERole, TensorSplit
from tilewright.engine.plan.checks import raise_for_problems
from tilewright.engine.search.space import tensor_options
from tilewright.engine.simulate import make_plan

SEQ, HIDDEN, EXPERTS, TOP_K, MB = 1024, 1024, 8, 2, 2
BF16, FP32 = 2, 4
MOE = GPTSpec(
    name="moe",
    layers=2,
    hidden=HIDDEN,
    heads=16,
    seq_len=SEQ,
    vocab=32000,
    moe={"experts": EXPERTS, "top_k": TOP_K, "expert_ffn": 2 * HIDDEN},
)


def _project(spec=MOE, **mapping) -> Project:
    m = {"tp": 2, "dp": 4, "micro_batch": MB, "global_batch": 4 * MB * 2} | mapping
    return Project(
        name="moe",
        hardware=load_system("dgx-a100"),
        workload=spec,
        mapping=Mapping(**m),
        run=RunSettings(dtype="bf16", engine="analytic", contention=False),
    )


def _tensor_comms(plan, kind: str) -> list[tuple[str, float]]:
    """The tensor-parallel collectives of a pass's layers (not the dp:/cp:/ep: ones over replicas, nor the
    input batch's broadcast over the tensor group, ``plan.train_step``, nor the cross-entropy's all-reduces of
    one fp32 value per token, ``plan.passes``)."""
    segs = plan.stages[0].passes[(0, kind)].segments
    loss = SEQ * MB * 4.0
    return [s.comm for s in segs
            if s.comm and ":" not in s.comm[0] and s.comm[0] != "broadcast" and s.comm[1] != loss]


@pytest.mark.parametrize("sp", [False, True])
def test_expert_layers_reduce_and_gather_tokens_not_token_slots(sp):
    """Megatron-Core reduces after ``experts_down`` and (sequence parallel) gathers before ``experts_up`` the
    layer's s·b tokens × hidden, as a dense MLP does — the top_k slots are permuted and combined locally."""
    # the input gradients' reductions whole, not their part their weight gradients leave (plan.dgrad_overlap)
    plan = make_plan(_project(sequence_parallel=sp, overlap_dgrad_comm=False))
    tokens_bytes = SEQ * MB * HIDDEN * BF16
    for kind in ("F", "B"):
        comms = _tensor_comms(plan, kind)
        # per block one around attention and one around the experts (and the embedding's forward reduction)
        assert len(comms) >= 2 * MOE.layers
        assert all(nbytes == pytest.approx(tokens_bytes) for _, nbytes in comms)


SPLIT = {TensorSplit.column, TensorSplit.row, TensorSplit.heads, TensorSplit.vocab}  # Megatron: 1/tp per rank


def _expert_params_per_device(plan, ep: int, tp: int) -> float:
    ops = [op for op in plan.workload.ops() if op.moe is not None and op.moe.role is MoERole.expert]
    return sum(op.params / ep / (tp if op.split in SPLIT else 1) for op in ops)


def _ring_bytes(p: int, nbytes: float) -> float:
    """Bytes per member of one ring reduce-scatter phase (see the module docstring)."""
    return (p - 1) / p * nbytes / (2 if p > 2 else 1)


def test_expert_gradients_reduce_over_the_replicas_that_hold_the_same_experts():
    """dp 4, ep 2: dense gradients over the 4 replicas, each expert's over the 2 that hold it."""
    plan = make_plan(_project(ep=2, zero=1))
    st = plan.stages[0]
    experts = _expert_params_per_device(plan, 2, 2) * FP32
    dense = st.params * FP32 - experts
    assert st.expert_grad_bytes[0] == pytest.approx(experts)
    phases = plan.dp_collective(0, 0).phases
    assert phases[-1].bytes_per_member == pytest.approx(_ring_bytes(2, experts))
    assert sum(ph.bytes_per_member for ph in phases[:-1]) == pytest.approx(_ring_bytes(4, dense))


def test_experts_held_by_one_replica_need_no_gradient_reduction():
    plan = make_plan(_project(ep=4, zero=1))
    dense = plan.stages[0].params * FP32 - _expert_params_per_device(plan, 4, 2) * FP32
    assert sum(ph.bytes_per_member for ph in plan.dp_collective(0, 0).phases) == pytest.approx(_ring_bytes(4, dense))
    # ZeRO-1's gather of the updated weights follows the same groups
    dense_w = (plan.stages[0].params - _expert_params_per_device(plan, 4, 2)) * BF16
    gather = plan.zero_gather(0)
    assert sum(ph.bytes_per_member for ph in gather.phases) == pytest.approx(_ring_bytes(4, dense_w))


def test_zero3_gathers_each_layers_weights_before_its_forward():
    """Per layer and micro-batch: an all-gather of the layer's bf16 weights (1/tp of them per tensor rank),
    each rank receiving (p − 1)/p of it."""
    dense = GPTSpec(name="gpt", layers=4, hidden=HIDDEN, heads=16, seq_len=SEQ, vocab=32000)
    plan = make_plan(_project(dense, zero=3, overlap_param_gather=False))
    gathers = [s.comm for s in plan.stages[0].passes[(0, "F")].segments if s.comm and s.comm[0] == "dp:all-gather"]
    layers = [li.index for li in plan.workload.layers]
    assert len(gathers) == len(layers)
    for index, (kind, nbytes) in zip(layers, gathers, strict=True):
        ops = plan.workload.layer_ops(index)
        weights = sum(op.params / (2 if op.split in SPLIT else 1) for op in ops) * BF16
        assert nbytes == pytest.approx(weights)
        coll = plan.tp_collective(0, 0, kind, nbytes)
        wire = sum(ph.bytes_per_member for ph in coll.phases)  # NCCL's LL protocol puts flags on the wire too
        assert wire * coll.payload_fraction == pytest.approx(_ring_bytes(4, weights))


def test_tp_must_fit_the_kv_heads_of_every_family_and_the_expert_width():
    gqa = GPTSpec(name="gqa", layers=2, hidden=1536, heads=24, kv_heads=4, seq_len=SEQ, vocab=32000)
    with pytest.raises(InputError, match="kv_heads"):
        raise_for_problems(_project(gqa, tp=3, dp=2), "test")  # 3 divides the 24 heads, not the 4 kv heads
    raise_for_problems(_project(gqa, tp=2, dp=4), "test")
    raise_for_problems(_project(gqa, tp=8, dp=1, global_batch=2 * MB), "test")  # a multiple: kv heads replicated
    options = set(tensor_options(gqa, 8))
    assert {1, 2, 4, 8} <= options and not {3, 6} & options
    odd = MOE.model_copy(update={"moe": MOE.moe.model_copy(update={"expert_ffn": 1030})})
    with pytest.raises(InputError, match="moe.expert_ffn"):
        raise_for_problems(_project(odd, tp=4, dp=2), "test")
    assert 4 not in tensor_options(odd, 8) and 2 in tensor_options(odd, 8)
