"""Inputs refused up front rather than run to a meaningless end: a sweep path that names no project field
(every point would be "invalid" and the sweep exit 0), an inference sequence longer than the model's
context (serving runtimes refuse it), and the README's MoE example running as written."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import load_project_preset

README = Path(__file__).resolve().parents[1] / "README.md"


def _spec(tmp_path: Path, parameters: list[dict], **extra) -> Path:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"base": "hypar-vgg-a", "method": "grid", "set": {"run.engine": "analytic"},
                                "parameters": parameters, **extra}))
    return spec


@pytest.mark.parametrize("path, reason", [
    ("mapping.bogus", "unknown field"),
    ("mapping.bogus.deeper", "unknown field"),
    ("hardware.children.99.rows", "out of range"),
])
def test_a_sweep_path_that_names_no_field_is_refused_by_validate_and_sweep(tmp_path, capsys, path, reason):
    spec = _spec(tmp_path, [{"path": path, "values": [1, 2]}])
    out = tmp_path / "out.csv"
    for command in (["validate", str(spec)], ["sweep", str(spec), "--out", str(out), "--quiet"]):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert str(spec) in err and path.split(".")[0] in err and reason in err, err
    assert not out.exists()  # refused before any point ran


def test_a_bad_path_in_set_is_refused_too(tmp_path, capsys):
    spec = _spec(tmp_path, [{"path": "mapping.global_batch", "values": [128]}], set={"run.bogus": 1})
    assert main(["validate", str(spec)]) == 2
    assert "set.run.bogus" in capsys.readouterr().err


def test_a_bad_value_on_a_good_path_stays_a_per_point_invalid(tmp_path, capsys):
    """A value that makes an inconsistent design is the point's fault, not the spec's: the sweep runs and
    records it as invalid beside the points that work."""
    dp = load_project_preset("hypar-vgg-a").mapping.dp
    spec = _spec(tmp_path, [{"path": "mapping.dp", "values": [dp, -1]}])
    assert main(["validate", str(spec)]) == 0
    out = tmp_path / "out.csv"
    assert main(["sweep", str(spec), "--out", str(out), "--quiet", "--workers", "1"]) == 0
    statuses = [line.split(",")[1] for line in out.read_text().splitlines()[1:]]
    assert sorted(statuses) == ["invalid", "ok"]


def test_a_prompt_and_output_past_the_context_are_refused(capsys):
    project = load_project_preset("llama2-70b-h100-inference")
    context = project.workload.seq_len
    prompt, output = context - 96, 200  # 104 tokens past the context, each flag alone within it
    args = ["run", "llama2-70b-h100-inference", "--prompt-tokens", str(prompt), "--output-tokens", str(output)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--prompt-tokens" in err and "--output-tokens" in err and f"{context:,}" in err
    assert f"{prompt + output:,}" in err and "workload.seq_len" in err


def test_a_sequence_that_fills_the_context_exactly_is_not_refused():
    """The project checks hold an inference run's own lengths to the context (``plan.context_length``): exactly
    the context passes, one token more is refused naming both lengths; a training run reads none of them."""
    from tilewright.engine.plan.checks import check_project

    project = load_project_preset("llama2-70b-h100-inference")
    context = project.workload.seq_len
    inference = project.run.inference.model_copy(update={"prompt_tokens": context - 100, "output_tokens": 100})
    project = project.model_copy(update={"run": project.run.model_copy(update={"inference": inference})})
    assert check_project(project) == []  # exactly the context: allowed
    longer = project.model_copy(update={"run": project.run.model_copy(update={
        "inference": inference.model_copy(update={"output_tokens": 101})})})
    refused = check_project(longer)
    assert [p.path for p in refused] == ["run.inference.prompt_tokens, run.inference.output_tokens"]
    assert "past the model's context" in refused[0].reason
    training = longer.model_copy(update={"run": longer.run.model_copy(update={"mode": "train"})})
    assert check_project(training) == []  # a training run reads no inference lengths


def _readme_command(marker: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    block = re.search(r"^tilewright run [^\n]*\\\n[^\n]*" + re.escape(marker) + r"[^\n]*", text, re.M)
    assert block, marker
    command = block.group(0).replace("\\\n", " ")
    return shlex.split(command, comments=True)[1:]


def test_the_readme_moe_example_runs_as_written(capsys):
    args = _readme_command("--moe-experts")
    assert main(args) == 0
    assert "OUT OF MEMORY" not in capsys.readouterr().out
