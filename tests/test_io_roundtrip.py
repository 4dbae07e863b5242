"""Random projects survive save → load unchanged, byte for byte."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from tilewright.engine.io import load_project, project_to_text, save_project

from tests.strategies import projects


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(project=projects())
def test_save_load_round_trip(tmp_path, project):
    path = tmp_path / "p.json"
    save_project(project, path)
    loaded = load_project(path)
    assert loaded == project
    assert project_to_text(loaded) == path.read_text(encoding="utf-8")
