"""Read a Hugging Face ``config.json`` into a workload spec.

Families: llama and mistral → ``LlamaSpec``; gpt2 and gpt_neox → ``GPTSpec``; bert → ``BertSpec``. The
family comes from ``model_type``, or from ``architectures`` when ``model_type`` is absent.

Sequence length: config.json holds the context limit (``max_position_embeddings``: 32k for Mistral, 128k
for Llama 3.1), not the training length, and attention memory grows with s². The importer therefore takes
min(limit, 4096) — LLaMA 2's training length — unless ``seq_len=`` is given. For gpt2 the learned position
table is sized by the spec's ``seq_len``, so a capped or overridden length changes its parameters too.

Dimensions that decide the model's size are required (a missing one is an error, never a guess); the
others default as the Hugging Face config classes do (``num_key_value_heads`` = heads, ``n_inner`` = 4h,
``tie_word_embeddings`` false for llama/mistral).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from tilewright.engine.ir.workload import BertSpec, GPTSpec, LlamaSpec, WorkloadSpec

SUPPORTED_FAMILIES = ("llama", "mistral", "gpt2", "gpt_neox", "bert")
MAX_SEQ_LEN = 4096
# ``architectures`` entries start with these (lower-cased, without "_"), e.g. "GPTNeoXForCausalLM".
_ARCHITECTURE_PREFIXES = (("gptneox", "gpt_neox"), ("gpt2", "gpt2"), ("llama", "llama"), ("mistral", "mistral"),
                          ("bert", "bert"))
# Spec field → config key, to name the config's key when the spec rejects a value.
_SPEC_TO_CONFIG = {"layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
                   "kv_heads": "num_key_value_heads", "ffn": "intermediate_size", "vocab": "vocab_size",
                   "seq_len": "max_position_embeddings"}


class ConfigError(ValueError):
    """A config.json the importer cannot use; ``field`` names the offending key."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def import_hf_config(
    path_or_dict: str | PathLike[str] | Mapping[str, Any],
    source_name: str | None = None,
    *,
    seq_len: int | None = None,
) -> WorkloadSpec:
    """The spec of a Hugging Face model config (a config.json path, its folder, or the parsed dict).

    ``source_name`` names the spec and is cited in its comment (default: the config's ``_name_or_path``
    or the folder holding the file). ``seq_len`` overrides the capped ``max_position_embeddings``.
    """
    config, default_source = _load(path_or_dict)
    source = source_name or default_source
    family = detect_family(config)
    reader = _Reader(config, seq_len)
    match family:
        case "llama" | "mistral":
            spec_type, fields, notes = LlamaSpec, _llama(reader), []
        case "gpt2":
            spec_type, fields, notes = GPTSpec, _gpt2(reader), []
        case "gpt_neox":
            spec_type, fields = GPTSpec, _gpt_neox(reader)
            notes = ["GPTSpec approximates GPT-NeoX: no untied embed_out (+V·h), learned rather than rotary "
                     "positions (-s·h), sequential rather than parallel residual"]
        case _:
            spec_type, fields, notes = BertSpec, _bert(reader), []
    notes = [f"{family} config, seq_len {reader.seq_note}"] + reader.notes + notes
    comment = f"Imported from Hugging Face config.json ({source}); " + "; ".join(notes)
    try:
        return spec_type(name=source, comment=comment, **fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else "config"
        raise ConfigError(_SPEC_TO_CONFIG.get(key, key), err["msg"].removeprefix("Value error, ")) from exc


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
    folder_name = path.parent.name if path.name == "config.json" else ""
    return config, str(config.get("_name_or_path") or folder_name or path.stem)


class _Reader:
    """Typed access to config keys, raising ``ConfigError`` that names the key."""

    def __init__(self, config: Mapping[str, Any], seq_len: int | None) -> None:
        self.config = config
        self.seq_len_override = seq_len
        self.seq_note = ""
        self.notes: list[str] = []

    def get_int(self, key: str, default: int | None = None, *alternatives: str) -> int:
        for name in (key, *alternatives):
            if self.config.get(name) is not None:
                return _positive_int(name, self.config[name])
        if default is None:
            raise ConfigError(key, "missing")
        return default

    def seq(self, key: str, default: int, *alternatives: str) -> int:
        limit = self.get_int(key, default, *alternatives)
        if self.seq_len_override is not None:
            self.seq_note = f"{self.seq_len_override} as asked ({key} {limit})"
            return _positive_int("seq_len", self.seq_len_override)
        seq = min(limit, MAX_SEQ_LEN)
        self.seq_note = f"{seq} = min({key} {limit}, {MAX_SEQ_LEN})"
        return seq

    def dims(self, hidden: str, layers: str, heads: str) -> dict[str, int]:
        h, a = self.get_int(hidden), self.get_int(heads)
        if h % a:
            raise ConfigError(heads, f"{a} does not divide {hidden} ({h})")
        head_dim = self.config.get("head_dim")
        if head_dim is not None and head_dim != h // a:
            raise ConfigError("head_dim", f"{head_dim} differs from {hidden} / {heads} ({h // a}); not supported")
        return {"hidden": h, "layers": self.get_int(layers), "heads": a, "vocab": self.get_int("vocab_size")}


def _positive_int(key: str, value: Any) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(key, f"expected a positive integer, got {value!r}")
    return value


def _llama(r: _Reader) -> dict[str, Any]:
    fields: dict[str, Any] = r.dims("hidden_size", "num_hidden_layers", "num_attention_heads")
    kv = r.get_int("num_key_value_heads", fields["heads"])
    if fields["heads"] % kv:
        raise ConfigError("num_key_value_heads", f"{kv} does not divide num_attention_heads ({fields['heads']})")
    tie = r.config.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise ConfigError("tie_word_embeddings", f"expected true or false, got {tie!r}")
    fields |= {"kv_heads": kv, "ffn": r.get_int("intermediate_size"), "tie_embeddings": tie,
               "seq_len": r.seq("max_position_embeddings", 2048)}
    if r.config.get("hidden_act", "silu") != "silu":
        r.notes.append(f"hidden_act {r.config['hidden_act']!r} built as SwiGLU")
    return fields


def _gpt2(r: _Reader) -> dict[str, Any]:
    fields: dict[str, Any] = r.dims("n_embd", "n_layer", "n_head")
    ffn = r.get_int("n_inner", 4 * fields["hidden"])
    return fields | {"ffn": ffn, "seq_len": r.seq("n_positions", 1024, "n_ctx")}


def _gpt_neox(r: _Reader) -> dict[str, Any]:
    fields: dict[str, Any] = r.dims("hidden_size", "num_hidden_layers", "num_attention_heads")
    return fields | {"ffn": r.get_int("intermediate_size"), "seq_len": r.seq("max_position_embeddings", 2048)}


def _bert(r: _Reader) -> dict[str, Any]:
    fields: dict[str, Any] = r.dims("hidden_size", "num_hidden_layers", "num_attention_heads")
    types = r.get_int("type_vocab_size", 2)
    if types != 2:
        r.notes.append(f"type_vocab_size {types} built as 2")
    return fields | {"ffn": r.get_int("intermediate_size"), "seq_len": r.seq("max_position_embeddings", 512)}
