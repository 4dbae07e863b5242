"""One reader per Hugging Face model family: config keys → the spec's fields (see ``hf_import``).

Each reader returns the spec type and its fields, and adds to ``Reader.notes`` what the spec approximates.
The rules follow the family's modelling code in ``transformers`` (the layer shapes its ``__init__`` builds),
so an imported model has exactly the reference implementation's parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tilewright.engine.ir.workload import BertSpec, GPTSpec, LlamaSpec, TransformerDims
from tilewright.engine.workloads.hf_config import ConfigError, Reader

Family = Callable[[Reader], tuple[type[TransformerDims], dict[str, Any]]]

# Config keys that announce a mixture-of-experts model, whatever its model_type says: a family that does not
# read them refuses the config rather than import it as a dense model.
MOE_KEYS = ("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts")
_GATED_ACTIVATIONS = {
    "silu": "swiglu",
    "swish": "swiglu",
    "gelu": "geglu",
    "gelu_new": "geglu",
    "gelu_pytorch_tanh": "geglu",
    "gelu_fast": "geglu",
}


def _activation(r: Reader, default: str, *keys: str) -> str:
    """The gated activation of a llama-like MLP, from the first of ``keys`` the config sets."""
    act = r.get_str(keys[0], default, *keys[1:])
    if act not in _GATED_ACTIVATIONS:
        r.notes.append(f"{keys[0]} {act!r} built as SwiGLU")
        return "swiglu"
    return _GATED_ACTIVATIONS[act]


def _decoder(
    r: Reader,
    *,
    tie_default: bool,
    act_default: str = "silu",
    act_keys: tuple[str, ...] = ("hidden_act",),
    seq_default: int = 2048,
) -> dict[str, Any]:
    """The fields every llama-like (rotary, RMSNorm, gated MLP) family shares."""
    fields: dict[str, Any] = r.dims("hidden_size", "num_hidden_layers", "num_attention_heads")
    kv = r.get_int("num_key_value_heads", fields["heads"])
    if fields["heads"] % kv:
        raise ConfigError("num_key_value_heads", f"{kv} does not divide num_attention_heads ({fields['heads']})")
    attention_bias = r.get_bool("attention_bias", False)  # q, k, v and o projections (LlamaAttention)
    return fields | {
        "kv_heads": kv,
        "ffn": r.get_int("intermediate_size"),
        "tie_embeddings": r.get_bool("tie_word_embeddings", tie_default),
        "seq_len": r.seq("max_position_embeddings", seq_default),
        "qkv_bias": attention_bias,
        "out_bias": attention_bias,
        "mlp_bias": r.get_bool("mlp_bias", False),
        "activation": _activation(r, act_default, *act_keys),
    }


def _sliding_window(r: Reader, fields: dict[str, Any], layers: str = "all") -> None:
    window = r.config.get("sliding_window")
    if window is not None:
        fields |= {"sliding_window": r.get_int("sliding_window"), "sliding_window_layers": layers}


def llama(r: Reader) -> tuple[type[TransformerDims], dict[str, Any]]:
    """LLaMA, Mistral and Mixtral (``num_local_experts`` makes any of them MoE: MixtralSparseMoeBlock)."""
    fields = _decoder(r, tie_default=False)
    _sliding_window(r, fields)
    if r.config.get("num_local_experts") is not None:
        fields["moe"] = {
            "experts": r.get_int("num_local_experts"),
            "top_k": r.get_int("num_experts_per_tok"),
            "expert_ffn": fields["ffn"],
        }
        r.notes.append("mixture of experts: every block (num_local_experts), router without bias")
    return LlamaSpec, fields


def qwen2(r: Reader) -> tuple[type[TransformerDims], dict[str, Any]]:
    """Qwen2/Qwen2.5: biases on q, k, v only (Qwen2Attention)."""
    fields = _decoder(r, tie_default=False, seq_default=32768) | {"qkv_bias": True, "out_bias": False}
    if r.get_bool("use_sliding_window", False):
        r.notes.append("use_sliding_window is set: its windowed layers are built with global attention")
    return LlamaSpec, fields


def gemma(r: Reader) -> tuple[type[TransformerDims], dict[str, Any]]:
    """Gemma: head_dim 256 for 7B (≠ h/a), GeGLU, tied embeddings (GemmaConfig default)."""
    fields = _decoder(
        r,
        tie_default=True,
        act_default="gelu_pytorch_tanh",
        act_keys=("hidden_activation", "hidden_act"),
        seq_default=8192,
    )
    r.notes.append("embeddings scaled by sqrt(hidden) (elementwise, no parameters)")
    return LlamaSpec, fields


def gemma2(r: Reader) -> tuple[type[TransformerDims], dict[str, Any]]:
    """Gemma-2: Gemma plus norms after attention and MLP, and local (sliding-window) attention on even
    blocks (Gemma2Attention: ``is_sliding = not layer_idx % 2``)."""
    _, fields = gemma(r)
    fields["sandwich_norm"] = True
    _sliding_window(r, fields, "even")
    caps = [f"{k} {r.config[k]}" for k in ("attn_logit_softcapping", "final_logit_softcapping") if r.config.get(k)]
    if caps:
        r.notes.append(f"logit soft-capping ({', '.join(caps)}) is elementwise and not costed")
    return LlamaSpec, fields


def phi3(r: Reader) -> tuple[type[TransformerDims], dict[str, Any]]:
    """Phi-3: fused qkv_proj and gate_up_proj, built as separate projections of the same shapes."""
    fields = _decoder(r, tie_default=False, seq_default=4096)
    _sliding_window(r, fields)
    r.notes.append("fused qkv_proj and gate_up_proj built as separate projections (same parameters and FLOPs)")
    return LlamaSpec, fields


def falcon(r: Reader) -> tuple[type[TransformerDims], dict[str, Any]]:
    """Falcon (FalconDecoderLayer): LayerNorm, GeLU MLP (4h), fused qkv with MQA (multi_query) or GQA
    (new_decoder_architecture, num_kv_heads), attention and MLP in parallel (parallel_attn) with one norm or,
    in the new architecture, two (ln_attn, ln_mlp); ``bias`` on every linear layer; tied embeddings."""
    fields: dict[str, Any] = r.dims("hidden_size", "num_hidden_layers", "num_attention_heads", None)
    heads = fields["heads"]
    new_arch = r.get_bool("new_decoder_architecture", False)
    if new_arch:
        kv = r.get_int("num_kv_heads", heads)
    else:
        kv = 1 if r.get_bool("multi_query", True) else heads
    if heads % kv:
        raise ConfigError("num_kv_heads", f"{kv} does not divide num_attention_heads ({heads})")
    bias = r.get_bool("bias", False)
    parallel = r.get_bool("parallel_attn", True)
    norms = r.get_int("num_ln_in_parallel_attn", 2 if new_arch else 1)
    if norms not in (1, 2):
        raise ConfigError("num_ln_in_parallel_attn", f"expected 1 or 2, got {norms!r}")
    act = r.get_str("activation", "gelu")
    if act != "gelu":
        raise ConfigError("activation", f"{act!r} is not supported (gelu)")
    if r.get_bool("alibi", False):
        r.notes.append("ALiBi positions (no parameters)")
    fields |= {
        "kv_heads": kv,
        "ffn": r.get_int("ffn_hidden_size", 4 * fields["hidden"]),
        "qkv_bias": bias,
        "out_bias": bias,
        "mlp_bias": bias,
        "activation": "gelu",
        "norm": "layernorm",
        "parallel_block": parallel,
        "parallel_norms": norms if parallel else 1,
        "tie_embeddings": r.get_bool("tie_word_embeddings", True),
        "seq_len": r.seq("max_position_embeddings", 2048),
    }
    return LlamaSpec, fields


def deepseek(r: Reader) -> tuple[type[TransformerDims], dict[str, Any]]:
    """DeepSeek-V2/V3: multi-head latent attention and DeepSeekMoE (routed + shared experts, the first
    ``first_k_dense_replace`` blocks dense); V3's ``noaux_tc`` router has a per-expert score bias."""
    fields: dict[str, Any] = r.dims("hidden_size", "num_hidden_layers", "num_attention_heads", None)
    q_lora = r.config.get("q_lora_rank")
    fields["mla"] = {
        "q_lora_rank": None if q_lora is None else r.get_int("q_lora_rank"),
        "kv_lora_rank": r.get_int("kv_lora_rank"),
        "qk_nope_head_dim": r.get_int("qk_nope_head_dim"),
        "qk_rope_head_dim": r.get_int("qk_rope_head_dim"),
        "v_head_dim": r.get_int("v_head_dim"),
    }
    attention_bias = r.get_bool("attention_bias", False)
    fields |= {
        "ffn": r.get_int("intermediate_size"),
        "qkv_bias": attention_bias,
        "out_bias": attention_bias,
        "tie_embeddings": r.get_bool("tie_word_embeddings", False),
        "seq_len": r.seq("max_position_embeddings", 4096),
        "activation": _activation(r, "silu", "hidden_act"),
    }
    if r.config.get("n_routed_experts") is not None:
        fields["moe"] = {
            "experts": r.get_int("n_routed_experts"),
            "top_k": r.get_int("num_experts_per_tok"),
            "expert_ffn": r.get_int("moe_intermediate_size"),
            "shared_experts": r.get_count("n_shared_experts"),
            "first_dense_layers": r.get_count("first_k_dense_replace"),
            "layer_freq": r.get_int("moe_layer_freq", 1),
            "router_bias": r.get_str("topk_method", "greedy") == "noaux_tc",
        }
        groups = r.get_count("n_group")
        if r.get_str("topk_method", "greedy") == "noaux_tc" and groups > 1 and r.get_count("topk_group") < groups:
            # V3's node-limited routing (report §2.1.2): the experts in n_group groups, one per node, each token's
            # top-k within its topk_group best groups (V2's group-limited greedy limits devices, not nodes)
            fields["moe"]["max_nodes_per_token"] = r.get_int("topk_group")
    mtp = r.get_count("num_nextn_predict_layers")
    if mtp and r.mtp:
        fields["mtp_layers"] = mtp
        r.notes.append(f"{mtp} multi-token-prediction layer(s) kept for training (Hugging Face's model skips them)")
    elif mtp:
        r.notes.append(f"{mtp} multi-token-prediction layer(s) left out, as Hugging Face's model does (mtp keeps them)")
    return LlamaSpec, fields


def gpt2(r: Reader) -> tuple[type[TransformerDims], dict[str, Any]]:
    fields: dict[str, Any] = r.dims("n_embd", "n_layer", "n_head", None)
    ffn = r.get_int("n_inner", 4 * fields["hidden"])
    return GPTSpec, fields | {"ffn": ffn, "seq_len": r.seq("n_positions", 1024, "n_ctx")}


def gpt_neox(r: Reader) -> tuple[type[TransformerDims], dict[str, Any]]:
    fields: dict[str, Any] = r.dims("hidden_size", "num_hidden_layers", "num_attention_heads", None)
    r.notes.append(
        "GPTSpec approximates GPT-NeoX: no untied embed_out (+V·h), learned rather than rotary "
        "positions (-s·h), sequential rather than parallel residual"
    )
    return GPTSpec, fields | {"ffn": r.get_int("intermediate_size"), "seq_len": r.seq("max_position_embeddings", 2048)}


def bert(r: Reader) -> tuple[type[TransformerDims], dict[str, Any]]:
    fields: dict[str, Any] = r.dims("hidden_size", "num_hidden_layers", "num_attention_heads", None)
    types = r.get_int("type_vocab_size", 2)
    if types != 2:
        r.notes.append(f"type_vocab_size {types} built as 2")
    return BertSpec, fields | {"ffn": r.get_int("intermediate_size"), "seq_len": r.seq("max_position_embeddings", 512)}


# model_type → reader; the order is the order the error message lists them in.
FAMILIES: dict[str, Family] = {
    "llama": llama,
    "mistral": llama,
    "mixtral": llama,
    "qwen2": qwen2,
    "gemma": gemma,
    "gemma2": gemma2,
    "phi3": phi3,
    "falcon": falcon,
    "deepseek_v2": deepseek,
    "deepseek_v3": deepseek,
    "gpt2": gpt2,
    "gpt_neox": gpt_neox,
    "bert": bert,
}
# The MoE keys each family reads (any other MoE key present is refused).
MOE_AWARE = {
    "llama": {"num_local_experts"},
    "mistral": {"num_local_experts"},
    "mixtral": {"num_local_experts"},
    "deepseek_v2": {"n_routed_experts"},
    "deepseek_v3": {"n_routed_experts"},
}
