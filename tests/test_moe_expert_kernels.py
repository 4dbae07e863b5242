"""Routed experts under Megatron-Core training run as Transformer Engine's ``GroupedLinear``: one cuBLAS GEMM per
local expert on 4 streams, each kernel paying its own fill (measured in TE pull request #2045); a runtime without
TE's per-expert kernels (vLLM's fused MoE, ``torch._grouped_mm``) runs one kernel over all the experts, with one fill.

Expected values are derived from the efficiency curve's fill of one expert-sized kernel
(``DeviceModel.matmul_parts``, read as a primitive) and the expert counts; the plan-level check sets a pass
built by Megatron-Core's framework against the same op priced without it."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir.ops import ExpertInfo, MoERole, Op, OpKind, TensorSplit
from tilewright.engine.perf import op_cost
from tilewright.engine.perf.device import device_model

HIDDEN, FFN, TOP_K = 2048, 768, 8  # Qwen3-30B-A3B's expert shape
BF16 = 2


def _gpu():
    """The dgx-h100 preset's GPU compute."""
    system = load_system("dgx-h100")

    def find(c):
        if c.compute is not None and c.compute.gemm_tile is not None:
            return c.compute
        return next((x for x in map(find, c.children) if x is not None), None)

    return find(system)


def _expert_op(local: int, rows_per_expert: int) -> Op:
    """An expert up projection as one ep-8 rank holds it: ``local`` experts of FFN × HIDDEN, each with
    ``rows_per_expert`` token-slots (a multiple of the 256-row tile: no per-expert padding)."""
    rows = local * rows_per_expert
    info = ExpertInfo(role=MoERole.expert, experts=8 * local, top_k=TOP_K, tokens=rows // TOP_K,
                      tokens_fraction=TOP_K / (8 * local))
    return Op(name="block0.experts_up", layer=0, kind=OpKind.matmul, split=TensorSplit.column,
              flops=2.0 * rows * FFN * HIDDEN, params=local * FFN * HIDDEN, gemm=(rows, FFN, HIDDEN),
              in_elems=rows * HIDDEN, out_elems=rows * FFN, moe=info)


@pytest.mark.parametrize(("local", "rows"), [(16, 2048), (8, 4096), (5, 512)])
@pytest.mark.parametrize("backward", [False, True])
def test_each_expert_kernel_pays_its_own_fill(local, rows, backward):
    """With TE's per-expert kernels the fixed part is one fill per expert per GEMM kind (forward: one GEMM;
    backward: the data and the weight gradient), against one fill of a single kernel of all the FLOPs per kind
    without; the throughput part (tiles and waves) is the same either way."""
    dev = device_model(_gpu(), [], None, "bf16")
    op = _expert_op(local, rows)
    kernels = op_cost.gemm_kernels(op.kind, backward, op.gemm)
    te = op_cost.op_time(op, dev, 1, 1, False, backward, BF16, expert_kernels=True)
    fused = op_cost.op_time(op, dev, 1, 1, False, backward, BF16)
    peak = dev.matmul_peak(None, True)
    flops = op.flops * (2 if backward else 1)  # the backward's two GEMMs, each the forward's FLOPs
    per_expert = whole = 0.0
    for share, dims in kernels:
        eff = op_cost.grouped_efficiency(dev.compute, dims, op.gemm[0], local)
        per_expert += local * dev.matmul_parts(flops * share / eff / local, peak)[1]
        whole += dev.matmul_parts(flops * share / eff, peak)[1]
    assert te.overhead_s - fused.overhead_s == pytest.approx(per_expert - whole, rel=1e-9)
    assert te.compute_s == pytest.approx(fused.compute_s, rel=1e-12)
    if local > 4:
        assert te.overhead_s > fused.overhead_s


@pytest.mark.parametrize("backward", [False, True])
def test_the_gate_runs_in_the_up_projections_kernels(backward):
    """Megatron-Core's ``linear_fc1`` is one GroupedLinear of twice the expert width: the gate half adds its
    throughput to the up half's kernels and no fill of its own (its overhead is the per-op floor alone), where
    one grouped kernel of its own (torchtitan's separate ``torch._grouped_mm`` for w1 and w3) pays one."""
    dev = device_model(_gpu(), [], None, "bf16")
    gate = _expert_op(16, 2048).model_copy(update={"name": "block0.experts_gate"})
    te = op_cost.op_time(gate, dev, 1, 1, False, backward, BF16, expert_kernels=True)
    fused = op_cost.op_time(gate, dev, 1, 1, False, backward, BF16)
    assert te.overhead_s == pytest.approx(dev.compute.fixed_op_s, rel=1e-12)
    assert fused.overhead_s > te.overhead_s
    assert te.compute_s == pytest.approx(fused.compute_s, rel=1e-12)


def test_one_expert_is_one_kernel_either_way():
    """A dense op (no routed experts) is one GEMM kernel: ``expert_kernels`` changes nothing."""
    dev = device_model(_gpu(), [], None, "bf16")
    op = _expert_op(16, 2048).model_copy(update={"moe": None, "params": FFN * HIDDEN})
    a = op_cost.op_time(op, dev, 1, 1, False, False, BF16, expert_kernels=True)
    b = op_cost.op_time(op, dev, 1, 1, False, False, BF16)
    assert a == b


@pytest.mark.parametrize(("framework", "system", "expected"),
                         [(None, "dgx-h100", True), ("mcore-te", "dgx-h100", True), ("pytorch", "dgx-h100", False),
                          (None, "tpu-v4-torus", False)])
def test_training_frameworks_choose_the_expert_kernels(framework, system, expected, monkeypatch):
    """The pass builder prices routed experts as per-expert kernels under the Megatron frameworks (TE's
    GroupedLinear; None: the mapping's default, Megatron-LM) and as one grouped kernel under plain PyTorch
    (torchtitan's ``torch._grouped_mm``) and on a device no host framework drives kernel by kernel (a TPU);
    serving passes set ``moe_framework`` False (``plan.inference_phases``)."""
    from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
    from tilewright.engine.plan import op_memo, pass_builder
    from tilewright.engine.simulate import make_plan

    seen: list[tuple[str, bool]] = []
    original = op_cost.op_time

    def spy(op, *a, **k):  # type: ignore[no-untyped-def]
        seen.append((op.name, k.get("expert_kernels", False)))
        return original(op, *a, **k)

    monkeypatch.setattr(pass_builder, "op_time", spy)
    monkeypatch.setattr(op_memo, "op_time", spy)
    spec = GPTSpec(name="moe", layers=1, hidden=HIDDEN, heads=16, seq_len=1024, vocab=32000,
                   moe={"experts": 64, "top_k": TOP_K, "expert_ffn": FFN})
    project = Project(name="moe", hardware=load_system(system), workload=spec,
                      mapping=Mapping(tp=1, dp=8, ep=8, expert_imbalance=1.0, micro_batch=1, global_batch=8,
                                      host_framework=framework),
                      run=RunSettings(dtype="bf16", engine="analytic", contention=False))
    make_plan(project)
    experts = [flag for name, flag in seen if "experts_" in name]
    assert experts and all(flag is expected for flag in experts)
