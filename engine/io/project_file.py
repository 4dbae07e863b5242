"""Load and save project files: migrate older versions, refuse newer ones, save atomically.

Files know nothing of cross-part consistency (that needs the workload graph and the plan's rules, layers
above this one): a caller that wants a project checked on load passes the check, e.g.
``load_project(path, check=raise_for_problems)`` with ``engine.plan.checks.raise_for_problems``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tilewright.engine.io.atomic import dumps_stable, write_atomic
from tilewright.engine.io.json_file import read_json, require_object, validate_as
from tilewright.engine.io.migrate import migrate
from tilewright.engine.ir.project import Project

ProjectCheck = Callable[[Project, str], None]
"""Raises ``InputError`` naming the source when a project is inconsistent."""


def project_from_data(data: Any, source: str) -> Project:
    """Validate raw JSON data (any supported schema version) into a ``Project``."""
    data = migrate(require_object(data, source), source)
    return validate_as(Project, data, source)


def load_project(path: str | Path, *, check: ProjectCheck | None = None) -> Project:
    """Read a project file; ``check(project, source)`` (if given) then vets it."""
    source = str(path)
    project = project_from_data(read_json(path), source)
    if check is not None:
        check(project, source)
    return project


def project_to_data(project: Project) -> dict[str, Any]:
    return project.model_dump(mode="json")


def project_to_text(project: Project) -> str:
    return dumps_stable(project_to_data(project))


def save_project(project: Project, path: str | Path) -> None:
    write_atomic(path, project_to_text(project))
