"""The workload panel's Model rows name what the mapping editors split: a mixture of experts' routed and shared
experts (the ep editor must divide the routed ones), multi-head latent attention's ranks and an explicit head
width. Before, a Mixtral or DeepSeek-V3 project showed the dense dims alone, so the ep beside them had nothing
to be read against."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from tilewright.engine.ir import GPTSpec  # noqa: E402
from tilewright.engine.ir.workload import LlamaSpec, MLASpec, MoESpec  # noqa: E402
from tilewright.studio.ui.workload_panel import workload_rows  # noqa: E402

DENSE = LlamaSpec(name="m", layers=8, hidden=1024, heads=16, kv_heads=4, ffn=4096, seq_len=512, vocab=1000)


def labels(spec: object) -> list[str]:
    return [label for label, _ in workload_rows(spec)]


def test_a_dense_model_shows_no_expert_latent_or_head_width_rows():
    assert not {"experts", "latent attention", "head width"} & set(labels(DENSE))
    assert not {"experts", "latent attention", "head width"} & set(
        labels(GPTSpec(name="g", layers=2, hidden=256, heads=4, seq_len=128, vocab=100)))


def test_the_experts_row_names_routed_top_k_width_and_shared_experts_after_the_ffn():
    moe = MoESpec(experts=64, top_k=6, expert_ffn=1408, shared_experts=2, first_dense_layers=1)
    rows = workload_rows(DENSE.model_copy(update={"moe": moe}))
    names = [label for label, _ in rows]
    assert names.index("experts") == names.index("FFN width") + 1
    text = dict(rows)["experts"]
    for part in (f"{moe.experts} routed", f"top-{moe.top_k}", f"FFN {moe.expert_ffn}", f"{moe.shared_experts} shared",
                 f"first {moe.first_dense_layers} blocks dense"):
        assert part in text
    assert "capacity" not in text  # dropless: no capacity to name


def test_the_experts_row_names_a_capacity_factor_when_tokens_are_padded():
    moe = MoESpec(experts=8, top_k=2, expert_ffn=512, capacity_factor=1.25)
    text = dict(workload_rows(DENSE.model_copy(update={"moe": moe})))["experts"]
    assert "capacity × 1.25" in text and "shared" not in text and "dense" not in text


def test_latent_attention_and_an_explicit_head_width_are_shown():
    mla = MLASpec(q_lora_rank=None, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    text = dict(workload_rows(DENSE.model_copy(update={"mla": mla, "kv_heads": None})))["latent attention"]
    assert f"KV rank {mla.kv_lora_rank}" in text and "Q rank none" in text
    assert f"{mla.qk_nope_head_dim} + {mla.qk_rope_head_dim}" in text and f"value {mla.v_head_dim}" in text
    wide = DENSE.model_copy(update={"head_dim": 2 * DENSE.hidden // DENSE.heads})
    assert dict(workload_rows(wide))["head width"] == str(wide.head_dim)


def test_the_block_row_says_how_a_decoder_block_is_built_and_the_window_where_it_applies():
    """Biases, a parallel block, the norms and an attention window change parameters, FLOPs or memory: the panel
    names them (a GPT's defaults too: every projection biased), and the window only where the spec has one."""
    gpt = dict(workload_rows(GPTSpec(name="g", layers=2, hidden=256, heads=4, seq_len=128, vocab=100)))
    assert gpt["block"] == "gelu MLP, layernorm, biases on QKV, attention output, MLP"
    assert "attention window" not in gpt
    falcon = GPTSpec(name="f", layers=2, hidden=256, heads=4, seq_len=128, vocab=100, qkv_bias=False, out_bias=False,
                     mlp_bias=False, parallel_block=True, parallel_norms=2)
    assert "no biases" in dict(workload_rows(falcon))["block"]
    assert "attention and MLP in parallel (2 norms)" in dict(workload_rows(falcon))["block"]
    gemma = DENSE.model_copy(update={"sliding_window": 4096, "sliding_window_layers": "even", "sandwich_norm": True})
    rows = dict(workload_rows(gemma))
    assert rows["attention window"] == "4096 tokens on even blocks, the others global"
    assert "sandwich norms" in rows["block"]
    names = labels(gemma)
    assert names.index("block") == names.index("FFN width") + 1
