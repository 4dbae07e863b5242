"""Project files: atomic stable saves, migration of older versions, refusal of newer ones."""

from __future__ import annotations

import json
import os

import pytest
from tilewright.engine.errors import InputError
from tilewright.engine.io import load_project, project_to_text, save_project
from tilewright.engine.io.atomic import write_atomic
from tilewright.engine.ir import SCHEMA_VERSION

from tests.factories import small_project


def test_save_is_stable_and_sorted(tmp_path):
    p = small_project()
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    save_project(p, a)
    save_project(load_project(a), b)
    assert a.read_bytes() == b.read_bytes()
    data = json.loads(a.read_text())
    assert list(data) == sorted(data)
    assert a.read_text().endswith("\n")


def test_save_leaves_no_temporary_files(tmp_path):
    save_project(small_project(), tmp_path / "p.json")
    assert [f.name for f in tmp_path.iterdir()] == ["p.json"]


def test_failed_save_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "p.json"
    target.write_text("original")

    def boom(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_atomic(target, "new contents")
    assert target.read_text() == "original"
    assert [f.name for f in tmp_path.iterdir()] == ["p.json"]


def test_older_version_is_migrated(tmp_path):
    data = json.loads(project_to_text(small_project()))
    data.pop("schema_version")
    data["system"] = data.pop("hardware")
    par = {k: data["mapping"].pop(k) for k in ("tp", "pp", "dp")}
    data["parallelism"] = par
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    project = load_project(path)
    assert project.schema_version == SCHEMA_VERSION
    assert (project.mapping.tp, project.mapping.pp, project.mapping.dp) == (par["tp"], par["pp"], par["dp"])
    assert project.hardware.name == "cluster"


def test_newer_version_is_refused_with_reason(tmp_path):
    data = json.loads(project_to_text(small_project()))
    data["schema_version"] = SCHEMA_VERSION + 1
    path = tmp_path / "future.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        load_project(path)
    text = str(err.value)
    assert str(path) in text and "schema_version" in text and "newer" in text
