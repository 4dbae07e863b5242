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
