"""Biased routed experts (gpt-oss: ``add_bias_linear``) under Megatron-Core's ``TEGroupedMLP``: fc2's bias is added
outside the grouped GEMM, one local expert at a time, scaled by each token's routing probability
(``TEGroupedMLP._apply_bias``; ``plan.experts.expert_bias_kernels``). Per pass over R bytes of combine-side rows
split over L local experts: forward 2·L + 1 eager kernels over 6·R bytes (b·p, t + b·p per expert, one cat),
backward 4·L + 2 over 8·R (two products and two reductions per expert, the split's two cats).

Expected values come from the workload's shapes and the plan's own all-to-all bytes (the rows the bias runs over
are the rows the combine's all-to-all sends back), not from the function under test."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.workload import MoESpec
from tilewright.engine.plan.experts import dispatch_work, expert_bias_kernels
from tilewright.engine.simulate import make_plan

EXPERTS, TOP_K, LAYERS, SEQ, HIDDEN, EP, MB = 16, 2, 2, 1024, 1024, 4, 1
BF16 = 2.0


def _spec(bias: bool) -> LlamaSpec:
    return LlamaSpec(name="moe", layers=LAYERS, hidden=HIDDEN, heads=16, ffn=4 * HIDDEN, vocab=32000, seq_len=SEQ,
                     mlp_bias=bias, moe=MoESpec(experts=EXPERTS, top_k=TOP_K, expert_ffn=HIDDEN))


def _project(bias: bool) -> Project:
    return Project(name="bias", hardware=load_system("dgx-h100"), workload=_spec(bias),
                   mapping=Mapping(tp=1, dp=8, ep=EP, micro_batch=MB, global_batch=16, expert_imbalance=1.0),
                   run=RunSettings(dtype="bf16", engine="analytic", contention=False))


def _rows_bytes() -> float:
    """Token-slots × hidden of one device's micro-batch at bf16, balanced: what the combine sends back."""
    return MB * SEQ * TOP_K * HIDDEN * BF16


def test_kernel_counts_and_passes():
    rows, local = 6.0e6, 3
    fwd, bwd = expert_bias_kernels(rows, local, False), expert_bias_kernels(rows, local, True)
    assert len(fwd) == 2 * local + 1 and sum(fwd) == pytest.approx(6 * rows)
    assert len(bwd) == 4 * local + 2 and sum(bwd) == pytest.approx(8 * rows)
    assert max(fwd) == pytest.approx(2 * rows)  # the concatenation touches every row twice, in one kernel


def _ops(bias: bool) -> tuple[dict, object]:
    """One MoE layer's ops and the device's compute, from the plan of the project."""
    plan = make_plan(_project(bias))
    return {op.name.split(".", 1)[-1]: op for op in plan.workload.layer_ops(1)}, plan.stages[0].dev.compute


@pytest.mark.parametrize("backward", [False, True])
def test_only_the_biased_combine_side_op_carries_it(backward):
    (biased, compute), (plain, _) = _ops(True), _ops(False)
    local = EXPERTS // EP
    down = dispatch_work(biased["experts_down"], backward, MB, 1, EP, BF16, compute)
    assert down.bias_kernels == pytest.approx(expert_bias_kernels(_rows_bytes(), local, backward))
    assert dispatch_work(plain["experts_down"], backward, MB, 1, EP, BF16, compute).bias_kernels == ()
    assert dispatch_work(biased["experts_up"], backward, MB, 1, EP, BF16, compute).bias_kernels == ()
    # a serving runtime (no Megatron-Core code) has no TEGroupedMLP
    assert dispatch_work(biased["experts_down"], backward, MB, 1, EP, BF16, compute,
                         framework=False).bias_kernels == ()


def _local_bytes(plan, kind: str) -> float:
    return sum(s.local_bytes for st in plan.stages for (_c, k), ps in st.passes.items() if k == kind
               for s in ps.segments)


@pytest.mark.parametrize(("kind", "passes"), [("F", 6), ("B", 8)])
def test_the_plan_streams_the_bias_over_the_combined_rows(kind, passes):
    """Per MoE layer and pass the biased model streams ``passes`` × the rows one combine all-to-all carries more
    than the unbiased one; everything else streams alike but the biases themselves (each device's
    local experts' three biases of HIDDEN, read, and written back as gradients: a few kilobytes)."""
    biased, plain = make_plan(_project(True)), make_plan(_project(False))
    extra = _local_bytes(biased, kind) - _local_bytes(plain, kind)
    combine = [s.comm[1] for s in biased.stages[0].passes[(0, "F")].segments
               if s.comm and s.comm[0].startswith("ep:")][1]
    assert combine == pytest.approx(_rows_bytes())  # a balanced router (expert_imbalance 1)
    biases = LAYERS * (EXPERTS // EP) * 3 * HIDDEN * BF16
    assert LAYERS * passes * combine <= extra <= LAYERS * passes * combine + 4 * biases
