"""Hugging Face import of today's families: parameter counts equal the reference implementations'.

Each expected count is computed here from the layer shapes the ``transformers`` modelling code builds (the
``__init__`` of each family's attention, MLP and decoder layer), from the config's own values; the configs in
tests/data/hf/ are the public config.json files, each citing its source in ``_source``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tilewright.engine.ir import LlamaSpec
from tilewright.engine.ir.ops import MoERole
from tilewright.engine.workloads import ConfigError, build_workload, import_hf_config

HF = Path(__file__).parent / "data" / "hf"


def load(name: str) -> dict:
    return json.loads((HF / name / "config.json").read_text())


def linear(fan_in: int, fan_out: int, bias: bool = False) -> int:
    return fan_in * fan_out + (fan_out if bias else 0)


def gqa_attention(c: dict, q_bias: bool = False, o_bias: bool = False) -> int:
    """q, k, v, o projections of LlamaAttention and its descendants."""
    h, a = c["hidden_size"], c["num_attention_heads"]
    d = c.get("head_dim") or h // a
    kv = c.get("num_key_value_heads", a)
    return linear(h, a * d, q_bias) + 2 * linear(h, kv * d, q_bias) + linear(a * d, h, o_bias)


def gated_mlp(h: int, ffn: int) -> int:
    return 3 * h * ffn


def embeddings(c: dict, tied: bool) -> int:
    return c["vocab_size"] * c["hidden_size"] * (1 if tied else 2)


def test_mixtral_8x7b_is_moe_with_46_7_b_parameters() -> None:
    c = load("mixtral-8x7b")
    h, e = c["hidden_size"], c["num_local_experts"]
    layer = gqa_attention(c) + e * gated_mlp(h, c["intermediate_size"]) + e * h + 2 * h  # experts, gate, 2 norms
    expected = c["num_hidden_layers"] * layer + embeddings(c, tied=False) + h
    spec = import_hf_config(HF / "mixtral-8x7b")
    g = build_workload(spec)
    assert g.params == expected
    assert round(expected / 1e9, 2) == 46.70  # Jiang et al. 2024: 46.7 B
    active = expected - c["num_hidden_layers"] * (e - c["num_experts_per_tok"]) * gated_mlp(h, c["intermediate_size"])
    assert g.active_params == pytest.approx(active)
    assert round(active / 1e9, 1) == 12.9  # "13 B active parameters"


def test_mixtral_labelled_mistral_still_imports_as_moe() -> None:
    c = load("mixtral-8x7b") | {"model_type": "mistral"}
    spec = import_hf_config(c)
    assert spec.moe is not None and spec.moe.experts == 8 and spec.moe.top_k == 2
    assert build_workload(spec).params == build_workload(import_hf_config(load("mixtral-8x7b"))).params


@pytest.mark.parametrize(
    ("model_type", "key"),
    [("qwen2", "num_experts"), ("gemma", "num_local_experts"), ("phi3", "n_routed_experts"), ("gpt2", "num_experts")],
)
def test_moe_keys_in_a_dense_family_are_refused_never_dropped(model_type: str, key: str) -> None:
    c = load("qwen2.5-7b") | {"model_type": model_type, key: 64, "n_embd": 8, "n_layer": 1, "n_head": 1}
    with pytest.raises(ConfigError) as info:
        import_hf_config(c)
    assert info.value.field == key and "dense" in info.value.reason


def test_qwen2_5_7b_has_qkv_biases() -> None:
    c = load("qwen2.5-7b")
    h = c["hidden_size"]
    layer = gqa_attention(c, q_bias=True) + gated_mlp(h, c["intermediate_size"]) + 2 * h
    expected = c["num_hidden_layers"] * layer + embeddings(c, tied=False) + h
    spec = import_hf_config(HF / "qwen2.5-7b")
    assert (spec.qkv_bias, spec.out_bias, spec.mlp_bias) == (True, False, False)
    assert build_workload(spec).params == expected
    assert round(expected / 1e9, 2) == 7.62


def test_gemma_7b_head_dim_256_geglu_tied() -> None:
    c = load("gemma-7b")
    h = c["hidden_size"]
    assert c["head_dim"] * c["num_attention_heads"] != h  # the case the old importer refused
    layer = gqa_attention(c) + gated_mlp(h, c["intermediate_size"]) + 2 * h
    expected = c["num_hidden_layers"] * layer + embeddings(c, tied=True) + h
    spec = import_hf_config(HF / "gemma-7b")
    assert spec.activation == "geglu" and spec.tie_embeddings and spec.head_dim == 256
    assert build_workload(spec).params == expected
    assert expected - embeddings(c, tied=True) == 7_751_248_896  # Gemma report, Table 2


def test_gemma_2_9b_sandwich_norms_and_alternating_windows() -> None:
    c = load("gemma-2-9b")
    h = c["hidden_size"]
    layer = gqa_attention(c) + gated_mlp(h, c["intermediate_size"]) + 4 * h  # four RMSNorms per block
    expected = c["num_hidden_layers"] * layer + embeddings(c, tied=True) + h
    spec = import_hf_config(HF / "gemma-2-9b")
    g = build_workload(spec)
    assert g.params == expected
    assert round(expected / 1e9, 2) == 9.24
    assert expected - embeddings(c, tied=True) == 8_324_201_984  # Gemma 2 report, Table 2
    assert "soft-capping" in spec.comment
    # even blocks attend within the 4096-token window, odd ones globally (Gemma2Attention.is_sliding)
    assert [spec.window_of(i) for i in range(4)] == [4096, None, 4096, None]


def test_phi_3_mini_fused_projections() -> None:
    c = load("phi-3-mini-4k")
    h, f = c["hidden_size"], c["intermediate_size"]
    layer = linear(h, 3 * h) + linear(h, h) + linear(h, 2 * f) + linear(f, h) + 2 * h  # qkv_proj, o, gate_up, down
    expected = c["num_hidden_layers"] * layer + embeddings(c, tied=False) + h
    spec = import_hf_config(HF / "phi-3-mini-4k")
    assert build_workload(spec).params == expected
    assert round(expected / 1e9, 2) == 3.82
    assert "fused" in spec.comment


def falcon_params(c: dict) -> int:
    """FalconModel: fused query_key_value, dense, 4h MLP, LayerNorms (weight + bias), tied lm_head."""
    h, a = c["hidden_size"], c["num_attention_heads"]
    d = h // a
    if c.get("new_decoder_architecture"):
        kv, norms = c["num_kv_heads"], 2
    else:
        kv, norms = (1 if c.get("multi_query") else a), 1
    bias = c.get("bias", False)
    layer = (
        linear(h, (a + 2 * kv) * d, bias)
        + linear(h, h, bias)
        + linear(h, 4 * h, bias)
        + linear(4 * h, h, bias)
        + norms * 2 * h
    )
    return c["num_hidden_layers"] * layer + embeddings(c, tied=True) + 2 * h


@pytest.mark.parametrize(("name", "billions"), [("falcon-7b", 6.92), ("falcon-40b", 41.30)])
def test_falcon_parallel_block_and_multi_query(name: str, billions: float) -> None:
    c = load(name)
    spec = import_hf_config(HF / name)
    assert spec.parallel_block and spec.norm == "layernorm" and spec.activation == "gelu"
    assert spec.kv_heads == (c.get("num_kv_heads") or 1)
    g = build_workload(spec)
    assert g.params == falcon_params(c)
    assert round(g.params / 1e9, 2) == billions
    block = [op for op in g.layer_ops(1)]
    residual = next(op for op in block if op.name.endswith(".residual"))
    assert len(residual.inputs) == 3  # attention + MLP + skip in one add
    qkv = next(op for op in block if op.name.endswith(".qkv"))
    mlp_up = next(op for op in block if op.name.endswith(".mlp_up"))
    assert mlp_up.inputs == qkv.inputs if name == "falcon-7b" else mlp_up.inputs != qkv.inputs


def deepseek_v3_params(c: dict) -> tuple[int, int]:
    """(total, activated) of DeepseekV3ForCausalLM without the MTP module, from its modelling code."""
    h, a, layers = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    attention = (
        h * c["q_lora_rank"]
        + c["q_lora_rank"]
        + c["q_lora_rank"] * a * qk  # q_a, q_a_layernorm, q_b
        + h * (c["kv_lora_rank"] + c["qk_rope_head_dim"])
        + c["kv_lora_rank"]  # kv_a_proj_with_mqa, norm
        + c["kv_lora_rank"] * a * (c["qk_nope_head_dim"] + c["v_head_dim"])  # kv_b_proj
        + a * c["v_head_dim"] * h
    )  # o_proj
    e, k, f = c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
    dense_layers = c["first_k_dense_replace"]
    moe_layers = layers - dense_layers
    router = e * h + e  # gate weight and e_score_correction_bias (noaux_tc)
    shared = gated_mlp(h, f * c["n_shared_experts"])
    common = (
        layers * (attention + 2 * h)
        + dense_layers * gated_mlp(h, c["intermediate_size"])
        + embeddings(c, tied=False)
        + h
    )
    total = common + moe_layers * (e * gated_mlp(h, f) + shared + router)
    active = common + moe_layers * (k * gated_mlp(h, f) + shared + router)
    return total, active


def test_deepseek_v3_mla_and_moe() -> None:
    c = load("deepseek-v3")
    spec = import_hf_config(HF / "deepseek-v3")
    assert isinstance(spec, LlamaSpec) and spec.mla is not None and spec.moe is not None
    assert (spec.layers, spec.moe.experts, spec.moe.shared_experts, spec.moe.top_k) == (61, 256, 1, 8)
    assert spec.moe.first_dense_layers == 3 and spec.moe.router_bias
    g = build_workload(spec)
    total, active = deepseek_v3_params(c)
    assert g.params == total
    assert g.active_params == pytest.approx(active)
    assert round(total / 1e9) == 671 and round(active / 1e9) in (37, 38)  # "671B total, 37B activated"
    moe_blocks = [li.index for li in g.layers if any(op.moe is not None for op in g.layer_ops(li.index))]
    assert len(moe_blocks) == 58 and moe_blocks[0] == 4  # layer 0 is the embedding; blocks 0-2 are dense
    assert "multi-token-prediction" in spec.comment


def test_attention_and_mlp_bias_are_honoured() -> None:
    c = load("llama-2-7b")
    plain = build_workload(import_hf_config(c)).params
    h, f, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    biased = import_hf_config(c | {"attention_bias": True, "mlp_bias": True})
    assert build_workload(biased).params == plain + layers * (4 * h + 2 * f + h)  # q, k, v, o; gate, up; down


def test_t5_is_refused_as_encoder_decoder() -> None:
    with pytest.raises(ConfigError) as info:
        import_hf_config(HF / "t5-small")
    assert info.value.field == "is_encoder_decoder" and "encoder-decoder" in info.value.reason


def test_expert_ops_count_top_k_flops_and_every_experts_weights() -> None:
    spec = import_hf_config(HF / "mixtral-8x7b", seq_len=512)
    g = build_workload(spec)
    s, h, f = 512, spec.hidden, spec.moe.expert_ffn
    up = next(op for op in g.ops() if op.name == "block0.experts_up")
    assert up.flops == 2.0 * s * spec.moe.top_k * h * f  # each token through 2 of 8 experts
    assert up.params == spec.moe.experts * h * f
    assert up.moe is not None and up.moe.role is MoERole.expert
    assert up.moe.dispatch_elems_per_token == spec.moe.top_k * h
    assert up.moe.expert_rows == s * spec.moe.top_k / spec.moe.experts
    down = next(op for op in g.ops() if op.name == "block0.experts_down")
    assert down.moe.combine_elems_per_token == spec.moe.top_k * h and down.moe.dispatch_elems_per_token == 0
    router = next(op for op in g.ops() if op.name == "block0.router")
    assert router.flops == 2.0 * s * spec.moe.experts * h and router.moe.role is MoERole.router
