"""A missing or unknown ``kind`` names the file, the field's path and the values it takes: pydantic's own
"Unable to extract tag using discriminator 'kind'" named neither, and a system file with a misspelt kind was
read as a model and told to pick a model kind."""

from __future__ import annotations

import json
from typing import get_args

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import preset_path
from tilewright.engine.ir.hardware import ComponentKind
from tilewright.engine.ir.workload import WorkloadSpec

# the values each kind takes, read off the IR (not the module under test)
MODEL_KINDS = [m.model_fields["kind"].default for m in get_args(get_args(WorkloadSpec)[0])]
COMPONENT_KINDS = [k.value for k in ComponentKind]
PYDANTIC_WORDING = ("Unable to extract tag", "Input tag", "discriminator")


def _preset(name: str) -> dict:
    return json.loads(preset_path("projects", name).read_text())


def _refusal(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and not any(w in err for w in PYDANTIC_WORDING), err
    return err


def _names_all(line: str, values: list[str]) -> bool:
    return all(f"'{v}'" in line for v in values)


def _write(tmp_path, name: str, data: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("kind", [None, "gpt5", 7])
def test_a_model_files_kind(tmp_path, capsys, kind):
    data = {"name": "m", "layers": 2, "hidden": 64, "heads": 4} | ({} if kind is None else {"kind": kind})
    path = _write(tmp_path, "model.json", data)
    (line,) = _refusal(["validate", path], capsys).splitlines()
    assert line.startswith(f"{path}: kind: ") and _names_all(line, MODEL_KINDS), line
    if kind is not None:
        assert repr(kind) in line  # what the file holds, as it holds it


@pytest.mark.parametrize("kind", [None, "gpt5"])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_projects_workload_kind(tmp_path, capsys, kind, command):
    data = _preset("gpt3-dgx-a100")
    data["workload"].pop("kind")
    if kind is not None:
        data["workload"]["kind"] = kind
    path = _write(tmp_path, "project.json", data)
    argv = [command, path] + (["--quiet"] if command == "run" else [])
    (line,) = _refusal(argv, capsys).splitlines()
    assert line.startswith(f"{path}: workload.kind: ") and _names_all(line, MODEL_KINDS), line


def test_a_model_file_given_to_run_by_model(tmp_path, capsys):
    path = _write(tmp_path, "model.json", {"name": "m", "layers": 2, "hidden": 64, "heads": 4})
    err = _refusal(["run", "--system", "dgx-a100", "--model", path, "--quiet"], capsys)
    assert err.startswith(f"{path}: kind: ") and _names_all(err, MODEL_KINDS)


@pytest.mark.parametrize("kind", [None, "sistem"])
def test_a_system_files_kind_is_read_as_a_systems(tmp_path, capsys, kind):
    data = _preset("gpt3-dgx-a100")["hardware"]
    data.pop("kind")
    if kind is not None:
        data["kind"] = kind
    path = _write(tmp_path, "system.json", data)
    (line,) = _refusal(["validate", path], capsys).splitlines()
    assert line.startswith(f"{path}: kind: ") and _names_all(line, COMPONENT_KINDS), line
    assert not any(f"'{k}'" in line for k in MODEL_KINDS if k not in COMPONENT_KINDS)


def test_a_nested_components_missing_kind_names_its_path(tmp_path, capsys):
    data = _preset("gpt3-dgx-a100")
    assert data["hardware"]["children"]
    data["hardware"]["children"][0].pop("kind")
    path = _write(tmp_path, "project.json", data)
    (line,) = _refusal(["validate", path], capsys).splitlines()
    assert line.startswith(f"{path}: hardware.children.0.kind: ") and _names_all(line, COMPONENT_KINDS), line


@pytest.mark.parametrize("kind", [["x"], {"a": 1}, 3])
def test_a_kind_that_is_not_a_string_is_a_clear_refusal(tmp_path, capsys, kind):
    """Not an internal error (a list was unhashable): exit 2 naming the file and the field."""
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"kind": kind, "name": "m"}))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "kind" in err and "internal error" not in err
