"""A learned position table is the model's, not the run's sequence (``ir.workload.LearnedPositions``): GPT-2
imported at ``--seq-len 512`` keeps its 1024 rows (124.44 M parameters, not 124.05 M), in the parameter count
and in memory; a sequence past the table is refused naming ``position_table``; files without the field save
back unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from tilewright.engine.cli import main
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import BertSpec, GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.checks import check_project
from tilewright.engine.simulate import simulate
from tilewright.engine.workloads import build_workload

GPT2 = {"model_type": "gpt2", "n_positions": 1024, "n_ctx": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
        "vocab_size": 50257}
H, L, V, P = 768, 12, 50257, 1024


def _gpt2_params(positions: int) -> int:
    """GPT-2's parameters from its shape: per block 12h² + 13h (QKV, projection, MLP with biases, two
    LayerNorms), the tied word embedding V·h, the position table positions·h, the final LayerNorm 2h."""
    return L * (12 * H * H + 13 * H) + V * H + positions * H + 2 * H


def _import(tmp_path: Path, *flags: str) -> dict:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(GPT2))
    out = tmp_path / "gpt2.json"
    assert main(["import-hf", str(config), "-o", str(out), *flags]) == 0
    return json.loads(out.read_text())


def test_gpt2_has_124_44_m_parameters_at_any_sequence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _gpt2_params(P) == 124_439_808  # Hugging Face's count for gpt2 (tied head)
    data = _import(tmp_path, "--seq-len", "512")
    assert data["seq_len"] == 512 and data["position_table"] == P
    assert build_workload(GPTSpec.model_validate(data)).params == _gpt2_params(P)
    capsys.readouterr()
    assert main(["validate", str(tmp_path / "gpt2.json")]) == 0
    assert "124.4 M parameters" in capsys.readouterr().out


def test_longer_sequence_is_refused_naming_the_field(tmp_path: Path) -> None:
    data = _import(tmp_path, "--seq-len", "512")
    with pytest.raises(ValidationError, match="position_table"):
        GPTSpec.model_validate(data | {"seq_len": 2048})
    with pytest.raises(ValidationError, match="position_table"):
        BertSpec(layers=2, hidden=128, heads=2, seq_len=1024, position_table=512)
    assert GPTSpec.model_validate(data | {"seq_len": P}).seq_len == P  # the whole table is usable


def test_old_files_save_back_unchanged() -> None:
    old = {"kind": "gpt", "layers": 2, "hidden": 128, "heads": 2, "seq_len": 256}
    spec = GPTSpec.model_validate(old)
    assert "position_table" not in spec.model_dump(mode="json")
    assert build_workload(spec).params == build_workload(spec.model_copy(update={"position_table": 256})).params
    bert = BertSpec(layers=2, hidden=128, heads=2, seq_len=128)
    assert "position_table" not in bert.model_dump(mode="json")


def test_bert_import_keeps_its_512_positions(tmp_path: Path) -> None:
    data = {"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
            "intermediate_size": 3072, "max_position_embeddings": 512, "vocab_size": 30522}
    config = tmp_path / "config.json"
    config.write_text(json.dumps(data))
    out = tmp_path / "bert.json"
    assert main(["import-hf", str(config), "-o", str(out), "--seq-len", "128"]) == 0
    spec = BertSpec.model_validate(json.loads(out.read_text()))
    short = build_workload(spec.model_copy(update={"position_table": None}))  # the table at seq_len
    assert build_workload(spec).params - short.params == (512 - 128) * 768


def _project(spec: GPTSpec, mode: str = "train", **inference: int) -> Project:
    run = RunSettings(dtype="bf16", engine="analytic", mode=mode, inference=inference or {})
    return Project(name="pos", hardware=load_system("dgx-a100"), workload=spec,
                   mapping=Mapping(micro_batch=1, global_batch=1), run=run)


def test_memory_holds_the_whole_table(tmp_path: Path) -> None:
    """Weights, gradients and optimizer state grow with the parameters: by P/512·h out of the 512-row model's."""
    spec = GPTSpec.model_validate(_import(tmp_path, "--seq-len", "512"))
    full = simulate(_project(spec)).memory_breakdown_bytes
    short = simulate(_project(spec.model_copy(update={"position_table": None}))).memory_breakdown_bytes
    growth = (P - 512) * H / _gpt2_params(512)
    for category in ("weights", "gradients", "optimizer"):
        assert full[category] / short[category] - 1 == pytest.approx(growth, rel=1e-6)


def test_a_served_sequence_past_the_table_is_refused(tmp_path: Path) -> None:
    spec = GPTSpec.model_validate(_import(tmp_path, "--seq-len", "512"))
    # the sequence is held to the table as serving runtimes hold a request to the model's context (vLLM: prompt
    # + max_tokens ≤ max_model_len, plan.context_length): 999 + 25 = 1024 fits, one more token does not
    assert check_project(_project(spec, "infer", prompt_tokens=P - 25, output_tokens=25, batch=1)) == []
    problems = check_project(_project(spec, "infer", prompt_tokens=P - 25, output_tokens=26, batch=1))
    assert [p.path for p in problems] == ["run.inference.prompt_tokens, run.inference.output_tokens"]
    assert f"past the model's context of {P:,} (workload.position_table)" in problems[0].reason
