"""A project file whose own prompt + output runs past the model's context is refused (exit 2, naming the file and
the fields) by the commands that run its inference — ``run``, ``serve`` — and ``validate`` does not call it
valid; only the flags' lengths used to be held to the context. A serving trace's request past it is refused
naming the trace."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import load_project_preset, preset_path

PRESET = "llama2-70b-h100-inference"
FIELDS = "run.inference.prompt_tokens, run.inference.output_tokens"


def _project_file(tmp_path, prompt: int, output: int) -> str:
    data = json.loads(preset_path("projects", PRESET).read_text())
    data["run"]["inference"] |= {"prompt_tokens": prompt, "output_tokens": output}
    path = tmp_path / "long.json"
    path.write_text(json.dumps(data))
    return str(path)


def _context() -> int:
    project = load_project_preset(PRESET)
    assert project.run.mode.value == "infer" and project.workload.kind == "llama"  # a decoder: prompt + output
    return project.workload.seq_len


@pytest.mark.parametrize("command", [["run"], ["serve", "--requests", "2"], ["validate"]])
def test_the_files_own_lengths_past_the_context_are_refused(tmp_path, capsys, command):
    context = _context()
    prompt, output = context - 10, 11  # one token past, each alone within it
    path = _project_file(tmp_path, prompt, output)
    argv = [command[0], path, *command[1:]] + (["--quiet"] if command[0] != "validate" else [])
    assert main(argv) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith(f"{path}: {FIELDS}: ") and "command line" not in line
    assert f"{prompt + output:,}" in line and f"{context:,}" in line and "workload.seq_len" in line
    assert captured.out == ""


def test_exactly_the_context_is_valid(tmp_path, capsys):
    context = _context()
    path = _project_file(tmp_path, context - 11, 11)
    assert main(["validate", path]) == 0
    assert "valid project" in capsys.readouterr().out


def test_flags_that_shorten_the_sequence_run_it(tmp_path, capsys):
    context = _context()
    path = _project_file(tmp_path, context, 64)  # the file's lengths are past it; the flags' are not
    assert main(["run", path, "--prompt-tokens", str(context - 64), "--quiet"]) == 0
    capsys.readouterr()


def test_a_set_option_past_the_context_is_the_options_fault(tmp_path, capsys):
    context = _context()
    path = str(preset_path("projects", PRESET))
    option = f"run.inference.prompt_tokens={context}"
    assert main(["run", path, "--set", option, "--quiet"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"command line: --set {option}: ") and "past the model's context" in line


def test_a_trace_request_past_the_context_is_refused_naming_the_trace(tmp_path, capsys):
    context = _context()
    trace = tmp_path / "trace.csv"
    trace.write_text(f"arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,{context},1\n")
    path = str(preset_path("projects", PRESET))
    assert main(["serve", path, "--trace", str(trace), "--quiet"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{trace}: request 2 ") and f"{context + 1:,}" in line
