"""One rule for an inference sequence past the model's context (``plan.context_length``), held by the project
checks: a run built from flags alone (no project file, no length flags) is refused on the default lengths as a
file's run is, ``serve`` holds the lengths it serves (the flags' over the file's, any mode), sweep points past
it are recorded invalid, and ``check_project`` (what the studio calls) says the very words the command line
prints. A training run reads no inference lengths and is never held to them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import load_model, load_project_preset, preset_path
from tilewright.engine.ir.project import InferenceSettings
from tilewright.engine.plan.checks import check_project

PRESET = "llama2-70b-h100-inference"  # a decoder served in infer mode
FIELDS = "run.inference.prompt_tokens, run.inference.output_tokens"
DEFAULT = InferenceSettings()  # the lengths a run without run.inference or length flags serves


def _err_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert captured.out == "" and "Traceback" not in line
    return line


def _file(tmp_path: Path, name: str, **changes: object) -> str:
    """The preset project with ``run`` fields changed (``inference`` merged into its own)."""
    data = json.loads(preset_path("projects", PRESET).read_text())
    inference = changes.pop("inference", {})
    data["run"] |= changes
    data["run"]["inference"] = data["run"].get("inference", {}) | inference
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def _context() -> int:
    project = load_project_preset(PRESET)
    assert project.workload.kind == "llama"  # a rotary decoder: its context is seq_len
    return project.workload.seq_len


def test_a_flag_only_run_on_the_default_lengths_is_refused_past_a_short_context(capsys):
    """``--seq-len`` one token short of the default prompt + output, no file and no length flags: refused
    naming the flag that shortened the context, the fields and both numbers; trained, the same model runs."""
    seq = DEFAULT.prompt_tokens + DEFAULT.output_tokens - 1
    model = ["--model", "llama2-7b", "--seq-len", str(seq), "--mode", "infer", "--quiet"]
    assert main(["run", *model]) == 2
    line = _err_line(capsys)
    assert line.startswith(f"command line: --seq-len {seq}: {FIELDS}: ")
    assert f"{seq + 1:,} tokens" in line and f"context of {seq:,} (workload.seq_len)" in line
    small = ["--model", "gpt", "--layers", "2", "--hidden", "256", "--heads", "4", "--vocab", "1024",
             "--seq-len", str(seq), "--engine", "analytic", "--quiet", "--json"]
    assert main(["run", *small]) == 0  # training: the sequence is seq_len itself
    assert json.loads(capsys.readouterr().out)["iteration_time_s"] > 0
    assert main(["run", *small, "--mode", "infer"]) == 2  # the same model served on the defaults is not
    assert _err_line(capsys).startswith(f"command line: --seq-len {seq}: {FIELDS}: ")


def test_flag_lengths_are_held_to_a_preset_models_context(capsys):
    """Flags filling the preset model's context exactly run; one output token more is refused, blamed on the
    length flags (the context is the model's own, no flag set it)."""
    context = load_model("llama2-7b").seq_len
    run = ["run", "--model", "llama2-7b", "--mode", "infer", "--engine", "analytic", "--quiet", "--json",
           "--prompt-tokens", str(context - 2)]
    assert main([*run, "--output-tokens", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["ttft_s"] > 0
    assert main([*run, "--output-tokens", "3"]) == 2
    line = _err_line(capsys)
    assert line.startswith(f"command line: --prompt-tokens {context - 2}, --output-tokens 3: {FIELDS}: ")
    assert f"{context + 1:,} tokens" in line and f"context of {context:,}" in line


def test_an_encoder_is_held_to_its_prompt_only(capsys):
    """BERT generates nothing: its default prompt fills the context and runs, whatever the output length says;
    one prompt token more is refused naming the prompt alone."""
    context = load_model("bert-large").seq_len
    assert DEFAULT.prompt_tokens <= context < DEFAULT.prompt_tokens + DEFAULT.output_tokens  # a decoder would fail
    run = ["run", "--model", "bert-large", "--mode", "infer", "--engine", "analytic", "--quiet", "--json"]
    assert main(run) == 0
    capsys.readouterr()
    assert main([*run, "--prompt-tokens", str(context + 1)]) == 2
    line = _err_line(capsys)
    assert line.startswith(f"command line: --prompt-tokens {context + 1}: run.inference.prompt_tokens: ")
    assert "output" not in line.split(": ", 2)[2]


def test_serve_holds_the_lengths_it_serves(tmp_path, capsys):
    """The flags' lengths replace the file's: a file past the context served at shorter flags runs (on one
    instance or on disaggregated prefill and decode groups, each checked as a project); a training
    project served is held to the lengths it serves (serving is inference), blamed on the flag that set one,
    while ``validate`` calls the same file valid (a training run reads none of them)."""
    context = _context()
    long = _file(tmp_path, "long.json", inference={"prompt_tokens": context, "output_tokens": 64})
    shorter = ["serve", long, "--requests", "2", "--prompt-tokens", str(context - 64), "--quiet"]
    assert main(shorter) == 0
    devices = load_project_preset(PRESET).mapping.devices  # each group is checked with the served lengths too
    assert main([*shorter, "--disaggregate", f"{devices // 2}:{devices - devices // 2}"]) == 0
    capsys.readouterr()
    assert main(["serve", long, "--requests", "2", "--quiet"]) == 2
    assert _err_line(capsys).startswith(f"{long}: {FIELDS}: ")
    train = _file(tmp_path, "train.json", mode="train", inference={"prompt_tokens": context, "output_tokens": 1})
    assert main(["validate", train]) == 0
    assert "valid project" in capsys.readouterr().out
    assert main(["serve", train, "--requests", "2", "--quiet"]) == 2
    assert _err_line(capsys).startswith(f"{train}: {FIELDS}: ")
    assert main(["serve", train, "--requests", "2", "--output-tokens", "2", "--prompt-tokens", str(context - 1),
                 "--quiet"]) == 2
    blamed, rest = _err_line(capsys).split(f": {FIELDS}: ")
    assert sorted(blamed.removeprefix("command line: ").split(", ")) == ["--output-tokens 2",
                                                                      f"--prompt-tokens {context - 1}"]
    assert f"{context + 1:,} tokens" in rest


def test_sweep_points_past_the_context_are_invalid(tmp_path, capsys):
    """A sweep over the output length: the point that fills the context runs, the one past it is recorded
    invalid with the rule's reason (the sweep goes on)."""
    context = _context()
    prompt = context - 4
    spec = {"base": PRESET, "set": {"run.engine": "analytic", "run.inference.prompt_tokens": prompt},
            "parameters": [{"path": "run.inference.output_tokens", "values": [4, 5]}]}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    out = tmp_path / "out.csv"
    assert main(["sweep", str(path), "--out", str(out), "--quiet", "--workers", "1"]) == 0
    capsys.readouterr()
    with out.open(newline="") as fh:
        rows = {int(r["run.inference.output_tokens"]): r for r in csv.DictReader(fh)}
    assert rows[4]["status"] == "ok" and rows[4]["error"] == ""
    assert rows[5]["status"] == "invalid"
    assert rows[5]["error"].startswith(f"{FIELDS}: ") and f"{context + 1:,} tokens" in rows[5]["error"]


def test_the_studio_check_says_what_the_command_line_prints(tmp_path, capsys):
    """``check_project`` (the studio's status bar and serving window) finds the problem ``validate`` prints,
    word for word; at exactly the context it finds none."""
    context = _context()
    path = _file(tmp_path, "over.json", inference={"prompt_tokens": context - 10, "output_tokens": 11})
    from tilewright.engine.io.project_file import load_project

    problems = check_project(load_project(path))
    assert [p.path for p in problems] == [FIELDS]
    assert main(["validate", path]) == 2
    assert _err_line(capsys) == f"{path}: {problems[0]}"
    fits = _file(tmp_path, "fits.json", inference={"prompt_tokens": context - 10, "output_tokens": 10})
    assert check_project(load_project(fits)) == []
