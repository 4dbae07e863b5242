"""The torchtitan FSDP2 check (``benchmarks/calibrate_fsdp.py``), PyTorch FSDP2's copy kernels
(``mapping.fsdp_copies``, ``plan.sharding``) and torchtitan's op-level activation checkpointing
(``perf.recompute`` 'op_sac').

Expected numbers are derived here from the model's shapes and the dgx-a100 preset's HBM figures, not read from
the engine's own formulas: FSDP2's ``split_with_sizes_copy`` after each all-gather reads and writes every gathered
weight (2 × 2 B per parameter in bf16), its ``torch.cat`` before each reduce-scatter reads the bf16 gradient and
writes it in fp32 (2 + 4 B per parameter), one kernel per layer, on the compute stream."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
from calibrate_fsdp import PUBLISHED, Row, grand_teton, project_for  # noqa: E402
from tilewright.engine.io.presets import load_system  # noqa: E402
from tilewright.engine.perf.recompute import selection  # noqa: E402
from tilewright.engine.simulate import make_plan, simulate  # noqa: E402

HBM_BYTES_PER_S = 2039e9 * 0.87  # dgx-a100 preset: A100 80 GB HBM2e 2,039 GB/s at efficiency 0.87
RAMP_S, FLOOR_S = 1.9e-6, 1.1e-6  # its stream_ramp_s and fixed_op_s: each streamed kernel's extra time


def _row(ac: str, model: str = "llama2-13b") -> Row:
    """The A100 Llama 2 13B row at ``ac`` (a published one for 'none' and 'selective-layer')."""
    base = next(p for p in PUBLISHED if p.model == model and p.gpu == "a100")
    return Row(replace(base, ac=ac))


def _llama2_13b_params() -> float:
    """Parameters of Llama 2 13B from its shapes (torchtitan ModelArgs): per block 4·h² attention (no GQA),
    3·h·ffn SwiGLU, two RMSNorm gains; untied embedding and head of V·h; the final norm."""
    h, ffn, layers, vocab = 5120, 13824, 40, 32000
    return layers * (4 * h * h + 3 * h * ffn + 2 * h) + 2 * vocab * h + h


def test_rows_cite_a_pinned_source_and_their_batches():
    """Every row names the repository, file and 40-digit commit it is read from; the global batch is the
    local batch times the FSDP degree, as torchtitan's ``global batch size = local batch size × FSDP ranks``."""
    for pub in PUBLISHED:
        repo, path, commit = pub.source
        assert repo == "pytorch/torchtitan" and path == "docs/performance.md" and len(commit) == 40
        m = project_for(Row(pub)).mapping
        assert m.global_batch == pub.local_batch * m.dp and m.dp * m.cp * m.tp == pub.gpus
        assert m.zero == 3 and m.fsdp and m.fsdp_copies


def test_selective_layer_ac_recomputes_half_of_what_full_ac_does():
    """torchtitan's ``selective_ac_option = '2'`` checkpoints every second block: the re-run forward is half
    of full AC's (the blocks are alike; the head and embedding are never re-run by either)."""
    half = simulate(project_for(_row("selective-layer"))).time_breakdown_s["recompute"]
    full = simulate(project_for(_row("full"))).time_breakdown_s["recompute"]
    assert half == pytest.approx(full / 2, rel=0.01)


def test_fsdp2_copies_cost_their_bytes_through_hbm():
    """With FSDP2's copies a micro-batch without recomputation adds, per layer holding weights, a copy-out after
    the forward gather and after the backward gather and a copy-in before the reduce-scatter: 14 B per
    parameter in all, each kernel also paying the preset's ramp and per-kernel floor."""
    row = _row("none")
    with_copies = project_for(row)
    without = with_copies.model_copy(update={"mapping": with_copies.mapping.model_copy(
        update={"fsdp_copies": False})})
    plan = make_plan(with_copies)
    params = plan.stages[0].params  # the whole model on each device (gathered; tp 1)
    assert params == pytest.approx(_llama2_13b_params(), rel=1e-6)
    layers = len({op.layer for op in plan.workload.ops() if op.params > 0})
    kernels = 3 * layers * plan.micro_batches
    expected = plan.micro_batches * params * (2 * 2 * 2 + 2 + 4) / HBM_BYTES_PER_S + kernels * (RAMP_S + FLOOR_S)
    delta = simulate(with_copies).iteration_time_s - simulate(without).iteration_time_s
    # the longer layers may hide a little more of a collective (never more than the exposed dp_comm)
    assert delta == pytest.approx(expected, rel=0.02)


def _copies_s(project) -> float:
    """Iteration seconds the FSDP2 copies add to ``project``."""
    without = project.model_copy(update={"mapping": project.mapping.model_copy(update={"fsdp_copies": False})})
    return simulate(project).iteration_time_s - simulate(without).iteration_time_s


def test_copy_in_follows_the_reduce_dtype():
    """The reduce-scatter copy-in writes the gradients in the reduce dtype: bf16 reduction saves 2 B per
    parameter per micro-batch against fp32 (torchtitan's default ``mixed_precision_reduce`` float32)."""
    project = project_for(_row("none"))
    bf16 = project.model_copy(update={"mapping": project.mapping.model_copy(update={"grad_reduce_in_fp32": False})})
    plan = make_plan(project)
    saved = _copies_s(project) - _copies_s(bf16)
    assert saved == pytest.approx(plan.micro_batches * plan.stages[0].params * 2 / HBM_BYTES_PER_S, rel=0.02)


def test_grand_teton_variant_scales_only_the_documented_figures():
    """The what-if H100 (500 W, HBM2e): HBM at 2.4 / 3.35 of the preset's, 96 GB, every peak at 835 / 989."""
    base, gt = load_system("dgx-h100"), grand_teton(load_system("dgx-h100"))
    b, g = base.children[0].children[0], gt.children[0].children[0]
    assert g.memories[0].bandwidth_bytes_per_s == pytest.approx(2.4e12)
    assert g.memories[0].capacity_bytes == 96e9
    for fmt, peak in b.compute.peak_flops.items():
        assert g.compute.peak_flops[fmt] == pytest.approx(peak * 835 / 989)
    assert gt.children[0].interconnect == base.children[0].interconnect


# torchtitan's Llama block calls its matmuls in this order (Attention.forward: wq, wk, wv, then wo;
# FeedForward.forward: w2(silu(w1(x)) * w3(x))); our ops for each (wq, wk, wv are our one fused qkv)
TITAN_MM_ORDER = ("wq", "wk", "wv", "wo", "w1", "w3", "w2")
OURS = {"wq": "qkv", "wk": "qkv", "wv": "qkv", "wo": "out_proj", "w1": "mlp_gate", "w3": "mlp_up", "w2": "mlp_down"}


def test_op_sac_reruns_the_even_numbered_matmuls_and_keeps_attention():
    """The policy re-runs the matmuls whose 1-based count is even and keeps the others' outputs and flash
    attention's: of our ops, out_proj and mlp_up re-run (wk is inside the fused qkv, which stays kept) and
    neither attention nor the kept GEMMs do."""
    plan = make_plan(project_for(_row("selective-op")))
    layer = next(i for i in plan.workload.block_layers)
    ops = plan.workload.layer_ops(layer)
    chosen = selection(ops, ["op_sac"])
    rerun = {name.split(".", 1)[-1] for name, how in chosen.items() if how.rerun}
    even = {OURS[mm] for k, mm in enumerate(TITAN_MM_ORDER, start=1) if k % 2 == 0}
    kept = {OURS[mm] for k, mm in enumerate(TITAN_MM_ORDER, start=1) if k % 2 == 1}
    assert even - {"qkv"} <= rerun
    assert not (kept & rerun) and "attention" not in rerun


def test_op_sac_recompute_is_at_least_its_gemms_at_peak_and_below_full_recompute():
    """The re-run costs at least the re-run GEMMs' FLOPs at the A100's bf16 peak (2 · tokens · (h² + h · ffn) per
    block, wo and w3) and less than re-running every block whole."""
    h, ffn, layers = 5120, 13824, 40
    row = _row("selective-op")
    tokens = row.pub.local_batch * row.pub.seq
    floor = 2 * tokens * (h * h + h * ffn) * layers / 312e12
    op = simulate(project_for(row)).time_breakdown_s["recompute"]
    full = simulate(project_for(_row("full"))).time_breakdown_s["recompute"]
    assert floor <= op < full
