"""A value a flag gives that the project refuses is reported as the flag's (with its value), not the project
file's: ``tilewright run gpt3.json --tp 3`` used to print "gpt3.json: mapping.sequence_parallel: tp (3) does not
divide seq_len (2048)", blaming a file that is fine. A fault of the file itself still names the file."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import load_project_preset, preset_path

PRESET = "gpt3-dgx-a100"  # a training project with sequence parallelism (tp must divide seq_len)


def _gpt3() -> tuple[str, object]:
    return str(preset_path("projects", PRESET)), load_project_preset(PRESET)


def _first_non_divisor(n: int) -> int:
    return next(k for k in range(2, n) if n % k)


def _lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


def _refused(argv: list[str], capsys) -> list[str]:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and captured.out == ""
    return _lines(captured.err)


@pytest.mark.parametrize("form", ["flag", "set"])
def test_a_tensor_parallel_size_a_flag_gives_is_the_flags_fault(capsys, form):
    path, project = _gpt3()
    assert project.mapping.sequence_parallel  # what makes tp divide the sequence
    tp = _first_non_divisor(project.workload.seq_len)
    given = ["--tp", str(tp)] if form == "flag" else ["--set", f"mapping.tp={tp}"]
    lines = _refused(["run", path, *given, "--quiet"], capsys)
    shown = f"--tp {tp}" if form == "flag" else f"--set mapping.tp={tp}"
    assert lines and all(line.startswith(f"command line: {shown}: ") for line in lines), lines
    assert any("seq_len" in line and f"({tp})" in line for line in lines)
    assert not any(line.startswith(path) for line in lines)  # the file is not blamed


@pytest.mark.parametrize(("argv", "flag", "field"), [
    (["--micro-batch", "0"], "--micro-batch 0", "mapping.micro_batch"),
    (["--set", "mapping.micro_batch=0"], "--set mapping.micro_batch=0", "mapping.micro_batch"),
    (["--set", "mapping.recompute=sometimes"], "--set mapping.recompute=sometimes", "mapping.recompute"),
    (["--set", "workload.kind=gpt5"], "--set workload.kind=gpt5", "workload.kind"),
])
def test_a_value_validation_refuses_names_the_flag_and_the_field(capsys, argv, flag, field):
    path, _ = _gpt3()
    lines = _refused(["run", path, *argv, "--quiet"], capsys)
    assert lines == [line for line in lines if line.startswith(f"command line: {flag}: {field}: ")], lines


def test_a_dimension_flag_that_breaks_the_heads_is_named(capsys):
    path, project = _gpt3()
    heads = project.workload.heads
    hidden = heads + 4  # not a multiple of the heads: no head width
    assert hidden % heads
    lines = _refused(["run", path, "--hidden", str(hidden), "--quiet"], capsys)
    assert all(line.startswith(f"command line: --hidden {hidden}: ") for line in lines), lines
    assert any(f"({hidden})" in line for line in lines)


def test_a_fault_of_the_file_keeps_the_files_name_beside_a_flags_fault(tmp_path, capsys):
    _, project = _gpt3()
    data = json.loads(preset_path("projects", PRESET).read_text())
    data["mapping"]["recompute"] = "sometimes"  # the file's own fault
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    lines = _refused(["run", str(path), "--tp", str(project.mapping.tp), "--quiet"], capsys)  # a valid flag
    assert lines and all(line.startswith(f"{path}: mapping.recompute") for line in lines), lines
    lines = _refused(["run", str(path), "--tp", "-2", "--quiet"], capsys)  # and a bad one: each its own source
    assert any(line.startswith("command line: --tp -2: mapping.tp: ") for line in lines), lines
    assert any(line.startswith(f"{path}: mapping.recompute: ") for line in lines), lines


def test_serve_names_the_set_option(capsys):
    project = load_project_preset("llama2-70b-h100-inference")
    tp = _first_non_divisor(project.workload.heads)
    path = str(preset_path("projects", "llama2-70b-h100-inference"))
    lines = _refused(["serve", path, "--set", f"mapping.tp={tp}", "--quiet"], capsys)
    assert lines and all(line.startswith(f"command line: --set mapping.tp={tp}: mapping.tp: ") for line in lines)


def test_search_names_the_dimension_flag(capsys):
    path, project = _gpt3()
    hidden = project.workload.heads + 4
    lines = _refused(["search", path, "--hidden", str(hidden), "--no-simulate", "--quiet"], capsys)
    assert lines and all(line.startswith(f"command line: --hidden {hidden}: ") for line in lines), lines
