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


def _default_head_dim(r: Reader, fields: dict[str, Any], default: int) -> None:
    """The config class's head_dim when config.json leaves it out (Qwen3Config 128, GptOssConfig 64), which
    the attention then builds even where it differs from hidden / heads."""
    if r.config.get("head_dim") is None and default * fields["heads"] != fields["hidden"]:
        fields["head_dim"] = default
        r.notes.append(f"head_dim {default}: the config class's default (config.json sets none)")


def _refuse_qwen_sliding(r: Reader) -> None:
    """Qwen's windowed layers are those from max_window_layers on (Qwen3Config.layer_types): not a pattern the
    spec's sliding_window_layers (all, even) expresses, so a config that turns them on is refused."""
    if r.get_bool("use_sliding_window", False):
        raise ConfigError("use_sliding_window", "windowed attention from max_window_layers on is not supported "
                          "(sliding_window_layers is all or even blocks)")


def _qwen_moe(r: Reader) -> dict[str, Any] | None:
    """The routed experts of Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer: block i is MoE when num_experts > 0,
    (i + 1) % decoder_sparse_step == 0 and i is not in mlp_only_layers; the others keep the dense
    Qwen2MoeMLP of intermediate_size. MoESpec puts dense blocks first and MoE on i % layer_freq == 0, so it
    holds decoder_sparse_step 1 with mlp_only_layers a leading run (0 … n-1): anything else is refused.
    The router (a bias-free hidden → experts linear) takes the softmax's top-k, renormalised when
    norm_topk_prob (elementwise, not costed). None for a config with num_experts 0 (a dense model)."""
    if r.config.get("num_experts", r.config.get("num_local_experts")) == 0:
        r.notes.append("num_experts 0: every block dense")
        return None
    experts = r.get_int("num_experts", None, "num_local_experts")  # decides the size: required
    step = r.get_int("decoder_sparse_step", 1)
    if step != 1:
        raise ConfigError("decoder_sparse_step", f"{step}: MoE on the blocks with (i + 1) % {step} == 0 is not "
                          "supported (MoESpec puts MoE on i % layer_freq == 0 after a dense prefix)")
    only = r.config.get("mlp_only_layers") or []
    if not isinstance(only, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in only):
        raise ConfigError("mlp_only_layers", f"expected a list of block indices, got {only!r}")
    dense = sorted(set(only))
    if dense != list(range(len(dense))):
        raise ConfigError("mlp_only_layers", f"{only}: only a leading run of dense blocks (0, 1, …, n-1) is "
                          "supported (MoESpec.first_dense_layers)")
    if r.get_bool("norm_topk_prob", False):
        r.notes.append("norm_topk_prob: top-k router weights renormalised (elementwise, not costed)")
    return {
        "experts": experts,
        "top_k": r.get_int("num_experts_per_tok"),
        "expert_ffn": r.get_int("moe_intermediate_size"),
        "first_dense_layers": len(dense),
    }


def qwen2_moe(r: Reader) -> tuple[type[TransformerDims], dict[str, Any]]:
    """Qwen1.5-MoE / Qwen2-MoE (Qwen2MoeSparseMoeBlock): Qwen2's attention (q, k, v biases when qkv_bias,
    default true; o without), routed experts of moe_intermediate_size and, on every MoE block, one shared
    expert of shared_expert_intermediate_size whose output is scaled by sigmoid(shared_expert_gate(x)), a
    hidden → 1 linear without bias (MoESpec.shared_expert_gate)."""
    fields = _decoder(r, tie_default=False, seq_default=32768)
    bias = r.get_bool("qkv_bias", True)
    fields |= {"qkv_bias": bias, "out_bias": False, "mlp_bias": False}
    _refuse_qwen_sliding(r)
    moe = _qwen_moe(r)
    if moe is not None:
        moe |= {"shared_experts": 1, "shared_expert_ffn": r.get_int("shared_expert_intermediate_size"),
                "shared_expert_gate": True}
        fields["moe"] = moe
    return LlamaSpec, fields


def qwen3(r: Reader) -> tuple[type[TransformerDims], dict[str, Any]]:
    """Qwen3 (Qwen3Attention): LLaMA's block with head_dim (128 by default), biases on q, k, v and o when
    attention_bias, and an RMSNorm over each query and key head (q_norm, k_norm: head_dim gains each)."""
    fields = _decoder(r, tie_default=False, seq_default=32768)
    _default_head_dim(r, fields, 128)
    _refuse_qwen_sliding(r)
    return LlamaSpec, fields | {"qk_norm": True}


def qwen3_moe(r: Reader) -> tuple[type[TransformerDims], dict[str, Any]]:
    """Qwen3-MoE (Qwen3MoeSparseMoeBlock): Qwen3's attention (QK-norm; head_dim from the config, else hidden /
    heads as LlamaAttention takes it) and routed experts without a shared one."""
    fields = _decoder(r, tie_default=False, seq_default=32768)
    _refuse_qwen_sliding(r)
    moe = _qwen_moe(r)
    if moe is not None:
        fields["moe"] = moe
    return LlamaSpec, fields | {"qk_norm": True}


_SLIDING, _FULL = "sliding_attention", "full_attention"


def _layer_types(r: Reader, fields: dict[str, Any], default: list[str]) -> None:
    """Sliding-window blocks from ``layer_types`` (or the config class's ``default`` pattern) as the spec's
    ``sliding_window_layers``: every block; or every n-th block global (i + 1 divisible by n), the others
    local — "even" for n = 2 (gpt-oss), the period for n > 2 (Gemma 3: 6); or none. Another pattern is
    refused."""
    layers = fields["layers"]
    types = r.config.get("layer_types")
    types = default if types is None else types
    if not isinstance(types, list) or len(types) != layers or any(t not in (_SLIDING, _FULL) for t in types):
        raise ConfigError("layer_types", f"expected {layers} entries of {_SLIDING!r} or {_FULL!r}, got {types!r}")
    sliding = [t == _SLIDING for t in types]
    if not any(sliding):
        return
    period = sliding.index(False) + 1 if not all(sliding) else 0
    if not period:
        pattern: str | int = "all"
    elif period > 1 and sliding == [(i + 1) % period != 0 for i in range(layers)]:
        pattern = "even" if period == 2 else period
    else:
        raise ConfigError("layer_types", "sliding-window blocks must be all, or all but every n-th (n ≥ 2: the "
                          "blocks with i + 1 divisible by n attend globally)")
    fields |= {"sliding_window": r.get_int("sliding_window"), "sliding_window_layers": pattern}


def gpt_oss(r: Reader) -> tuple[type[TransformerDims], dict[str, Any]]:
    """gpt-oss (GptOssDecoderLayer): attention with biases on q, k, v and o (attention_bias, default true),
    head_dim 64 by default, one learned sink logit per head (``GptOssAttention.sinks``), sliding-window and
    full attention alternating by ``layer_types`` (default: sliding on even blocks); every block MoE
    (GptOssMLP): num_local_experts SwiGLU experts of intermediate_size with biases on gate_up and down, and
    a router with a bias (GptOssTopKRouter: softmax over the top-k logits)."""
    fields = _decoder(r, tie_default=False, seq_default=131072)
    _default_head_dim(r, fields, 64)
    bias = r.get_bool("attention_bias", True)
    fields |= {"qkv_bias": bias, "out_bias": bias, "mlp_bias": True, "attention_sinks": True,
               "glu_clamp": r.get_float("swiglu_limit") or 7.0}  # GptOssConfig's default swiglu_limit
    _layer_types(r, fields, [_SLIDING if i % 2 == 0 else _FULL for i in range(fields["layers"])])
    fields["moe"] = {
        "experts": r.get_int("num_local_experts", None, "num_experts"),
        "top_k": r.get_int("num_experts_per_tok", None, "experts_per_token"),
        "expert_ffn": fields["ffn"],
        "router_bias": True,
    }
    r.notes.append("experts' SwiGLU clamped at swiglu_limit with (up + 1) · glu (glu_clamp: Megatron-Core's eager "
                   "clamps and offset copy, plan.experts); "
                   "attention sinks: one logit per head in each softmax row (parameters counted, work not)")
    return LlamaSpec, fields


def gemma3_text(r: Reader) -> tuple[type[TransformerDims], dict[str, Any]]:
    """Gemma 3's language model (Gemma3TextModel, model_type gemma3_text): Gemma 2's block (four RMSNorms,
    GeGLU, head_dim 256 by default, tied embeddings) with an RMSNorm over each query and key head
    (Gemma3Attention q_norm, k_norm) and five local blocks to one global: ``layer_types``, else sliding
    unless (i + 1) % sliding_window_pattern == 0 (default 6)."""
    fields = _decoder(r, tie_default=True, act_default="gelu_pytorch_tanh",
                      act_keys=("hidden_activation", "hidden_act"), seq_default=131072)
    _default_head_dim(r, fields, 256)
    period = r.get_int("sliding_window_pattern", 6)
    _layer_types(r, fields, [_SLIDING if (i + 1) % period else _FULL for i in range(fields["layers"])])
    caps = [f"{k} {r.config[k]}" for k in ("attn_logit_softcapping", "final_logit_softcapping") if r.config.get(k)]
    if caps:
        r.notes.append(f"logit soft-capping ({', '.join(caps)}) is elementwise and not costed")
    r.notes.append("embeddings scaled by sqrt(hidden), scores by query_pre_attn_scalar, a local rotary base on "
                   "the windowed blocks (elementwise, no parameters)")
    return LlamaSpec, fields | {"sandwich_norm": True, "qk_norm": True}


def gemma3(r: Reader) -> tuple[type[TransformerDims], dict[str, Any]]:
    """Gemma 3 with its vision tower (Gemma3ForConditionalGeneration): refused, as the SigLIP encoder and the
    projector are not transformer decoder blocks this spec holds; its language model imports from text_config
    (model_type gemma3_text)."""
    raise ConfigError("vision_config", "Gemma 3 with its SigLIP vision tower is not supported; import the language "
                      "model: its text_config (model_type gemma3_text)")


def gpt2(r: Reader) -> tuple[type[TransformerDims], dict[str, Any]]:
    fields: dict[str, Any] = r.dims("n_embd", "n_layer", "n_head", None)
    ffn = r.get_int("n_inner", 4 * fields["hidden"])
    seq = r.seq("n_positions", 1024, "n_ctx", learned=True)
    # the learned table is the checkpoint's, whatever sequence the run uses (``ir.workload.LearnedPositions``)
    return GPTSpec, fields | {"ffn": ffn, "seq_len": seq, "position_table": r.get_int("n_positions", 1024, "n_ctx")}


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
    seq = r.seq("max_position_embeddings", 512, learned=True)
    table = r.get_int("max_position_embeddings", 512)  # the checkpoint's table (``ir.workload.LearnedPositions``)
    return BertSpec, fields | {"ffn": r.get_int("intermediate_size"), "seq_len": seq, "position_table": table}


# model_type → reader; the order is the order the error message lists them in.
FAMILIES: dict[str, Family] = {
    "llama": llama,
    "mistral": llama,
    "mixtral": llama,
    "qwen2": qwen2,
    "qwen2_moe": qwen2_moe,
    "qwen3": qwen3,
    "qwen3_moe": qwen3_moe,
    "gpt_oss": gpt_oss,
    "gemma": gemma,
    "gemma2": gemma2,
    "gemma3_text": gemma3_text,
    "gemma3": gemma3,
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
    "qwen2_moe": {"num_experts", "num_local_experts"},
    "qwen3_moe": {"num_experts", "num_local_experts"},
    "gpt_oss": {"num_local_experts", "num_experts"},
}
