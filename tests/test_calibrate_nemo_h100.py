"""Structure of the NeMo/Megatron-Bridge DGX-H100 check (benchmarks/calibrate_nemo_h100.py), not its accuracy.

What could silently break the comparison: a model built with the wrong architecture (checked against the
parameter counts on each model card, which the specs were not derived from), a published configuration
that no longer maps onto a runnable project (device count, batch arithmetic), or merged releases that
differ in configuration; for the Megatron-LM rows (published as TFLOP/s only), the FLOPs per token that
convert them to tokens/s and the recipe settings the YAML files give. No assertion on the errors: the rows are
a check, not a target.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
from nemo_h100_models import MODEL_CARD, chunk_layers, model_spec  # noqa: E402
from nemo_h100_published import nv_gflop_per_token, rows  # noqa: E402
from nemo_h100_recipes import BRIDGE_H100, TOKEN_DROP_CAPACITY, bridge_recipe  # noqa: E402
from nemo_h100_run import project_for  # noqa: E402
from tilewright.engine.ir.ops import OpKind  # noqa: E402
from tilewright.engine.plan.checks import check_project  # noqa: E402
from tilewright.engine.workloads import build_workload  # noqa: E402

MODELS = sorted({r.pub.model for r in rows()})


def _digit_unit(card: float) -> float:
    """One unit in the last digit a card quotes ("3.3" → 0.1, "116.83" → 0.01, "671" → 1)."""
    text = f"{card:g}"
    return 10.0 ** -(len(text.split(".")[1]) if "." in text else 0)


@pytest.mark.parametrize("model", MODELS)
def test_total_parameters_match_the_model_card(model):
    graph = build_workload(model_spec(model, 4096))
    total, _active, _ = MODEL_CARD[model]
    assert graph.params / 1e9 == pytest.approx(total, rel=0.01)


@pytest.mark.parametrize("model", MODELS)
def test_active_parameters_match_the_model_card(model):
    """Cards quote active parameters to 2–3 significant digits (Qwen3-30B-A3B: "3.3B" for 3.35 B), so the
    tolerance is one unit of the last quoted digit; gpt-oss counts them without the embedding table."""
    graph = build_workload(model_spec(model, 4096))
    _total, active, without_embedding = MODEL_CARD[model]
    ours = graph.active_params
    if without_embedding:
        ours -= sum(op.params for op in graph.ops() if op.kind is OpKind.embedding)
    assert abs(ours / 1e9 - active) <= _digit_unit(active)


def test_moe_models_are_moe_and_dense_ones_dense():
    for row in rows():
        spec = model_spec(row.pub.model, row.pub.seq)
        assert (spec.moe is not None) == row.moe, row.label


def test_merged_releases_share_one_configuration():
    for row in rows():
        for other in row.others:
            assert other.config == row.pub.config
            assert other.release < row.pub.release  # the row compares with the newest release


@pytest.mark.parametrize("row", rows(), ids=lambda r: r.label)
def test_every_row_maps_to_a_runnable_project_on_the_published_gpus(row):
    project = project_for(row)
    m = project.mapping
    assert m.devices == row.pub.gpus
    assert m.micro_batch == (row.pub.run_recipe.micro_batch or row.pub.mbs) and m.global_batch == row.pub.gbs
    assert project.workload.seq_len == row.pub.seq
    assert check_project(project) == []


def test_a_micro_batch_the_recipe_overrides_is_a_gap():
    """gpt-oss on H100: the recipe's micro_batch_size 1 where the 25.11 table prints MBS 4 (whose GA 2 fits
    neither: gbs 512 over dp 16 is 8 micro-batches of 4). The run uses the recipe's and says so; rows whose
    published MBS is the recipe's have no such gap."""
    moved = []
    for row in rows():
        project = project_for(row)  # fills row.gaps
        want = row.pub.run_recipe.micro_batch
        differs = want is not None and want != row.pub.mbs
        assert any("micro_batch_size" in g for g in row.gaps) == differs, row.label
        if differs:
            dp = row.pub.gpus // (row.pub.tp * row.pub.pp * row.pub.cp)
            assert project.mapping.micro_batches == row.pub.gbs // (want * dp)
            moved.append((row.pub.model, row.pub.release, row.pub.mbs))
    assert moved == [("gpt-oss-120b", "25.11", 4)]


def test_bridge_recipes_reduce_bf16_gradients_and_megatron_lm_fp32():
    """Every Megatron-Bridge performance script sets ddp.grad_reduce_in_fp32 False (its set_*_common_configs);
    Megatron-LM forces the fp32 buffer with bf16: the MLM rows keep it."""
    for row in rows():
        m = project_for(row).mapping
        assert m.grad_reduce_in_fp32 == row.pub.release.startswith("MLM"), row.label


@pytest.mark.parametrize("model,layers,pp,vp", [
    ("llama3.1-405b", 126, 8, 8), ("qwen3-235b-a22b", 94, 8, 4), ("deepseek-v3", 61, 8, 4),
])
def test_megatron_layouts_hold_every_layer_once(model, layers, pp, vp):
    """Each virtual stage's layers (``mapping.pipeline_layers``): every layer once, ranks (virtual stages r,
    r + pp, …) balanced but for the ends, and the project runs interleaved with the layout."""
    chunks = chunk_layers(model, layers, pp, vp)
    assert len(chunks) == pp * vp and sum(chunks) == layers
    counts = [sum(chunks[c] for c in range(r, pp * vp, pp)) for r in range(pp)]
    assert max(counts) - min(counts) <= 2  # Megatron balances ranks; only the ends lose a layer or two
    row = next(r for r in rows() if r.pub.model == model)
    m = project_for(row).mapping
    assert m.interleave == vp and m.pipeline_layers == chunks


def _bridge_qwen3_gflop_per_token(model: str, seq: int) -> float:
    """Megatron-Bridge's ``qwen3_flops`` (flop_utils) per token, counted here from the Hugging Face dimensions:
    GQA attention 6·l·h²·(q/h)·((2·kv/heads + 1) + s/h + 1), SwiGLU experts 6·l·h·3·(expert_ffn·top_k),
    head 6·h·vocab. Written from that formula, not from the benchmark's pooled ratio it checks."""
    spec = model_spec(model, seq)
    h, layers, heads, kv = spec.hidden, spec.layers, spec.heads, spec.kv_heads
    q_ratio = spec.head_dim * heads / h
    attention = 6 * layers * h * h * q_ratio * ((2 * kv / heads + 1) + seq / h + 1)
    experts = 6 * layers * h * 3 * spec.moe.expert_ffn * spec.moe.top_k
    head = 6 * h * spec.vocab
    return (attention + experts + head) / 1e9


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "qwen3-235b-a22b"])
def test_nvidia_flops_per_token_is_megatron_bridges_count(model):
    """The TFLOP/s → tokens/s conversion of the Megatron-LM rows uses the NeMo rows' TFLOP/s over tokens/s;
    it must be Megatron-Bridge's own FLOPs per token to within the three-digit rounding of those TFLOP/s."""
    assert nv_gflop_per_token(model, 4096) == pytest.approx(_bridge_qwen3_gflop_per_token(model, 4096), rel=0.004)


def test_mlm_rows_are_published_tflops_in_tokens():
    mlm = [r for r in rows() if r.pub.release.startswith("MLM")]
    assert {(r.pub.model, r.pub.precision) for r in mlm} == {
        ("qwen3-30b-a3b", "bf16"), ("qwen3-30b-a3b", "fp8"), ("qwen3-235b-a22b", "bf16")}
    for row in mlm:
        for pub in (row.pub, *row.others):
            gflop = _bridge_qwen3_gflop_per_token(pub.model, pub.seq)
            assert pub.tokens_per_gpu == pytest.approx(pub.tflops_per_gpu * 1e3 / gflop, rel=0.004)


def test_mlm_recipes_map_as_their_yaml_says():
    """examples/moe_recipes/qwen3_30b/h100/{bf16,fp8}_32GPU_TP1PP1EP8.yaml, qwen3_235b/h100/
    bf16_256GPU_TP2PP8EP32.yaml: HybridEP (flex dispatcher), no recomputation and CUDA graphs over attn,
    moe_router, moe_preprocess on the 30B fp8 run only; the 235B run's moe_act/layernorm recomputation,
    router/preprocess graphs, EP overlap, expert tp 1 and 3 layer units per virtual stage."""
    by = {(r.pub.model, r.pub.precision): project_for(r).mapping for r in rows() if r.pub.release.startswith("MLM")}
    bf16, fp8, big = by["qwen3-30b-a3b", "bf16"], by["qwen3-30b-a3b", "fp8"], by["qwen3-235b-a22b", "bf16"]
    assert {m.ep_dispatcher for m in (bf16, fp8, big)} == {"deepep"}
    assert bf16.recompute.value == fp8.recompute.value == "none"
    assert bf16.cuda_graph_scope is None
    assert fp8.cuda_graph_scope == ["attn", "moe_router", "moe_preprocess"]
    assert big.recompute.value == "selective" and sorted(big.recompute_modules) == ["layernorm", "moe_act"]
    assert big.cuda_graph_scope == ["moe_router", "moe_preprocess"]
    assert big.overlap_ep_comm and big.expert_tp == 1 and big.tp == 2 and big.pp == 8 and big.ep == 32
    units = [n + (i == 0) + (i == len(big.pipeline_layers) - 1) for i, n in enumerate(big.pipeline_layers)]
    assert units == [3] * 32  # embedding and loss each one layer's worth, 3 per virtual stage


def test_fp8_rows_run_their_published_scaling_and_report_no_scaling_gap():
    """The blockwise row runs block scaling, the FP8-CS rows current (per-tensor) scaling, bf16 rows none: the
    recipe is expressed (``mapping.formats.fp8_scaling``), so no row lists it as a gap."""
    want = {"blockwise": "block", "current": "tensor"}
    for row in rows():
        project = project_for(row)
        scaling = project.mapping.formats.fp8_scaling
        if row.pub.precision == "fp8":
            assert scaling is not None and scaling.value == want[row.pub.run_recipe.fp8_recipe], row.label
        else:
            assert scaling is None, row.label
        assert not any("blockwise" in g for g in row.gaps), row.label


def test_fp8_cs_rows_keep_the_first_and_last_layer_in_bf16_and_the_blockwise_row_none():
    """Megatron-Bridge's bf16_with_fp8_current_scaling_mixed sets first_last_layers_bf16 with one layer at each
    end; Megatron-LM's blockwise Qwen3-30B YAML sets no first_last_layers_bf16; bf16 rows have no fp8 to leave."""
    for row in rows():
        f = project_for(row).mapping.formats
        fp8_cs = row.pub.precision == "fp8" and row.pub.run_recipe.fp8_recipe == "current"
        assert (f.bf16_first_layers, f.bf16_last_layers) == ((1, 1) if fp8_cs else (0, 0)), row.label


def test_bridge_rows_run_their_models_bridge_recipe_and_the_recipe_is_part_of_a_configuration():
    """Same columns under another recipe (Megatron-Bridge's instead of Megatron-LM's) is another configuration:
    the two sources' measurements of one model never merge into one row."""
    for row in rows():
        if not row.pub.release.startswith("MLM"):
            assert row.pub.run_recipe is bridge_recipe(row.pub.model, row.pub.release)
    mlm = next(r.pub for r in rows() if r.pub.model == "qwen3-235b-a22b" and r.pub.release.startswith("MLM"))
    assert replace(mlm, recipe=None).config != mlm.config
    assert replace(mlm, release="26.02", tokens_per_gpu=1.0).config == mlm.config


def test_qwen3_235b_overlaps_its_all_to_alls_from_25_11_but_not_in_the_25_09_token_drop_run():
    """The 25.09 layout's Qwen3-235B H100 config sets no moe_a2a_overlap (nemo_h100_recipes.BRIDGE_H100_2509);
    the later QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_* set it. Everything else of the recipe is the same."""
    big = [r for r in rows() if r.pub.model == "qwen3-235b-a22b" and not r.pub.release.startswith("MLM")]
    releases = {r.pub.release: project_for(r).mapping for r in big}
    assert set(releases) == {"25.09", "25.11", "26.02"}
    for release, m in releases.items():
        assert m.overlap_ep_comm == (release != "25.09"), release
        assert m.expert_tp == 1 and m.ep_dispatcher == "alltoall" and m.moe_router_fusion, release
    assert replace(bridge_recipe("qwen3-235b-a22b", "25.09"), overlap_ep_comm=True) \
        == BRIDGE_H100["qwen3-235b-a22b"]


def test_token_drop_rows_route_at_capacity_one_and_dropless_rows_without_capacity():
    """The performance scripts' use_tokendrop applies apply_moe_token_drop at its defaults (capacity factor 1,
    padded to capacity): the token-drop rows run that (so no gap names them); every other MoE row is dropless."""
    drop = [r for r in rows() if r.pub.token_drop]
    assert {r.pub.model for r in drop} == {"qwen3-30b-a3b", "qwen3-235b-a22b"}
    for row in rows():
        if not row.moe:
            continue
        project = project_for(row)
        want = TOKEN_DROP_CAPACITY if row.pub.token_drop else None
        assert project.workload.moe.capacity_factor == want, row.label
        assert not any("token-drop" in g for g in row.gaps), row.label
    assert TOKEN_DROP_CAPACITY == 1.0


def test_token_drop_removes_the_dropless_host_sync_and_nothing_else():
    """Drop-and-pad at capacity 1 computes the same token-slots as balanced dropless routing: the Qwen3-30B
    25.09 row differs from the same configuration dropless only by the per-layer host sync it no longer waits
    for, so it is no slower and within a few percent."""
    from tilewright.engine.simulate import simulate

    drop = next(r for r in rows() if r.pub.token_drop and r.pub.model == "qwen3-30b-a3b")
    dropless = replace(drop.pub, token_drop=False)
    t_drop = simulate(project_for(drop)).iteration_time_s
    t_dropless = simulate(project_for(type(drop)(dropless))).iteration_time_s
    assert t_drop <= t_dropless < 1.05 * t_drop


def test_gpt_oss_rows_run_their_sink_attention_fused():
    """Both gpt-oss rows ran the learned sinks in TE's cuDNN FusedAttention (nemo_h100_recipes: TE 2.9 / cuDNN
    9.13.1 in 25.11 and TE 2.12 / cuDNN 9.18 in 26.02 are past GPTOSSProvider's TE-2.8 fallback to local
    attention and cuDNN's 9.13.1 sink support): the projects keep the sinks, run attention and softmax as one
    fused kernel (not the unfused scores of the local fallback) and report no attention gap."""
    oss = [r for r in rows() if r.pub.model == "gpt-oss-120b"]
    assert sorted(r.pub.release for r in oss) == ["25.11", "26.02"]
    for row in oss:
        project = project_for(row)
        assert project.workload.attention_sinks, row.label
        assert project.mapping.fusion == [["attention", "softmax"]], row.label
        assert not any("attention" in gap for gap in row.gaps), row.label


def test_bridge_moe_recipes_fuse_the_router():
    """set_qwen3_common_configs, set_gpt_oss_common_configs and set_deepseek_v3_common_configs set
    moe_router_fusion True; the Megatron-LM rows set it in their YAML; dense rows have no router."""
    for row in rows():
        assert project_for(row).mapping.moe_router_fusion == row.moe, row.label


def test_the_fp8_llama_rows_overlap_their_forward_reduce_scatters_by_ring_exchange():
    """userbuffers_fp8_h100_h8192_tp4 / _h16384_tp8_cp2 overlap proj's and fc2's forward reduce-scatter by ring
    exchange (mapping.tp_overlap_reduce_scatter); rows without userbuffers keep the default and no overlap."""
    for row in rows():
        m = project_for(row).mapping
        overlapped = row.pub.run_recipe.tp_overlap is not None
        assert m.overlap_tp_comm == overlapped, row.label
        assert m.tp_overlap_reduce_scatter == ("ring_exchange" if overlapped else "pipeline"), row.label
        assert not any("ring exchange" in g for g in row.gaps), row.label


def test_rows_carry_the_performance_scripts_optimizer_overrides():
    """Megatron-Bridge's performance scripts end (25.09 set_user_overrides, 25.11/26.02 set_post_overrides) with
    ``use_precision_aware_optimizer = True`` when compute_dtype is bf16, at OptimizerConfig's default dtypes (fp32
    moments, fp32 master stored as bf16 parameters + remainders), and ``overlap_param_gather_with_optimizer_step =
    True`` when dp, pp and vp are all > 1, dp = gpus / (tp·pp·cp) from the published columns. Megatron-LM's YAMLs
    set neither flag but the fp8 Qwen3-30B run's precision-aware optimizer (bf16 moments, fp32 master)."""
    seen = set()
    for row in rows():
        p, m = row.pub, project_for(row).mapping
        dp = p.gpus // (p.tp * p.pp * p.cp)
        if p.release.startswith("MLM"):
            fp8 = p.precision == "fp8"
            assert (m.optimizer_moments, m.optimizer_master) == (("bf16" if fp8 else "fp32"), "fp32"), row.label
            assert not m.overlap_param_gather_with_optimizer_step, row.label
            continue
        with_step = dp > 1 and p.pp > 1 and p.vp > 1
        assert m.overlap_param_gather_with_optimizer_step == with_step, row.label
        assert m.optimizer_moments == "fp32", row.label
        assert m.optimizer_master == ("remainders" if p.precision == "bf16" else "fp32"), row.label
        seen.add((with_step, p.precision))
    # the rule is exercised both ways, and the bf16 override on a row without the gather overlap (gpt-oss: pp 4, vp 1)
    assert {(True, "fp8"), (False, "fp8"), (False, "bf16")} <= seen


def test_data_parallel_overlaps_follow_each_recipe():
    """Megatron-Bridge sets overlap_grad_reduce and overlap_param_gather with the distributed optimizer
    (CommOverlapConfig), as do Megatron-LM's Qwen3-30B YAMLs; its Qwen3-235B YAML runs the distributed optimizer
    with neither, so that row reduces and gathers after the step, and its exposed dp time is larger than the same
    project with both overlaps on."""
    seen_off = False
    for row in rows():
        m = project_for(row).mapping
        mlm_235b = row.pub.release.startswith("MLM#") and row.pub.model == "qwen3-235b-a22b"
        assert m.overlap_grad_reduce is not mlm_235b and m.overlap_param_gather is not mlm_235b, row.label
        if mlm_235b:
            seen_off = True
            from tilewright.engine.simulate import simulate

            off = project_for(row)
            on = off.model_copy(update={"mapping": off.mapping.model_copy(
                update={"overlap_grad_reduce": True, "overlap_param_gather": True})})
            t_off, t_on = simulate(off).time_breakdown_s, simulate(on).time_breakdown_s
            assert t_off["dp_comm"] > t_on["dp_comm"], row.label
    assert seen_off


def test_the_summary_also_leaves_out_the_runs_of_a_reported_regression():
    """Rows whose release's maintainers reported a regression of that very run (the dropless Qwen3-30B rows:
    Megatron-Bridge #1998) count in every group but the two that leave them out."""
    from types import SimpleNamespace

    from nemo_h100_run import CLEAN, CLEAN_MOE, summary

    flagged = [r for r in rows() if r.pub.regression]
    assert {r.pub.model for r in flagged} == {"qwen3-30b-a3b"} and all(not r.pub.token_drop for r in flagged)
    outcomes = [SimpleNamespace(row=SimpleNamespace(moe=moe, pub=SimpleNamespace(precision="fp8", regression=reg)),
                                error=err)
                for moe, reg, err in ((True, "issue", 1.0), (True, "", 0.2), (False, "", -0.1))]
    s = summary(outcomes)  # type: ignore[arg-type]
    assert s["all"] == pytest.approx(1.3 / 3) and s["moe"] == pytest.approx(0.6)
    assert s[CLEAN] == pytest.approx(0.15) and s[CLEAN_MOE] == pytest.approx(0.2)
