"""Load and save project files: migrate older versions, refuse newer ones, save atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tilewright.engine.io.atomic import dumps_stable, write_atomic
from tilewright.engine.io.json_file import read_json, require_object, validate_as
from tilewright.engine.io.migrate import migrate
from tilewright.engine.ir.project import Project


def project_from_data(data: Any, source: str) -> Project:
    """Validate raw JSON data (any supported schema version) into a ``Project``."""
    data = migrate(require_object(data, source), source)
    return validate_as(Project, data, source)


def load_project(path: str | Path, *, check: bool = True) -> Project:
    """Read a project file; with ``check`` also run the cross-part consistency checks."""
    source = str(path)
    project = project_from_data(read_json(path), source)
    if check:
        from tilewright.engine.checks import raise_for_problems

        raise_for_problems(project, source)
    return project


def project_to_data(project: Project) -> dict[str, Any]:
    return project.model_dump(mode="json")


def project_to_text(project: Project) -> str:
    return dumps_stable(project_to_data(project))


def save_project(project: Project, path: str | Path) -> None:
    write_atomic(path, project_to_text(project))
