"""Preset systems, models and projects shipped in ``presets/``; a name resolves to a preset, a path to a file."""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path
from typing import Literal

from tilewright.engine.errors import InputError
from tilewright.engine.io.json_file import read_json, validate_as
from tilewright.engine.io.project_file import ProjectCheck, load_project
from tilewright.engine.ir.hardware import Component
from tilewright.engine.ir.project import Project
from tilewright.engine.ir.workload import WorkloadSpec

PresetKind = Literal["systems", "models", "projects"]
DEFAULT_PROJECT = "gpt3-dgx-a100"


def presets_dir() -> Path:
    """``$TILEWRIGHT_PRESETS``, else the ``tilewright.presets`` package data (the repository's
    ``presets/`` in an editable install, the installed copy in a wheel or the frozen app)."""
    env = os.environ.get("TILEWRIGHT_PRESETS")
    if env:
        return Path(env)
    return Path(str(files("tilewright.presets")))


def list_presets(kind: PresetKind) -> list[str]:
    folder = presets_dir() / kind
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def preset_path(kind: PresetKind, name: str) -> Path:
    path = presets_dir() / kind / f"{name}.json"
    if not path.is_file():
        known = ", ".join(list_presets(kind)) or "none"
        raise InputError(name, f"no {kind[:-1]} preset of that name (known: {known})")
    return path


def resolve(kind: PresetKind, name_or_path: str) -> Path:
    """A name that is an existing file path wins; otherwise it names a preset."""
    candidate = Path(name_or_path)
    if name_or_path == "-":  # standard input: read_json reads it
        return candidate
    if name_or_path.endswith(".json") or candidate.is_file() or os.sep in name_or_path:
        if not candidate.is_file():
            raise InputError(name_or_path, "file not found")
        return candidate
    return preset_path(kind, name_or_path)


def load_system(name_or_path: str) -> Component:
    path = resolve("systems", name_or_path)
    return validate_as(Component, read_json(path), str(path))


def load_model(name_or_path: str) -> WorkloadSpec:
    path = resolve("models", name_or_path)
    return validate_as(WorkloadSpec, read_json(path), str(path))


def load_project_preset(name_or_path: str, *, check: ProjectCheck | None = None) -> Project:
    """A project preset or file; ``check`` as ``load_project``'s."""
    return load_project(resolve("projects", name_or_path), check=check)


def default_project_path() -> Path:
    return preset_path("projects", DEFAULT_PROJECT)
