"""Schema migrations: an older project file is brought up to the current schema, step by step.

Version 0 is the pre-release draft layout: the hardware tree lived under ``system`` and the parallel
degrees under ``parallelism`` ({tp, pp, dp}). Each step is a pure function on the raw JSON dict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tilewright.engine.errors import InputError, Problem
from tilewright.engine.ir.project import SCHEMA_VERSION

Raw = dict[str, Any]


def _v0_to_v1(data: Raw) -> Raw:
    data = dict(data)
    if "system" in data and "hardware" not in data:
        data["hardware"] = data.pop("system")
    par = data.pop("parallelism", None)
    if isinstance(par, dict):
        mapping = dict(data.get("mapping") or {})
        for key in ("tp", "pp", "dp"):
            if key in par:
                mapping.setdefault(key, par[key])
        data["mapping"] = mapping
    data["schema_version"] = 1
    return data


MIGRATIONS: dict[int, Callable[[Raw], Raw]] = {0: _v0_to_v1}


def migrate(data: Raw, source: str) -> Raw:
    """Return ``data`` at the current schema version, or raise why it cannot be read."""
    version = data.get("schema_version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise InputError(source, Problem("schema_version", f"must be a whole number ≥ 0 (got {version!r})"))
    if version > SCHEMA_VERSION:
        raise InputError(
            source,
            Problem(
                "schema_version",
                f"file is version {version}, newer than this Tilewright understands ({SCHEMA_VERSION}); "
                "upgrade Tilewright to open it",
            ),
        )
    while version < SCHEMA_VERSION:
        data = MIGRATIONS[version](data)
        version = data["schema_version"]
    return data
