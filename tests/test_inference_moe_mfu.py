"""Inference MFU counts routed experts at top_k, as training's does (``plan.hardware_flops``): the padded
capacity slots of ``capacity_factor`` are hardware work (HFU), not model work (MFU). The result of ``run --mode
infer`` takes both from ``InferencePhases`` (``request_model_flops`` / ``request_flops``)."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.simulate import simulate

HIDDEN, FFN, EXPERTS, TOP_K, LAYERS, TP = 1024, 4096, 8, 2, 4, 2
BATCH, PROMPT, OUTPUT = 4, 256, 6


def _project(capacity_factor: float | None, engine: str, pp: int = 1, prefill: str | None = None) -> Project:
    moe = {"experts": EXPERTS, "top_k": TOP_K, "expert_ffn": FFN, "capacity_factor": capacity_factor}
    spec = GPTSpec(name="moe", layers=LAYERS, hidden=HIDDEN, heads=16, seq_len=1024, vocab=32000, mlp_bias=False,
                   moe=moe)
    inference = {"batch": BATCH, "prompt_tokens": PROMPT, "output_tokens": OUTPUT, "prefill": prefill}
    run = RunSettings(dtype="bf16", engine=engine, mode="infer", inference=inference)
    mapping = Mapping(tp=TP, pp=pp, micro_batch=1, global_batch=BATCH)
    return Project(name="mfu", hardware=load_system("dgx-a100"), workload=spec, mapping=mapping, run=run)


def _padding_flops(factor: float) -> float:
    """The whole request's FLOPs on padded slots, from the model's shape alone: every token the batch runs
    through the layers (the prompts at the prefill, one per sequence at each of the OUTPUT − 1 decode steps)
    has top_k · (factor − 1) padded slots in each layer's two expert GEMMs (GPT's MLP: h → f and f → h),
    2 · h · f FLOPs each."""
    tokens = BATCH * (PROMPT + OUTPUT - 1)
    return LAYERS * tokens * TOP_K * (factor - 1.0) * 2 * (2.0 * HIDDEN * FFN)


@pytest.mark.parametrize(
    ("engine", "pp", "prefill"),
    [("analytic", 1, None), ("event", 1, None), ("analytic", 2, None), ("analytic", 1, "sequential")],
)
def test_padded_slots_count_in_hfu_not_mfu(engine, pp, prefill):
    padded = simulate(_project(2.0, engine, pp, prefill))
    dropless = simulate(_project(None, engine, pp, prefill))
    assert padded.model_flops_per_iteration == pytest.approx(dropless.model_flops_per_iteration, rel=1e-9)
    assert dropless.hardware_flops_per_iteration == pytest.approx(dropless.model_flops_per_iteration, rel=1e-9)
    assert padded.hardware_flops_per_iteration - padded.model_flops_per_iteration == pytest.approx(
        _padding_flops(2.0), rel=1e-9
    )
    # the same model work over each run's own time: MFU moves only with the time, HFU counts the padded slots
    assert padded.mfu * padded.iteration_time_s == pytest.approx(dropless.mfu * dropless.iteration_time_s)
    assert padded.hfu > padded.mfu
