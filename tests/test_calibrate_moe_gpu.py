"""Structure of the published-MoE check (benchmarks/calibrate_moe_gpu.py), not its accuracy.

What could silently break the comparison: Megatron-LM's FLOPs formula that turns published TFLOP/s into tokens/s
(checked against a count of the same FLOPs from the model's matmul widths, and against the source's own rows,
which publish both a step time and a TFLOP/s), a model built with the wrong size (Mistral's published parameter
counts, which the spec was not derived from), or a run that no longer maps onto its published device count
and batch. No assertion on the errors: the rows are a check, not a target.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
from calibrate_moe_gpu import evaluate, project_for  # noqa: E402
from moe_gpu_published import QWEN3_TABLE, RUNS, megatron_gflop_per_token, model_spec  # noqa: E402
from tilewright.engine.plan.checks import check_project  # noqa: E402
from tilewright.engine.workloads import build_workload  # noqa: E402


def _flops_by_hand(name: str, seq: int, causal: bool) -> float:
    """Megatron's count rebuilt from the matmul widths: 6 FLOPs per weight per token (forward and two backward
    GEMMs) over the query, key/value, output, routed-expert (top-k × gate, up, down) and logit weights, plus
    3 × 4 · s · q per layer for the score and context products, half of them when only the causal half counts."""
    spec = model_spec(name, seq)
    h, q = spec.hidden, spec.heads * (spec.head_dim or spec.hidden // spec.heads)
    kv = spec.kv_heads * q // spec.heads
    weights = spec.layers * (h * q + 2 * h * kv + q * h + spec.moe.top_k * 3 * h * spec.moe.expert_ffn) + h * spec.vocab
    scores = spec.layers * 12 * seq * q * (0.5 if causal else 1.0)
    return (6 * weights + scores) / 1e9


@pytest.mark.parametrize("name", ["qwen3-235b-a22b", "mixtral-8x7b", "mixtral-8x22b"])
@pytest.mark.parametrize("causal", [False, True])
def test_megatron_flops_formula_counts_the_matmul_widths(name, causal):
    seq = 4096
    assert megatron_gflop_per_token(model_spec(name, seq), causal) == pytest.approx(
        _flops_by_hand(name, seq, causal), rel=1e-9)


@pytest.mark.parametrize("run", QWEN3_TABLE, ids=lambda r: r.label)
def test_step_time_and_tflops_of_a_row_agree_under_the_causal_count(run):
    """The ModelZoo table prints both: their ratio fixes the FLOPs convention its TFLOP/s use (the
    long-context rows of the same file publish TFLOP/s only and are converted with it)."""
    spec = model_spec(run.model, run.seq)
    causal = run.tokens_per_gpu() * megatron_gflop_per_token(spec, True) / 1e3
    full = run.tokens_per_gpu() * megatron_gflop_per_token(spec, False) / 1e3
    assert causal == pytest.approx(run.tflops, rel=0.01)  # step times printed to 3 digits
    assert abs(full / run.tflops - 1) > 0.1


def test_mixtral_8x22b_matches_mistral_published_sizes():
    """Mistral AI's announcement: 141 B parameters, 39 B active (the run's vocabulary is 32,000, Mistral's
    32,768: 6 M parameters, below the quoted digits)."""
    graph = build_workload(model_spec("mixtral-8x22b", 4096))
    assert graph.params / 1e9 == pytest.approx(141, abs=1)
    assert graph.active_params / 1e9 == pytest.approx(39, abs=1)


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.label)
def test_each_run_maps_onto_its_published_devices_and_batch(run):
    project = project_for(run)
    m = project.mapping
    assert m.tp * m.pp * m.dp * m.cp == run.gpus
    assert m.global_batch % (m.micro_batch * m.dp) == 0
    assert (m.tp * m.dp * m.cp) % (m.ep * (m.expert_tp or m.tp)) == 0
    assert project.workload.seq_len == run.seq
    assert (project.workload.moe.capacity_factor is not None) == run.token_drop
    if m.pipeline_layers is not None:
        assert sum(m.pipeline_layers) == project.workload.layers
    assert check_project(project) == []


def test_a_published_range_brackets_both_flops_conventions():
    """A row whose FLOPs convention is not pinned reports the range both conventions give; a pinned one a
    single value."""
    for run in RUNS:
        lo, hi = run.tokens_range()
        if run.step_s is None and run.flops_causal is None:
            assert lo == pytest.approx(run.tokens_per_gpu(False)) and hi == pytest.approx(run.tokens_per_gpu(True))
        else:
            assert lo == hi


def test_the_smallest_run_simulates_without_running_out_of_memory():
    outcome = evaluate(next(r for r in RUNS if r.model == "mixtral-8x7b"))
    assert not outcome.oom and outcome.tokens_per_gpu > 0


def test_the_imbalance_what_if_touches_only_trained_routers():
    """``--imbalance`` stands for a trained router's skew: a forced-balance or token-drop run keeps the
    engine's own resolution (the floor, or 1 when padded)."""
    for run in RUNS:
        m = project_for(run, imbalance=1.3).mapping
        trained = not run.forced_balance and not run.token_drop
        assert m.expert_imbalance == (1.3 if trained else None)
        assert project_for(run).mapping.expert_imbalance is None
