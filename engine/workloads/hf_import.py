"""Read a Hugging Face ``config.json`` into a workload spec.

Families (``hf_families``): llama, mistral and mixtral; qwen2 (Qwen2/2.5), qwen2_moe (Qwen1.5/2-MoE), qwen3
and qwen3_moe; gpt_oss; gemma, gemma2 and gemma3_text (Gemma 3's language model; gemma3 with its vision
tower is refused); phi3; falcon; deepseek_v2 and deepseek_v3 → ``LlamaSpec`` with the
block variants each needs (head_dim, biases, GeGLU, parallel blocks, MQA/GQA, MLA, QK-norm, attention sinks,
mixture of experts with shared and gated shared experts); gpt2 and gpt_neox → ``GPTSpec``; bert → ``BertSpec``.
The family comes from ``model_type``, or from ``architectures`` when ``model_type`` is absent.

Nothing is approximated silently: a mixture-of-experts config (``num_local_experts``, ``n_routed_experts``,
``num_experts``, ``moe_num_experts``) is MoE whatever its model_type says, or refused when its family has no
MoE reader; encoder-decoder models (``is_encoder_decoder``, e.g. T5) and unknown families are refused; what
a spec leaves out (soft-capping, ALiBi, multi-token prediction unless ``mtp``) is written in its comment.

Sequence length: config.json holds the context limit (``max_position_embeddings``: 32k for Mistral, 128k
for Llama 3.1), not the training length, and attention memory grows with s². The importer therefore takes
min(limit, 4096) — LLaMA 2's training length — unless ``seq_len=`` is given. A learned position table (gpt2,
bert) keeps the checkpoint's rows whatever the length (``position_table``: ``n_positions`` /
``max_position_embeddings``), so a shorter ``seq_len`` leaves the parameters as they are and a longer one is
refused.

Dimensions that decide the model's size are required (a missing one is an error, never a guess); the
others default as the Hugging Face config classes do (``num_key_value_heads`` = heads, ``n_inner`` = 4h,
``tie_word_embeddings`` false for llama/mistral, true for gemma and falcon).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from tilewright.engine.ir.workload import WorkloadSpec
from tilewright.engine.workloads.hf_config import MAX_SEQ_LEN, ConfigError, Reader
from tilewright.engine.workloads.hf_families import FAMILIES, MOE_AWARE, MOE_KEYS

__all__ = ["MAX_SEQ_LEN", "SUPPORTED_FAMILIES", "ConfigError", "default_name", "detect_family", "import_hf_config"]

SUPPORTED_FAMILIES = tuple(FAMILIES)
# ``architectures`` entries start with these (lower-cased, without "_"), e.g. "GPTNeoXForCausalLM"; longer
# prefixes first (gemma2 before gemma).
_ARCHITECTURE_PREFIXES = (
    ("gptneox", "gpt_neox"),
    ("gpt2", "gpt2"),
    ("llama", "llama"),
    ("mistral", "mistral"),
    ("mixtral", "mixtral"),
    ("qwen2moe", "qwen2_moe"),
    ("qwen2", "qwen2"),
    ("qwen3moe", "qwen3_moe"),
    ("qwen3", "qwen3"),
    ("gptoss", "gpt_oss"),
    ("gemma3forcausallm", "gemma3_text"),
    ("gemma3", "gemma3"),
    ("gemma2", "gemma2"),
    ("gemma", "gemma"),
    ("phi3", "phi3"),
    ("falcon", "falcon"),
    ("deepseekv3", "deepseek_v3"),
    ("deepseekv2", "deepseek_v2"),
    ("bert", "bert"),
)
# Class-name endings of checkpoints saved with a task head instead of the language-model head (transformers'
# Auto classes: AutoModelForSequenceClassification, …).
_TASK_HEADS = ("ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering", "ForMultipleChoice",
               "ForNextSentencePrediction")
# Spec field → config key, to name the config's key when the spec rejects a value.
_SPEC_TO_CONFIG = {
    "layers": "num_hidden_layers",
    "hidden": "hidden_size",
    "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads",
    "ffn": "intermediate_size",
    "vocab": "vocab_size",
    "seq_len": "max_position_embeddings",
    "head_dim": "head_dim",
    "moe": "num_experts_per_tok",
    "sliding_window": "sliding_window",
    "sliding_window_layers": "layer_types",
}


def import_hf_config(
    path_or_dict: str | PathLike[str] | Mapping[str, Any],
    source_name: str | None = None,
    *,
    seq_len: int | None = None,
    mtp: bool = False,
) -> WorkloadSpec:
    """The spec of a Hugging Face model config (a config.json path, its folder, or the parsed dict).

    ``source_name`` names the spec and is cited in its comment (default: the config's ``_name_or_path``
    or the folder holding the file). ``seq_len`` overrides the capped ``max_position_embeddings``.
    ``mtp`` keeps the multi-token-prediction layers (``num_nextn_predict_layers``) as ``mtp_layers``: by
    default they are left out, as transformers' DeepseekV3 model skips their weights when loading
    (``_keys_to_ignore_on_load_unexpected`` = layer 61), so an imported DeepSeek-V3 has the reference
    implementation's 671 B parameters; with ``mtp`` it gains the 11.6 B of its MTP module (``transformer_mtp``).
    """
    config, default_source = _load(path_or_dict)
    source = source_name or default_source
    if config.get("is_encoder_decoder"):
        raise ConfigError(
            "is_encoder_decoder",
            "encoder-decoder models (T5, BART, …) are not supported; only decoder-only and encoder-only transformers",
        )
    family = detect_family(config)
    _refuse_unread_moe(config, family)
    reader = Reader(config, seq_len, mtp)
    spec_type, fields = FAMILIES[family](reader)
    reader.notes += _task_head_notes(config)
    if mtp and not fields.get("mtp_layers"):
        raise ConfigError("num_nextn_predict_layers", f"multi-token prediction asked for; this {family} config "
                          "declares no MTP layers (or its family's reader does not build them)")
    notes = [f"{family} config, seq_len {reader.seq_note}", *reader.notes]
    comment = f"Imported from Hugging Face config.json ({source}); " + "; ".join(notes)
    try:
        return spec_type(name=source, comment=comment, **fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else "config"
        raise ConfigError(_SPEC_TO_CONFIG.get(key, key), err["msg"].removeprefix("Value error, ")) from exc


def _task_head_notes(config: Mapping[str, Any]) -> list[str]:
    """A checkpoint saved with a task head (``…ForSequenceClassification``: hidden → a few labels) is built with
    its family's language-model head (hidden → vocab) all the same: said, so the head's parameters and FLOPs are
    not taken for the checkpoint's."""
    architectures = config.get("architectures")
    if not isinstance(architectures, list):
        return []
    return [f"architectures {arch}: its task head is built as the language-model head (vocab × hidden)"
            for arch in map(str, architectures) if arch.endswith(_TASK_HEADS)]


def _refuse_unread_moe(config: Mapping[str, Any], family: str) -> None:
    """A mixture-of-experts key the family's reader ignores would import a dense model: refuse instead."""
    for key in MOE_KEYS:
        value = config.get(key)
        if value not in (None, 0, 1) and key not in MOE_AWARE.get(family, set()):
            raise ConfigError(
                key,
                f"{value} experts: a mixture-of-experts {family} config is not supported "
                "(refused rather than imported as a dense model)",
            )


def detect_family(config: Mapping[str, Any]) -> str:
    """The supported family of ``config``, from ``model_type`` or else ``architectures``."""
    supported = ", ".join(SUPPORTED_FAMILIES)
    model_type = config.get("model_type")
    if model_type is not None:
        if model_type in SUPPORTED_FAMILIES:
            return str(model_type)
        raise ConfigError("model_type", f"{model_type!r} is not supported ({supported})")
    architectures = config.get("architectures")
    if not architectures:
        raise ConfigError("model_type", "missing, and no architectures to infer the family from")
    if isinstance(architectures, str) or not isinstance(architectures, list):
        raise ConfigError("architectures", f"expected a list of class names, got {architectures!r}")
    for arch in architectures:
        key = str(arch).lower().replace("_", "")
        for prefix, family in _ARCHITECTURE_PREFIXES:
            if key.startswith(prefix):
                return family
    raise ConfigError("architectures", f"{architectures} is not a supported family ({supported})")


def _load(path_or_dict: str | PathLike[str] | Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    if isinstance(path_or_dict, Mapping):
        return path_or_dict, str(path_or_dict.get("_name_or_path") or "config dict")
    path = Path(path_or_dict)
    if path.is_dir():
        path = path / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(str(path), f"not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(config, dict):
        raise ConfigError(str(path), f"expected a JSON object, got {type(config).__name__}")
    return config, default_name(config, path)


def default_name(config: Mapping[str, Any], path: str | PathLike[str]) -> str:
    """The name an imported model gets unless told: the config's ``_name_or_path`` (the hub id it was saved
    from), else the folder of a ``config.json`` (a downloaded model's folder is its name), else the file's stem
    (``llama3-8b.json`` → "llama3-8b": the folder of several such files names none of them)."""
    path = Path(path)
    folder_name = path.parent.name if path.name == "config.json" else ""
    return str(config.get("_name_or_path") or folder_name or path.stem)
