"""`validate` knows every file kind (project, system, model, sweep) and reads standard input as `-`."""

from __future__ import annotations

import io
import json
import sys

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import preset_path, presets_dir


@pytest.mark.parametrize(("path", "said"), [
    (preset_path("projects", "hypar-vgg-a"), "valid project"),
    (preset_path("systems", "dgx-a100"), "valid system"),
    (preset_path("models", "gpt-1.7b"), "valid model"),
    (presets_dir() / "sweeps" / "dgx-scale-out.json", "valid sweep — 16 grid points"),
])
def test_every_file_kind_validates(capsys, path, said):
    assert main(["validate", str(path)]) == 0
    assert said in capsys.readouterr().out


def test_a_sweep_asking_for_a_trillion_points_is_refused(tmp_path, capsys):
    spec = {"base": "hypar-vgg-a", "parameters": [
        {"path": "mapping.micro_batch", "min": 1, "max": 9, "steps": 10**6},
        {"path": "mapping.dp", "min": 1, "max": 9, "steps": 10**6}]}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(spec))
    assert main(["validate", str(path)]) == 2
    assert "1,000,000,000,000 points (limit 100,000)" in capsys.readouterr().err
    assert main(["sweep", str(path), "--out", str(tmp_path / "r.csv"), "--quiet"]) == 2


def test_standard_input_as_dash(capsys, monkeypatch):
    text = preset_path("projects", "hypar-vgg-a").read_text()
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["validate", "-"]) == 0
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["run", "-", "--engine", "analytic", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["iteration_time_s"] > 0
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"a": '))
    assert main(["validate", "-"]) == 2
    assert "<stdin>: not valid JSON" in capsys.readouterr().err


@pytest.mark.parametrize(("model", "unit"), [("lenet", " parameters"), ("gpt-1.7b", " B parameters")])
def test_a_model_reports_its_parameters_at_a_readable_scale(capsys, model, unit):
    """LeNet-5's ~62 k parameters were printed as "0.000 B parameters"; the count now shows at its scale,
    equal to the graph's own count to the 4 digits printed."""
    from tilewright.engine.io.presets import load_model
    from tilewright.engine.workloads import build_workload

    params = build_workload(load_model(model)).params
    assert main(["validate", str(preset_path("models", model))]) == 0
    shown = capsys.readouterr().out.strip().rsplit("— ", 1)[1].split(", ", 1)[1]
    assert shown.endswith(unit) and "0.000" not in shown
    value = float(shown.removesuffix(" parameters").removesuffix(" B").replace(",", ""))
    assert value * (1e9 if unit == " B parameters" else 1) == pytest.approx(params, rel=1e-3)


def test_a_project_summary_names_context_and_expert_parallelism(tmp_path, capsys):
    """The summary's degrees multiply to the devices the mapping uses: with cp > 1 it was "tp 1 × pp 4 × dp 8"
    for a 64-device run, and an MoE project's ep went unsaid."""
    import re

    data = json.loads(preset_path("projects", "mixtral-8x7b-dgx-h100").read_text())
    m = data["mapping"]
    devices = m["tp"] * m["pp"] * m["dp"]
    assert main(["validate", str(preset_path("projects", "mixtral-8x7b-dgx-h100"))]) == 0
    assert f", ep {m['ep']}," in capsys.readouterr().out and m["ep"] > 1
    data["mapping"] |= {"cp": 2, "dp": m["dp"] // 2, "ep": 1}
    path = tmp_path / "cp.json"
    path.write_text(json.dumps(data))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    said = re.search(r"tp (\d+) × pp (\d+) × cp (\d+) × dp (\d+)", out)
    assert said is not None and ", ep " not in out
    assert int(said[1]) * int(said[2]) * int(said[3]) * int(said[4]) == devices


@pytest.mark.parametrize("command", [["validate"], ["run", "--system", "dgx-h100", "--quiet", "--model"]])
def test_a_hugging_face_config_given_as_a_model_points_to_import_hf(tmp_path, capsys, command):
    """A config.json (model_type, architectures, no kind) handed to run or validate as it is: the refusal names
    the missing kind and the command that reads such a file; a plain file missing its kind is not told so."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64}))
    assert main([*command, str(config)]) == 2
    err = capsys.readouterr().err
    assert f"{config}: kind: required field is missing" in err and "tilewright import-hf" in err
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"layers": 2}))
    assert main([*command, str(plain)]) == 2
    err = capsys.readouterr().err
    assert "kind: required field is missing" in err and "import-hf" not in err
