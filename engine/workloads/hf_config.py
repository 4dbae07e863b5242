"""Typed, key-naming access to a Hugging Face ``config.json``: what every family reader of ``hf_import`` uses.

Every problem is a ``ConfigError`` naming the config key, so the CLI can report file, field and reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_SEQ_LEN = 4096  # LLaMA 2's training length: the cap on a config's context limit (see ``hf_import``)
# A config without the context-limit key takes the family's default (transformers' config class has one); said
# so in the spec's comment and by ``import-hf``, never passed off as the config's own limit.
DEFAULTED = "a default: the config sets none"


class ConfigError(ValueError):
    """A config.json the importer cannot use; ``field`` names the offending key."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class Reader:
    """Typed access to config keys, raising ``ConfigError`` that names the key; ``notes`` go into the spec's
    comment (what the spec approximates or leaves out is said there, never silently dropped)."""

    def __init__(self, config: Mapping[str, Any], seq_len: int | None, mtp: bool = False) -> None:
        self.config = config
        self.seq_len_override = seq_len
        self.mtp = mtp  # keep the multi-token-prediction layers the config declares (``import_hf_config``)
        self.seq_note = ""
        self.notes: list[str] = []

    def get_int(self, key: str, default: int | None = None, *alternatives: str) -> int:
        for name in (key, *alternatives):
            if self.config.get(name) is not None:
                return positive_int(name, self.config[name])
        if default is None:
            raise ConfigError(key, "missing")
        return default

    def get_count(self, key: str, default: int = 0) -> int:
        """A non-negative integer (a count that may be 0, e.g. first_k_dense_replace)."""
        value = self.config.get(key)
        if value is None or value == 0:
            return default if value is None else 0
        return positive_int(key, value)

    def get_str(self, key: str, default: str, *alternatives: str) -> str:
        for name in (key, *alternatives):
            value = self.config.get(name)
            if value is not None:
                if not isinstance(value, str):
                    raise ConfigError(name, f"expected a string, got {value!r}")
                return value
        return default

    def get_bool(self, key: str, default: bool) -> bool:
        value = self.config.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(key, f"expected true or false, got {value!r}")
        return value

    def get_float(self, key: str) -> float | None:
        value = self.config.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigError(key, f"expected a positive number, got {value!r}")
        return float(value)

    def seq(self, key: str, default: int, *alternatives: str, learned: bool = False) -> int:
        """The sequence length: the override, else the config's limit capped at ``MAX_SEQ_LEN``. ``learned``:
        the model has a learned position table of ``limit`` rows (GPT-2, BERT), which no token past it can
        index, so a longer override is refused rather than built with a table the model does not have."""
        limit = self.get_int(key, default, *alternatives)
        given = any(self.config.get(name) is not None for name in (key, *alternatives))
        source = f"{key} {limit}" if given else f"{key} {limit} ({DEFAULTED})"
        if learned and self.seq_len_override is not None and self.seq_len_override > limit:
            raise ConfigError(key, f"seq_len {self.seq_len_override} exceeds the model's {limit} learned positions")
        if self.seq_len_override is not None:
            self.seq_note = f"{self.seq_len_override} as asked ({source})"
            return positive_int("seq_len", self.seq_len_override)
        seq = min(limit, MAX_SEQ_LEN)
        self.seq_note = f"{seq} = min({source}, {MAX_SEQ_LEN})"
        return seq

    def dims(self, hidden: str, layers: str, heads: str, head_dim_key: str | None = "head_dim") -> dict[str, int]:
        """hidden, layers, heads, vocab, and head_dim when the config sets one other than hidden / heads."""
        h, a = self.get_int(hidden), self.get_int(heads)
        fields = {"hidden": h, "layers": self.get_int(layers), "heads": a, "vocab": self.get_int("vocab_size")}
        head_dim = self.config.get(head_dim_key) if head_dim_key else None
        if head_dim is not None:
            d = positive_int(head_dim_key, head_dim)
            if d * a != h:
                fields["head_dim"] = d
        elif h % a:
            raise ConfigError(heads, f"{a} does not divide {hidden} ({h})")
        return fields


def positive_int(key: str, value: Any) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(key, f"expected a positive integer, got {value!r}")
    return value
