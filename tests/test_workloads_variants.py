"""Transformer block variants (head_dim, GQA/MQA, biases, parallel blocks, sliding windows, MLA, MoE): each
op's FLOPs, weights and activations derived here from the shapes, independently of the builders."""

from __future__ import annotations

import pytest
from tilewright.engine.cli.dispatch import build_parser
from tilewright.engine.cli.run import model_data
from tilewright.engine.errors import InputError
from tilewright.engine.ir import GPTSpec, LlamaSpec
from tilewright.engine.ir.ops import MoERole
from tilewright.engine.workloads import build_workload
from tilewright.engine.workloads.transformer_inference import (
    attention_pairs,
    inference_graph,
    kv_cache_bytes,
    touched_experts,
)

L, H, A, S, V = 2, 256, 8, 128, 1000


def gpt(**fields: object) -> GPTSpec:
    return GPTSpec(layers=L, hidden=H, heads=A, seq_len=S, vocab=V, **fields)


def op(spec, name: str):
    return next(o for o in build_workload(spec).ops() if o.name == name)


def test_defaults_add_nothing_to_a_saved_file() -> None:
    """Old project files save back byte for byte: the new fields are left out while at their default."""
    assert set(gpt().model_dump(mode="json")) == {
        "kind",
        "name",
        "comment",
        "layers",
        "hidden",
        "heads",
        "ffn",
        "seq_len",
        "vocab",
    }
    llama = LlamaSpec(layers=L, hidden=H, heads=A).model_dump(mode="json")
    assert "kv_heads" in llama and "moe" not in llama and "activation" not in llama


@pytest.mark.parametrize(("kv", "d"), [(A, 64), (2, 32), (1, 48)])
def test_head_dim_and_kv_heads_shape_qkv_attention_and_out_proj(kv: int, d: int) -> None:
    spec = gpt(kv_heads=kv, head_dim=d)
    qkv_width = A * d + 2 * kv * d
    assert op(spec, "block0.qkv").params == H * qkv_width + qkv_width
    assert op(spec, "block0.qkv").gemm == (S, qkv_width, H)
    assert op(spec, "block0.attention").flops == 2 * (2.0 * S * S * A * d)  # QKᵀ and AV, every head
    assert op(spec, "block0.out_proj").params == A * d * H + H
    # the KV cache holds kv heads of width d: 2 · layers · kv · d · tokens · sequences · bytes
    assert kv_cache_bytes(spec, L, 1, 3, 100, 2.0) == 2 * L * kv * d * 100 * 3 * 2.0


def test_bias_flags_remove_exactly_the_bias_vectors() -> None:
    ffn = 4 * H
    full = build_workload(gpt()).params
    assert build_workload(gpt(qkv_bias=False, out_bias=False, mlp_bias=False)).params == full - L * (
        3 * H + H + ffn + H
    )
    assert build_workload(gpt(out_bias=False, mlp_bias=False)).params == full - L * (H + ffn + H)


def test_untied_gpt_logits_have_their_own_matrix() -> None:
    assert build_workload(gpt(tie_embeddings=False)).params == build_workload(gpt()).params + V * H


@pytest.mark.parametrize("norms", [1, 2])
def test_parallel_block_one_residual_add_and_shared_input(norms: int) -> None:
    seq, par = build_workload(gpt()), build_workload(gpt(parallel_block=True, parallel_norms=norms))
    # sequential blocks have two norms; a parallel block one or two: same projections, same FLOPs
    assert par.params == seq.params - L * (2 - norms) * 2 * H
    assert par.flops_per_sample == seq.flops_per_sample
    block = {o.name.split(".", 1)[1]: o for o in par.layer_ops(1)}
    assert "residual1" not in block and len(block["residual"].inputs) == 3
    assert block["residual"].in_elems == 3 * S * H
    mlp_in = "norm_mlp" if norms == 2 else "norm1"
    assert block["mlp_up"].inputs == [f"block0.{mlp_in}"] and block["qkv"].inputs == ["block0.norm1"]


def test_sliding_window_limits_attention_pairs() -> None:
    w = 32
    spec = gpt(sliding_window=w, sliding_window_layers="even")
    assert op(spec, "block0.attention").flops == 4.0 * S * w * H  # local: s · w pairs
    assert op(spec, "block1.attention").flops == 4.0 * S * S * H  # odd blocks stay global
    assert op(spec, "block0.softmax").in_elems == A * S * w
    for t, c in ((1, 100), (5, 40), (40, 40), (7, 8)):
        brute = sum(min(p + 1, w) for p in range(c - t, c))  # query at position p sees min(p + 1, w) keys
        assert attention_pairs(t, c, causal=True, window=w) == brute
    decode = inference_graph(spec, 1, 100, 1, fused=True)
    flops = {o.name: o.flops for o in decode.ops() if o.name.endswith("attention")}
    assert flops["block0.attention"] == 4.0 * H * w and flops["block1.attention"] == 4.0 * H * 100


MOE = {"experts": 8, "top_k": 2, "expert_ffn": 128}


@pytest.mark.parametrize("capacity", [None, 1.25])
def test_moe_experts_count_top_k_tokens_and_every_experts_weights(capacity: float | None) -> None:
    spec = gpt(moe=MOE | {"capacity_factor": capacity})
    e, k, f = MOE["experts"], MOE["top_k"], MOE["expert_ffn"]
    slots = S * k * (capacity or 1.0)  # token-slots the experts process
    up, down = op(spec, "block0.experts_up"), op(spec, "block0.experts_down")
    assert up.flops == 2.0 * slots * H * f and down.flops == 2.0 * slots * f * H
    assert up.params == e * (H * f + f) and down.params == e * (f * H + H)  # GPT's MLP has biases
    assert up.moe.role is MoERole.expert and up.moe.tokens_fraction == pytest.approx(k * (capacity or 1.0) / e)
    # all-to-all: each token's h-vector goes to each of its k expert slots, and comes back
    assert up.moe.dispatch_elems_per_token == pytest.approx(k * (capacity or 1.0) * H)
    assert down.moe.combine_elems_per_token == up.moe.dispatch_elems_per_token
    assert up.moe.combine_elems_per_token == 0 and down.moe.dispatch_elems_per_token == 0
    router = op(spec, "block0.router")
    assert router.params == e * H and router.flops == 2.0 * S * e * H
    g = build_workload(spec)
    dense_mlp = 2 * H * 4 * H + 4 * H + H
    moe_mlp = e * (2 * H * f + f + H) + e * H
    assert g.params == build_workload(gpt()).params + L * (moe_mlp - dense_mlp)
    assert g.active_params == pytest.approx(g.params - L * (e - k) * (2 * H * f + f + H))


def test_moe_layer_pattern_and_shared_experts() -> None:
    moe = MOE | {"shared_experts": 2, "first_dense_layers": 1, "layer_freq": 2}
    spec = gpt(moe=moe).model_copy(update={"layers": 6})
    g = build_workload(spec)
    moe_blocks = [i for i in range(6) if any(o.moe is not None for o in g.layer_ops(i + 1))]  # layer 0: embedding
    assert moe_blocks == [2, 4]  # i ≥ first_dense_layers and i % layer_freq == 0
    shared_up = next(o for o in g.layer_ops(3) if o.name.endswith("shared_up"))
    assert shared_up.params == H * 2 * MOE["expert_ffn"] + 2 * MOE["expert_ffn"]  # one MLP of 2 experts' width
    assert shared_up.flops == 2.0 * S * H * 2 * MOE["expert_ffn"] and shared_up.moe.role is MoERole.shared


def test_moe_inference_reads_only_the_touched_experts() -> None:
    spec = gpt(moe=MOE)
    up = op(spec, "block0.experts_up")
    decode = next(o for o in inference_graph(spec, 1, 64, 1, fused=True).ops() if o.name == "block0.experts_up")
    assert decode.params == pytest.approx(up.params * MOE["top_k"] / MOE["experts"])  # one token: its 2 experts
    assert decode.flops == 2.0 * MOE["top_k"] * H * MOE["expert_ffn"]
    prefill = next(o for o in inference_graph(spec, 64, 64, 4, fused=True).ops() if o.name == "block0.experts_up")
    assert prefill.params == pytest.approx(up.params, rel=1e-6)  # 256 tokens reach all 8 experts
    assert touched_experts(8, 2, 3) == pytest.approx(8 * (1 - (6 / 8) ** 3))


MLA = {"q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}


@pytest.mark.parametrize("q_lora", [64, None])
def test_mla_projections_attention_and_latent_cache(q_lora: int | None) -> None:
    m = MLA | {"q_lora_rank": q_lora}
    spec = LlamaSpec(layers=L, hidden=H, heads=A, seq_len=S, vocab=V, mla=m)
    qk, r, c = m["qk_nope_head_dim"] + m["qk_rope_head_dim"], m["kv_lora_rank"], m["qk_rope_head_dim"]
    block = {o.name.split(".", 1)[1]: o for o in build_workload(spec).layer_ops(1)}
    query = H * q_lora + q_lora + q_lora * A * qk if q_lora else H * A * qk  # q_down, q_norm, q_up / q_proj
    kv = H * (r + c) + r + r * A * (m["qk_nope_head_dim"] + m["v_head_dim"])  # kv_down, kv_norm, kv_up
    out = A * m["v_head_dim"] * H
    assert sum(o.params for o in block.values()) == query + kv + out + 2 * H + 3 * H * spec.ffn_dim
    assert block["attention"].flops == 2.0 * S * S * A * (qk + m["v_head_dim"])
    assert "qkv" not in block and block["kv_down"].split.value == "replicated"
    # the cache holds the latent and the rotary key, whole on every tensor-parallel device
    assert kv_cache_bytes(spec, L, 4, 2, 10, 2.0) == L * (r + c) * 10 * 2 * 2.0
    decode = inference_graph(spec, 1, 50, 1, fused=True)
    attn = next(o for o in decode.ops() if o.name == "block0.attention")
    assert attn.cache_elems == 49 * (r + c)


def test_spec_rejects_inconsistent_variants() -> None:
    with pytest.raises(ValueError, match="kv_heads"):
        gpt(kv_heads=3)
    with pytest.raises(ValueError, match="top_k"):
        gpt(moe={"experts": 2, "top_k": 3, "expert_ffn": 8})
    with pytest.raises(ValueError, match="mla"):
        LlamaSpec(layers=1, hidden=H, heads=A, mla=MLA, kv_heads=2)
    GPTSpec(layers=1, hidden=100, heads=3, head_dim=32)  # head_dim frees hidden from dividing by heads


def flags(*argv: str):
    return build_parser().parse_args(
        ["run", "--model", "gpt", "--layers", "2", "--hidden", "256", "--heads", "8", *argv]
    )


def test_model_gpt_flags() -> None:
    data = model_data(
        flags(
            "--kv-heads",
            "2",
            "--head-dim",
            "64",
            "--moe-experts",
            "8",
            "--moe-top-k",
            "2",
            "--parallel-block",
            "--bias",
            "qkv",
            "--ffn",
            "512",
        ),
        None,
    )
    spec = GPTSpec(**{k: v for k, v in data.items()})
    assert (spec.kv_heads, spec.head_dim, spec.parallel_block) == (2, 64, True)
    assert (spec.qkv_bias, spec.out_bias, spec.mlp_bias) == (True, False, False)
    assert spec.moe is not None and (spec.moe.experts, spec.moe.top_k, spec.moe.expert_ffn) == (8, 2, 512)
    assert model_data(flags(), None) == {"kind": "gpt", "name": "gpt", "layers": 2, "hidden": 256, "heads": 8}
    with pytest.raises(InputError, match="--moe-top-k"):
        model_data(flags("--moe-experts", "8"), None)


def test_moe_details_and_latent_attention_from_flags() -> None:
    data = model_data(
        flags("--moe-experts", "16", "--moe-top-k", "2", "--moe-expert-ffn", "128", "--moe-shared-experts", "2",
              "--moe-capacity-factor", "1.25", "--moe-first-dense", "1", "--mla", "64,0,32,16,32"),
        None,
    )
    spec = GPTSpec(**data)
    moe = spec.moe
    assert moe is not None
    assert (moe.experts, moe.top_k, moe.expert_ffn, moe.shared_experts) == (16, 2, 128, 2)
    assert (moe.capacity_factor, moe.first_dense_layers) == (1.25, 1)
    assert spec.mla is not None and spec.mla.q_lora_rank is None
    assert (spec.mla.kv_lora_rank, spec.mla.qk_nope_head_dim, spec.mla.qk_rope_head_dim) == (64, 32, 16)
    with pytest.raises(InputError, match="--moe-capacity-factor: needs a mixture-of-experts model"):
        model_data(flags("--moe-capacity-factor", "1.5"), None)
    with pytest.raises(InputError, match="--mla: .* five whole numbers"):
        model_data(flags("--mla", "64,0,32"), None)


def test_search_takes_the_same_flags() -> None:
    args = build_parser().parse_args(
        ["search", "--model", "gpt", "--layers", "2", "--hidden", "256", "--heads", "8", "--kv-heads", "1"]
    )
    assert model_data(args, None)["kv_heads"] == 1


def test_moe_flags_on_a_moe_model_change_only_what_they_name(tmp_path) -> None:
    """--moe-experts/--moe-top-k on a model that already has experts (an imported DeepSeek-style file) used
    to replace its MoE with a new one: shared experts, dense leading blocks and the router bias dropped, and
    each routed expert sized by the dense ffn (9× DeepSeek-V3's expert width). The flags now change only the
    count and top-k, and either alone is enough there."""
    import json

    moe = {"experts": 32, "top_k": 4, "expert_ffn": 96, "shared_experts": 1, "first_dense_layers": 1,
           "router_bias": True}
    path = tmp_path / "moe.json"
    path.write_text(json.dumps({"kind": "llama", "name": "moe", "layers": 3, "hidden": 256, "heads": 8,
                                "ffn": 864, "seq_len": 128, "vocab": 1000, "moe": moe}))

    def moe_of(*argv: str):
        args = build_parser().parse_args(["run", "--model", str(path), *argv])
        return LlamaSpec(**model_data(args, None)).moe

    both = moe_of("--moe-experts", "16", "--moe-top-k", "2")
    assert (both.experts, both.top_k) == (16, 2)
    assert (both.expert_ffn, both.shared_experts, both.first_dense_layers, both.router_bias) == (96, 1, 1, True)
    alone = moe_of("--moe-top-k", "8")
    assert (alone.experts, alone.top_k, alone.expert_ffn) == (32, 8, 96)
    assert moe_of("--moe-experts", "16", "--moe-top-k", "2", "--moe-expert-ffn", "48").expert_ffn == 48


@pytest.mark.parametrize("argv", [["--kv-heads", "2"], ["--bias", "none"], ["--parallel-block"],
                                  ["--mla", "64,0,32,16,32"]])
def test_a_block_flag_on_a_cnn_is_refused_naming_that_flag(argv: list[str]) -> None:
    """The refusal named "--kv-heads/--moe-experts/…" whatever was typed; it names the flag given."""
    args = build_parser().parse_args(["run", "--model", "resnet50", *argv])
    with pytest.raises(InputError, match=f"^command line: {argv[0]}: a cnn model has no transformer blocks$"):
        model_data(args, None)
