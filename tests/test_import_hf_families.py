"""Hugging Face import of Qwen2-MoE, Qwen3, Qwen3-MoE, gpt-oss and Gemma 3: parameters equal the reference
implementations'.

Each config below is the published config.json (the keys that shape the model, copied from the Hub page
cited beside it). Each expected count is computed here from the layer shapes the ``transformers`` modelling
code builds (Qwen2MoeSparseMoeBlock, Qwen3Attention, Qwen3MoeSparseMoeBlock, GptOssAttention/GptOssExperts/
GptOssTopKRouter, Gemma3Attention/Gemma3DecoderLayer ``__init__``), then compared with the model card's figure
to the digits the card quotes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tilewright.engine.cli import main
from tilewright.engine.ir import LlamaSpec
from tilewright.engine.ir.ops import MoERole, OpKind, TensorSplit
from tilewright.engine.workloads import ConfigError, build_workload, import_hf_config

# huggingface.co/Qwen/Qwen3-8B/blob/main/config.json. Model card: "Number of Parameters: 8.2B", "Number of
# Parameters (Non-Embedding): 6.95B".
QWEN3_8B = {
    "_name_or_path": "Qwen/Qwen3-8B", "architectures": ["Qwen3ForCausalLM"], "attention_bias": False,
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 12288,
    "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3", "num_attention_heads": 32,
    "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "sliding_window": None,
    "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936,
}
# huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json. Model card: 30.5B total, 3.3B activated.
QWEN3_30B_A3B = {
    "_name_or_path": "Qwen/Qwen3-30B-A3B", "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False,
    "decoder_sparse_step": 1, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
    "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32,
    "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "sliding_window": None, "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936,
}
# huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json. Model card: 235B total, 22B activated.
QWEN3_235B_A22B = QWEN3_30B_A3B | {
    "_name_or_path": "Qwen/Qwen3-235B-A22B", "hidden_size": 4096, "intermediate_size": 12288,
    "max_window_layers": 94, "moe_intermediate_size": 1536, "num_attention_heads": 64, "num_hidden_layers": 94,
}
# huggingface.co/openai/gpt-oss-120b/blob/main/config.json. Model card (arXiv 2508.10925, Table 1): 116.83B
# total, 5.13B active per token (the card leaves the input embedding out of the active count).
GPT_OSS_120B = {
    "_name_or_path": "openai/gpt-oss-120b", "architectures": ["GptOssForCausalLM"], "attention_bias": True,
    "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
    "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention"] * 18,
    "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
    "num_experts_per_tok": 4, "num_hidden_layers": 36, "num_key_value_heads": 8, "num_local_experts": 128,
    "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": False, "vocab_size": 201088,
}
# huggingface.co/openai/gpt-oss-20b/blob/main/config.json. Model card: 20.91B total, 3.61B active.
GPT_OSS_20B = GPT_OSS_120B | {
    "_name_or_path": "openai/gpt-oss-20b", "layer_types": ["sliding_attention", "full_attention"] * 12,
    "num_hidden_layers": 24, "num_local_experts": 32,
}
# huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json. Model card: "14.3B parameters in total and 2.7B
# activated parameters during runtime".
QWEN15_MOE_A27B = {
    "_name_or_path": "Qwen/Qwen1.5-MoE-A2.7B", "architectures": ["Qwen2MoeForCausalLM"], "decoder_sparse_step": 1,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5632, "max_position_embeddings": 8192,
    "max_window_layers": 21, "model_type": "qwen2_moe", "moe_intermediate_size": 1408, "norm_topk_prob": False,
    "num_attention_heads": 16, "num_experts": 60, "num_experts_per_tok": 4, "num_hidden_layers": 24,
    "num_key_value_heads": 16, "shared_expert_intermediate_size": 5632, "tie_word_embeddings": False,
    "use_sliding_window": False, "vocab_size": 151936,
}

# huggingface.co/google/gemma-3-1b-pt/blob/main/config.json. Gemma 3 report (arXiv 2503.19786, Table 1): 1B has
# 302M embedding and 698M non-embedding parameters, no vision encoder.
GEMMA3_1B = {
    "_name_or_path": "google/gemma-3-1b-pt", "architectures": ["Gemma3ForCausalLM"], "attention_bias": False,
    "attn_logit_softcapping": None, "final_logit_softcapping": None, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "intermediate_size": 6912,
    "max_position_embeddings": 32768, "model_type": "gemma3_text", "num_attention_heads": 4,
    "num_hidden_layers": 26, "num_key_value_heads": 1, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    "sliding_window": 512, "sliding_window_pattern": 6, "vocab_size": 262144,
}


def linear(fan_in: int, fan_out: int, bias: bool = False) -> int:
    return fan_in * fan_out + (fan_out if bias else 0)


def attention(c: dict, q_bias: bool = False, o_bias: bool = False) -> int:
    """q, k, v, o projections (LlamaAttention and its descendants) at the config's head_dim."""
    h, a, kv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim") or h // a
    return linear(h, a * d, q_bias) + 2 * linear(h, kv * d, q_bias) + linear(a * d, h, o_bias)


def swiglu(h: int, f: int, bias: bool = False) -> int:
    """gate, up and down projections of one gated MLP (biases as GptOssExperts' gate_up and down)."""
    return 2 * linear(h, f, bias) + linear(f, h, bias)


def truncate(x: float, digits: int) -> float:
    return math.floor(x * 10**digits) / 10**digits


def embeddings(c: dict) -> int:
    return c["vocab_size"] * c["hidden_size"] * (1 if c["tie_word_embeddings"] else 2)


def qwen3_moe_params(c: dict) -> tuple[int, int]:
    """(total, activated) of Qwen3MoeForCausalLM: Qwen3Attention (+ q_norm, k_norm of head_dim), two RMSNorms,
    the router (gate: hidden → experts, no bias) and num_experts experts of moe_intermediate_size per block."""
    h, e, k, f = c["hidden_size"], c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
    common = attention(c) + 2 * c["head_dim"] + 2 * h + linear(h, e)
    total = c["num_hidden_layers"] * (common + e * swiglu(h, f)) + embeddings(c) + h
    active = c["num_hidden_layers"] * (common + k * swiglu(h, f)) + embeddings(c) + h
    return total, active


def gpt_oss_params(c: dict) -> tuple[int, int]:
    """(total, active) of GptOssForCausalLM: attention with biases and sinks (one per head), two RMSNorms, the
    router (weight and bias) and experts with biases per block; untied embedding and lm_head, final norm."""
    h, e, k, f = c["hidden_size"], c["num_local_experts"], c["num_experts_per_tok"], c["intermediate_size"]
    common = attention(c, q_bias=True, o_bias=True) + c["num_attention_heads"] + 2 * h + linear(h, e, True)
    total = c["num_hidden_layers"] * (common + e * swiglu(h, f, True)) + embeddings(c) + h
    active = c["num_hidden_layers"] * (common + k * swiglu(h, f, True)) + embeddings(c) + h
    return total, active


def test_qwen3_8b_qk_norm_counts_two_head_dims_per_block() -> None:
    c = QWEN3_8B
    h = c["hidden_size"]
    block = attention(c) + 2 * c["head_dim"] + swiglu(h, c["intermediate_size"]) + 2 * h
    expected = c["num_hidden_layers"] * block + embeddings(c) + h
    spec = import_hf_config(c)
    assert isinstance(spec, LlamaSpec) and spec.qk_norm and not spec.attention_sinks
    g = build_workload(spec)
    assert g.params == expected
    assert round(expected / 1e9, 1) == 8.2 and round((expected - embeddings(c)) / 1e9, 2) == 6.95
    # the norm acts on every query and key head after qkv, split by heads like attention
    s, a, kv, d = spec.seq_len, spec.heads, spec.kv_heads, c["head_dim"]
    norm = next(op for op in g.layer_ops(1) if op.name.endswith(".qk_norm"))
    assert norm.kind is OpKind.norm and norm.split is TensorSplit.heads and norm.params == 2 * d
    assert norm.in_elems == norm.out_elems == s * (a + kv) * d
    names = [op.name.split(".", 1)[1] for op in g.layer_ops(1)]
    assert names.index("qkv") < names.index("qk_norm") < names.index("attention")


def test_qk_norm_costs_work_and_stores_the_normed_heads() -> None:
    """Without the QK-norm the same model has 2·d fewer parameters per block and stores s·(a + kv)·d fewer
    activation elements per block; nothing else moves."""
    with_norm = build_workload(import_hf_config(QWEN3_8B))
    without = build_workload(import_hf_config(QWEN3_8B).model_copy(update={"qk_norm": False}))
    c = QWEN3_8B
    s, d = with_norm.dims.seq_len, c["head_dim"]
    per_block = s * (c["num_attention_heads"] + c["num_key_value_heads"]) * d
    assert with_norm.params - without.params == c["num_hidden_layers"] * 2 * d
    saved = sum(op.saved_elems for op in with_norm.ops()) - sum(op.saved_elems for op in without.ops())
    assert saved == c["num_hidden_layers"] * per_block
    assert with_norm.flops_per_sample == without.flops_per_sample  # a norm's FLOPs are not counted as matmul work


@pytest.mark.parametrize(("config", "total_b", "active_b", "digits"), [
    (QWEN3_30B_A3B, 30.5, 3.3, 1),
    (QWEN3_235B_A22B, 235, 22, 0),
])
def test_qwen3_moe_total_and_active(config: dict, total_b: float, active_b: float, digits: int) -> None:
    spec = import_hf_config(config)
    assert spec.qk_norm and spec.moe is not None and spec.moe.shared_ffn == 0 and not spec.moe.router_bias
    assert spec.head_dim == 128  # ≠ hidden / heads (64)
    g = build_workload(spec)
    total, active = qwen3_moe_params(config)
    assert g.params == total
    assert g.active_params == pytest.approx(active)
    # the Qwen3 cards truncate to the digits they quote: 30.53 B → "30.5B", 3.353 B → "3.3B", 22.19 B → "22B"
    assert truncate(total / 1e9, digits) == total_b and truncate(active / 1e9, digits) == active_b
    assert "norm_topk_prob" in spec.comment


@pytest.mark.parametrize(("config", "total_b", "active_b"), [(GPT_OSS_120B, 116.83, 5.13), (GPT_OSS_20B, 20.91, 3.61)])
def test_gpt_oss_sinks_biases_and_alternating_windows(config: dict, total_b: float, active_b: float) -> None:
    spec = import_hf_config(config)
    assert spec.attention_sinks and not spec.qk_norm
    assert (spec.qkv_bias, spec.out_bias, spec.mlp_bias, spec.moe.router_bias) == (True, True, True, True)
    g = build_workload(spec)
    total, active = gpt_oss_params(config)
    assert g.params == total
    assert g.active_params == pytest.approx(active)
    assert round(total / 1e9, 2) == total_b
    input_embedding = config["vocab_size"] * config["hidden_size"]
    assert round((active - input_embedding) / 1e9, 2) == active_b
    # layer_types: sliding on even blocks, full on odd ones (GptOssConfig's default pattern as well)
    assert [spec.window_of(i) for i in range(4)] == [128, None, 128, None]
    softmax = next(op for op in g.layer_ops(1) if op.name.endswith(".softmax"))
    assert softmax.params == config["num_attention_heads"] and softmax.split is TensorSplit.heads
    assert "sinks" in spec.comment


def test_qwen1_5_moe_shared_expert_with_its_sigmoid_gate() -> None:
    c = QWEN15_MOE_A27B
    h, e, k, f = c["hidden_size"], c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
    # Qwen2MoeAttention: q, k, v with bias (qkv_bias default true), o without; the sparse block: gate (router),
    # experts, shared_expert (a Qwen2MoeMLP of shared_expert_intermediate_size), shared_expert_gate (h → 1)
    common = (attention(c, q_bias=True) + 2 * h + linear(h, e) + swiglu(h, c["shared_expert_intermediate_size"])
              + linear(h, 1))
    total = c["num_hidden_layers"] * (common + e * swiglu(h, f)) + embeddings(c) + h
    active = c["num_hidden_layers"] * (common + k * swiglu(h, f)) + embeddings(c) + h
    spec = import_hf_config(c)
    assert spec.moe.shared_expert_gate and spec.moe.shared_ffn == c["shared_expert_intermediate_size"]
    g = build_workload(spec)
    assert g.params == total
    assert g.active_params == pytest.approx(active)
    assert round(total / 1e9, 1) == 14.3 and round(active / 1e9, 1) == 2.7
    gate = next(op for op in g.layer_ops(1) if op.name.endswith(".shared_expert_gate"))
    assert gate.params == h and gate.gemm == (spec.seq_len, 1, h) and gate.moe.role is MoERole.shared
    combine = next(op for op in g.layer_ops(1) if op.name.endswith(".combine"))
    assert gate.name in combine.inputs


def test_mlp_only_layers_prefix_becomes_dense_blocks() -> None:
    spec = import_hf_config(QWEN3_30B_A3B | {"mlp_only_layers": [1, 0]})
    assert spec.moe.first_dense_layers == 2
    g = build_workload(spec)
    dense = [li.index for li in g.layers if not any(op.moe for op in g.layer_ops(li.index))]
    assert dense[:3] == [0, 1, 2]  # the embedding, then blocks 0 and 1
    up = next(op for op in g.layer_ops(1) if op.name.endswith(".mlp_up"))
    assert up.params == QWEN3_30B_A3B["hidden_size"] * QWEN3_30B_A3B["intermediate_size"]


def test_architectures_find_the_new_families() -> None:
    for config, family in [(QWEN15_MOE_A27B, "qwen2_moe"), (QWEN3_8B, "qwen3"), (QWEN3_30B_A3B, "qwen3_moe"),
                           (GPT_OSS_20B, "gpt_oss"), (GEMMA3_1B, "gemma3_text")]:
        spec = import_hf_config({k: v for k, v in config.items() if k != "model_type"})
        assert f"{family} config" in spec.comment


@pytest.mark.parametrize(("config", "key"), [
    (QWEN3_30B_A3B | {"decoder_sparse_step": 2}, "decoder_sparse_step"),
    (QWEN15_MOE_A27B | {"mlp_only_layers": [0, 3]}, "mlp_only_layers"),
    (QWEN3_8B | {"use_sliding_window": True, "sliding_window": 4096}, "use_sliding_window"),
    (GPT_OSS_20B | {"layer_types": ["full_attention", "sliding_attention"] * 12}, "layer_types"),
    (GPT_OSS_20B | {"layer_types": ["sliding_attention"] * 3}, "layer_types"),
    (GEMMA3_1B | {"layer_types": ["sliding_attention"] * 5 + ["full_attention"] * 21}, "layer_types"),
    ({k: v for k, v in QWEN3_30B_A3B.items() if k != "moe_intermediate_size"}, "moe_intermediate_size"),
])
def test_unexpressible_settings_exit_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: dict, key: str
) -> None:
    with pytest.raises(ConfigError) as info:
        import_hf_config(config)
    assert info.value.field == key
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    out = tmp_path / "project.json"
    assert main(["import-hf", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err and not out.exists()


def test_new_fields_stay_out_of_old_files() -> None:
    """A spec without QK-norm, sinks or a shared-expert gate dumps exactly as before these fields existed."""
    spec = import_hf_config(QWEN3_30B_A3B).model_copy(update={"qk_norm": False})
    dumped = spec.model_dump(mode="json")
    assert "qk_norm" not in dumped and "attention_sinks" not in dumped
    assert "shared_expert_gate" not in dumped["moe"]
    kept = import_hf_config(QWEN15_MOE_A27B).model_dump(mode="json")
    assert kept["moe"]["shared_expert_gate"] is True
    assert LlamaSpec.model_validate(import_hf_config(GPT_OSS_20B).model_dump(mode="json")).attention_sinks


def test_spec_refuses_a_gate_without_shared_experts_and_qk_norm_with_mla() -> None:
    with pytest.raises(ValueError, match="shared_expert_gate"):
        LlamaSpec(layers=1, hidden=64, heads=4, moe={"experts": 4, "top_k": 1, "expert_ffn": 32,
                                                     "shared_expert_gate": True})
    with pytest.raises(ValueError, match="qk_norm"):
        LlamaSpec(layers=1, hidden=64, heads=4, qk_norm=True, mla={"kv_lora_rank": 16, "qk_nope_head_dim": 16,
                                                                    "qk_rope_head_dim": 8, "v_head_dim": 16})


def test_gemma3_1b_qk_norm_sandwich_norms_and_five_local_to_one_global() -> None:
    c = GEMMA3_1B
    h = c["hidden_size"]
    # Gemma3DecoderLayer: attention (+ q_norm, k_norm of head_dim), GeGLU MLP, four RMSNorms; tied embedding
    block = attention(c) + 2 * c["head_dim"] + swiglu(h, c["intermediate_size"]) + 4 * h
    non_embedding = c["num_hidden_layers"] * block + h
    embedding = c["vocab_size"] * h
    spec = import_hf_config(c)
    assert spec.qk_norm and spec.sandwich_norm and spec.tie_embeddings and spec.activation == "geglu"
    assert build_workload(spec).params == non_embedding + embedding
    assert round(embedding / 1e6) == 302 and round(non_embedding / 1e6) == 698
    # sliding unless (i + 1) % 6 == 0 (Gemma3TextConfig.layer_types): blocks 5, 11, 17, 23 global
    windows = [spec.window_of(i) for i in range(c["num_hidden_layers"])]
    assert [i for i, w in enumerate(windows) if w is None] == [5, 11, 17, 23]
    assert all(w == 512 for w in windows if w is not None)
    explicit = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(26)]
    assert import_hf_config(c | {"layer_types": explicit}).sliding_window_layers == 6


def test_gemma3_with_its_vision_tower_is_refused() -> None:
    multimodal = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                  "text_config": GEMMA3_1B, "vision_config": {"model_type": "siglip_vision_model"}}
    for config in (multimodal, {k: v for k, v in multimodal.items() if k != "model_type"}):
        with pytest.raises(ConfigError) as info:
            import_hf_config(config)
        assert info.value.field == "vision_config" and "text_config" in info.value.reason


def test_a_task_head_checkpoint_says_its_head_is_built_as_the_language_model_head() -> None:
    """A ``…ForSequenceClassification`` config imports the backbone with the LM head (vocab × hidden), not its
    few-label head: the spec says so rather than pass the head's parameters off as the checkpoint's."""
    plain = import_hf_config(QWEN3_8B)
    scored = import_hf_config(QWEN3_8B | {"architectures": ["Qwen3ForSequenceClassification"]})
    assert "task head" not in plain.comment
    assert "Qwen3ForSequenceClassification: its task head is built as the language-model head" in scored.comment
    assert build_workload(scored).params == build_workload(plain).params  # the same model, the note aside
