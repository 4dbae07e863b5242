"""Every shipped preset validates through the command a user runs, and the catalogue lists them."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import list_presets, preset_path

ALL = [(kind, name) for kind in ("systems", "models", "projects") for name in list_presets(kind)]


@pytest.mark.parametrize("kind,name", ALL, ids=[f"{k}/{n}" for k, n in ALL])
def test_validate_accepts_preset(kind, name, capsys):
    assert main(["validate", str(preset_path(kind, name))]) == 0
    assert "valid" in capsys.readouterr().out


def test_catalogue_lists_every_preset_with_a_description(capsys):
    assert main(["presets", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for kind in ("systems", "models", "projects"):
        assert [r["name"] for r in data[kind]] == list_presets(kind)
        assert all(r["description"] for r in data[kind]), kind


def test_schema_describes_projects(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert {"hardware", "workload", "mapping", "run", "schema_version"} <= set(schema["properties"])
