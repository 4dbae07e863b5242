"""Hugging Face config import: hand-written fixtures of real configs, checked against published sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter
from tilewright.engine.ir import BertSpec, GPTSpec, LlamaSpec, WorkloadSpec
from tilewright.engine.workloads import ConfigError, build_workload, import_hf_config
from tilewright.engine.workloads.hf_import import SUPPORTED_FAMILIES

HF = Path(__file__).parent / "data" / "hf"


def load(name: str) -> dict:
    return json.loads((HF / name / "config.json").read_text())


def non_embedding_params(spec: WorkloadSpec) -> float:
    g = build_workload(spec)
    return sum(op.params for op in g.ops() if op.kind.value != "embedding" and not op.name.endswith("logits"))


def test_llama2_7b() -> None:
    spec = import_hf_config(HF / "llama-2-7b" / "config.json")
    assert isinstance(spec, LlamaSpec)
    assert (spec.layers, spec.hidden, spec.heads, spec.kv_heads_n, spec.ffn) == (32, 4096, 32, 32, 11008)
    assert spec.seq_len == 4096 and not spec.tie_embeddings
    assert spec.name == "meta-llama/Llama-2-7b-hf"  # from _name_or_path
    assert build_workload(spec).params == pytest.approx(6_738_415_616, rel=1e-3)


def test_mistral_7b_gqa_and_capped_context() -> None:
    """Mistral 7B v0.1: 7.24 B parameters, 8 KV heads; its 32k context limit is capped for training."""
    spec = import_hf_config(HF / "mistral-7b")  # a folder holding config.json works too
    assert isinstance(spec, LlamaSpec)
    assert spec.kv_heads == 8 and spec.ffn == 14336
    assert spec.seq_len == 4096
    assert "32768" in spec.comment
    assert build_workload(spec).params == pytest.approx(7_241_732_096, rel=1e-3)


def test_gpt2_small() -> None:
    """GPT-2 small: 124,439,808 parameters as Hugging Face counts them (tied embeddings, 1024 positions)."""
    spec = import_hf_config(HF / "gpt2" / "config.json")
    assert isinstance(spec, GPTSpec)
    assert (spec.layers, spec.hidden, spec.heads, spec.ffn_dim, spec.seq_len, spec.vocab) == (
        12, 768, 12, 3072, 1024, 50257)
    assert build_workload(spec).params == pytest.approx(124_439_808, rel=1e-3)


def test_gpt_neox_pythia_160m() -> None:
    """Pythia-160M (Biderman et al. 2023, Table 1): 85,056,000 non-embedding parameters."""
    spec = import_hf_config(HF / "pythia-160m" / "config.json")
    assert isinstance(spec, GPTSpec)
    assert spec.ffn == 3072 and spec.seq_len == 2048
    assert non_embedding_params(spec) == pytest.approx(85_056_000, rel=1e-3)
    assert "untied" in spec.comment  # what GPTSpec cannot express is said, not hidden


def test_bert_base() -> None:
    """BERT-base (Devlin et al. 2019): 110 M parameters."""
    spec = import_hf_config(load("bert-base-uncased"), source_name="bert-base-uncased")
    assert isinstance(spec, BertSpec)
    assert (spec.layers, spec.hidden, spec.heads, spec.ffn, spec.seq_len, spec.vocab) == (
        12, 768, 12, 3072, 512, 30522)
    assert spec.name == "bert-base-uncased"
    assert build_workload(spec).params == pytest.approx(110e6, rel=1e-2)


def test_family_from_architectures_when_model_type_is_absent() -> None:
    config = load("llama-2-7b")
    del config["model_type"]
    assert isinstance(import_hf_config(config), LlamaSpec)
    config = load("pythia-160m")
    del config["model_type"]
    assert isinstance(import_hf_config(config), GPTSpec)


def test_seq_len_override_and_source_name() -> None:
    spec = import_hf_config(load("mistral-7b"), source_name="mistral", seq_len=8192)
    assert spec.seq_len == 8192 and spec.name == "mistral"


def test_imported_spec_round_trips_through_json() -> None:
    spec = import_hf_config(HF / "gpt2")
    adapter = TypeAdapter(WorkloadSpec)
    assert adapter.validate_json(adapter.dump_json(spec)) == spec


def error(config: dict, **kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        import_hf_config(config, **kwargs)
    assert isinstance(info.value, ValueError)
    assert str(info.value) == f"{info.value.field}: {info.value.reason}"
    return info.value


def test_missing_field() -> None:
    config = load("llama-2-7b")
    del config["num_attention_heads"]
    err = error(config)
    assert (err.field, err.reason) == ("num_attention_heads", "missing")
    assert str(err) == "num_attention_heads: missing"


def test_unsupported_model_type() -> None:
    err = error({"model_type": "xyz", "hidden_size": 8})
    assert str(err) == f"model_type: 'xyz' is not supported ({', '.join(SUPPORTED_FAMILIES)})"
    assert {"llama", "mixtral", "qwen2", "gemma2", "phi3", "falcon", "deepseek_v3", "bert"} <= set(SUPPORTED_FAMILIES)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"hidden_size": "4096"}, "hidden_size"),
        ({"num_hidden_layers": 0}, "num_hidden_layers"),
        ({"vocab_size": True}, "vocab_size"),
        ({"num_attention_heads": 30}, "num_attention_heads"),
        ({"num_key_value_heads": 5}, "num_key_value_heads"),
        ({"head_dim": 0}, "head_dim"),
        ({"tie_word_embeddings": "no"}, "tie_word_embeddings"),
        ({"model_type": None, "architectures": ["BloomForCausalLM"]}, "architectures"),
        ({"model_type": None, "architectures": None}, "model_type"),
    ],
)
def test_bad_values_name_their_field(change: dict, field: str) -> None:
    config = load("llama-2-7b") | change
    assert error(config).field == field


def test_unreadable_file(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama",')
    with pytest.raises(ConfigError, match="not valid JSON"):
        import_hf_config(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="JSON object"):
        import_hf_config(bad)


@pytest.mark.parametrize(("name", "key"), [("gpt2", "n_positions"), ("bert-base-uncased", "max_position_embeddings")])
def test_seq_len_past_a_learned_position_table_is_refused(name: str, key: str) -> None:
    """GPT-2 and BERT index a learned table of ``key`` positions: a longer sequence cannot run on them, and
    building it gave the model (limit + extra)·h position parameters it does not have. Up to the limit is kept."""
    limit = load(name)[key]
    with pytest.raises(ConfigError, match=f"{limit} learned positions") as exc:
        import_hf_config(HF / name, seq_len=limit + 1)
    assert exc.value.field == key
    assert import_hf_config(HF / name, seq_len=limit).seq_len == limit
    # rotary positions have no table: Llama 2 takes a length past its max_position_embeddings
    llama_limit = load("llama-2-7b")["max_position_embeddings"]
    assert import_hf_config(HF / "llama-2-7b", seq_len=2 * llama_limit).seq_len == 2 * llama_limit
