"""MFU counts the model's FLOPs: routed experts at top_k slots per token, not the padded capacity slots
(``plan.hardware_flops.model_flops_per_sample``; Megatron-LM's and NeMo's MFU formulas use
``moe_router_topk`` and no capacity factor). HFU keeps the padded slots: the hardware runs them."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.simulate import make_plan, simulate

SEQ, HIDDEN, EXPERTS, TOP_K, FFN, LAYERS, MB, DP, TP, EP = 1024, 1024, 8, 2, 4096, 2, 2, 4, 2, 4
GLOBAL = 16


def _project(capacity_factor: float | None, mode: str = "train") -> Project:
    moe = {"experts": EXPERTS, "top_k": TOP_K, "expert_ffn": FFN, "capacity_factor": capacity_factor}
    spec = GPTSpec(name="moe", layers=LAYERS, hidden=HIDDEN, heads=16, seq_len=SEQ, vocab=32000, mlp_bias=False,
                   moe=moe)
    mapping = Mapping(tp=TP, dp=DP, ep=EP, micro_batch=MB, global_batch=GLOBAL)
    run = RunSettings(dtype="bf16", engine="analytic", mode=mode)
    return Project(name="mfu", hardware=load_system("dgx-a100"), workload=spec, mapping=mapping, run=run)


def _expert_gemm_flops(slots_per_token: float) -> float:
    """Forward FLOPs per sample of one layer's routed expert GEMMs (GPT's MLP: up h → f and down f → h),
    2 · m · n · k with m the token-slots the experts process."""
    return 2 * (2.0 * SEQ * slots_per_token * HIDDEN * FFN)


@pytest.mark.parametrize("factor", [2.0, 1.25])
def test_padding_is_hardware_work_not_model_work(factor):
    padded, dropless = make_plan(_project(factor)), make_plan(_project(None))
    assert padded.model_flops == pytest.approx(dropless.model_flops)
    # the padded slots beyond top_k: forward + twice that backward, every layer, every sample
    extra = 3 * LAYERS * GLOBAL * (_expert_gemm_flops(TOP_K * factor) - _expert_gemm_flops(TOP_K))
    assert padded.hardware_flops - padded.model_flops == pytest.approx(extra)


def test_mfu_falls_when_padding_only_costs_time():
    """Padding slows the iteration and adds no model work: MFU must fall, HFU may rise."""
    padded, dropless = simulate(_project(2.0)), simulate(_project(None))
    assert padded.iteration_time_s > dropless.iteration_time_s
    assert padded.mfu < dropless.mfu
    assert padded.mfu == pytest.approx(dropless.mfu * dropless.iteration_time_s / padded.iteration_time_s)
    assert padded.hfu > padded.mfu


def test_inference_plan_counts_top_k_too():
    padded, dropless = make_plan(_project(2.0, "infer")), make_plan(_project(None, "infer"))
    assert padded.model_flops == pytest.approx(dropless.model_flops)
    assert padded.hardware_flops - padded.model_flops == pytest.approx(
        LAYERS * padded.project.run.inference.batch * (_expert_gemm_flops(2 * TOP_K) - _expert_gemm_flops(TOP_K))
    )
