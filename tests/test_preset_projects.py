"""Project presets: current with their generator, valid, and each one runs."""

from __future__ import annotations

import pytest
from tilewright.engine.cli.preset_projects import PROJECTS, project_text
from tilewright.engine.io import load_project
from tilewright.engine.io.presets import DEFAULT_PROJECT, list_presets, preset_path
from tilewright.engine.plan.checks import raise_for_problems
from tilewright.engine.simulate import simulate


def test_at_least_five_projects_including_the_default():
    names = list_presets("projects")
    assert len(names) >= 5 and DEFAULT_PROJECT in names


@pytest.mark.parametrize("name", sorted(PROJECTS))
def test_file_matches_generator(name):
    assert preset_path("projects", name).read_text() == project_text(name), (
        f"presets/projects/{name}.json is stale: run python -m tilewright.engine.cli.preset_projects"
    )


@pytest.mark.parametrize("name", sorted(PROJECTS))
def test_project_runs_with_the_analytic_engine(name):
    project = load_project(preset_path("projects", name), check=raise_for_problems)
    project.run.engine = "analytic"
    result = simulate(project)
    assert result.iteration_time_s > 0
    assert 0 < result.mfu < 1
