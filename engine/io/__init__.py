"""Files in and out: project load/save (atomic, migrated), JSON reading with clear errors, the presets
shipped as package data (``presets``) and ``--set`` overrides of raw project data (``overrides``).
Imports only ``ir`` and ``errors``."""

from tilewright.engine.io.atomic import dumps_stable, write_atomic
from tilewright.engine.io.json_file import read_json, validate_as
from tilewright.engine.io.project_file import (
    load_project,
    project_from_data,
    project_to_data,
    project_to_text,
    save_project,
)

__all__ = [
    "dumps_stable",
    "write_atomic",
    "read_json",
    "validate_as",
    "load_project",
    "project_from_data",
    "project_to_data",
    "project_to_text",
    "save_project",
]
