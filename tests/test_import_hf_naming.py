"""What ``tilewright import-hf`` and ``validate`` say about an imported model: its name, its size, its seq_len.

- The default name was the folder's, so every config of one folder (hf/llama3-8b.json, hf/mixtral.json) came
  out "hf": the file's stem names it unless the config has ``_name_or_path`` or the file is a ``config.json``.
- The size: "34 layers" for Llama-3-8B counted the embedding and the head with its 32 blocks; import-hf never
  said the parameter count at all. Both say "32 transformer blocks + embedding and head" and the parameters
  (for a mixture of experts also those active per token), counted here from the config's dimensions.
- A config without ``max_position_embeddings`` took a default seq_len that the message called "the config's
  context limit"; it is said to be a default, in the message and the spec's comment.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tilewright.engine.cli import main

HF = Path(__file__).parent / "data" / "hf"


def _config(name: str) -> dict:
    return json.loads((HF / name / "config.json").read_text(encoding="utf-8"))


def _import(tmp_path: Path, config: Path, capsys, *flags: str) -> tuple[dict, str]:
    out = tmp_path / "out.json"
    assert main(["import-hf", str(config), "-o", str(out), *flags]) == 0
    return json.loads(out.read_text(encoding="utf-8")), capsys.readouterr().err


def _billions(text: str, what: str = "B parameters") -> float:
    """The number before ``what`` in ``text`` (printed to 3-4 significant digits)."""
    match = re.search(r"([\d.,]+) " + re.escape(what), text)
    assert match, (what, text)
    return float(match.group(1).replace(",", ""))


def _llama_params(c: dict) -> int:
    """A llama config's parameters from its dimensions: embedding and (untied) head, per block q/k/v/o, the gated
    MLP's three matrices and two RMSNorms, the final norm."""
    h, f, layers, v = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    kv = h * c.get("num_key_value_heads", c["num_attention_heads"]) // c["num_attention_heads"]
    block = h * h * 2 + h * kv * 2 + 3 * h * f + 2 * h
    head = 0 if c.get("tie_word_embeddings", False) else v * h
    return v * h + head + layers * block + h


def test_a_file_is_named_by_its_stem_not_its_folder(tmp_path: Path, capsys) -> None:
    config = {k: v for k, v in _config("llama-2-7b").items() if k != "_name_or_path"}
    folder = tmp_path / "hf"
    folder.mkdir()
    for stem in ("llama-a", "llama-b"):
        (folder / f"{stem}.json").write_text(json.dumps(config), encoding="utf-8")
    names = {_import(tmp_path, folder / f"{stem}.json", capsys)[0]["name"] for stem in ("llama-a", "llama-b")}
    assert names == {"llama-a", "llama-b"}
    # a config.json is named by its folder (a downloaded model's), and _name_or_path wins over both
    model = tmp_path / "my-llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert _import(tmp_path, model / "config.json", capsys)[0]["name"] == "my-llama"
    (folder / "named.json").write_text(json.dumps(config | {"_name_or_path": "org/model-x"}), encoding="utf-8")
    assert _import(tmp_path, folder / "named.json", capsys)[0]["name"] == "org/model-x"


def test_import_and_validate_say_blocks_and_parameters(tmp_path: Path, capsys) -> None:
    config = _config("llama-2-7b")
    spec, err = _import(tmp_path, HF / "llama-2-7b", capsys)
    blocks = config["num_hidden_layers"]
    (line,) = [x for x in err.splitlines() if "parameters" in x]
    assert f"{blocks} transformer blocks + embedding and head" in line, line
    assert _billions(line) == pytest.approx(_llama_params(config) / 1e9, rel=1e-3)
    assert "active" not in line  # a dense model
    assert main(["validate", str(tmp_path / "out.json")]) == 0
    out = capsys.readouterr().out
    assert f"{blocks} transformer blocks + embedding and head" in out, out
    assert _billions(out) == pytest.approx(_llama_params(config) / 1e9, rel=1e-3)
    assert f"{blocks + 2} layers" not in out


def test_a_mixture_of_experts_says_its_active_parameters(tmp_path: Path, capsys) -> None:
    """Mixtral: 8 experts, 2 per token; the active count is the total less 6/8 of the experts' MLPs."""
    c = _config("mixtral-8x7b")
    _spec, err = _import(tmp_path, HF / "mixtral-8x7b", capsys)
    h, f, e, k = c["hidden_size"], c["intermediate_size"], c["num_local_experts"], c["num_experts_per_tok"]
    experts = c["num_hidden_layers"] * e * 3 * h * f
    total = _llama_params(c) + experts - c["num_hidden_layers"] * 3 * h * f + c["num_hidden_layers"] * h * e
    active = total - experts * (e - k) / e
    (line,) = [x for x in err.splitlines() if "parameters" in x]
    assert _billions(line) == pytest.approx(total / 1e9, rel=1e-3)
    assert _billions(line, "B active per token") == pytest.approx(active / 1e9, rel=1e-3)


def test_a_config_without_a_context_limit_says_its_seq_len_is_a_default(tmp_path: Path, capsys) -> None:
    config = {k: v for k, v in _config("llama-2-7b").items() if k != "max_position_embeddings"}
    path = tmp_path / "nolimit.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    spec, err = _import(tmp_path, path, capsys)
    (line,) = [x for x in err.splitlines() if "seq_len" in x]
    assert f"seq_len {spec['seq_len']} (a default" in line and "context limit" not in line.split("(a default")[0]
    assert "the config's context limit" not in line
    assert "a default: the config sets none" in spec["comment"]
    # with the key, the message says it is the config's
    _spec, err = _import(tmp_path, HF / "llama-2-7b", capsys)
    assert "the config's context limit" in err and "a default" not in err


@pytest.mark.parametrize("flag", [[], ["--seq-len", "512"]])
def test_the_default_is_named_with_seq_len_given_too(tmp_path: Path, capsys, flag: list[str]) -> None:
    config = {k: v for k, v in _config("llama-2-7b").items() if k != "max_position_embeddings"}
    path = tmp_path / "nolimit.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    spec, _err = _import(tmp_path, path, capsys, *flag)
    assert "a default: the config sets none" in spec["comment"]
