"""Read JSON files and validate them into models, with errors that name the file, path and reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError
from tilewright.engine.errors import InputError, Problem
from tilewright.engine.io.errors import problems_from

T = TypeVar("T")


def read_json(path: str | Path) -> Any:
    """Parse ``path``; a missing, unreadable or malformed file becomes an ``InputError``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(str(p), "file not found") from None
    except IsADirectoryError:
        raise InputError(str(p), "is a directory, not a JSON file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(p), f"cannot be read ({exc.__class__.__name__}: {exc})") from None
    if not text.strip():
        raise InputError(str(p), "file is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(str(p), f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None


def validate_as(kind: Any, data: Any, source: str, prefix: str = "") -> Any:
    """Validate raw data as ``kind`` (a model class or a type for TypeAdapter)."""
    try:
        if hasattr(kind, "model_validate"):
            return kind.model_validate(data)
        return TypeAdapter(kind).validate_python(data)
    except ValidationError as exc:
        raise InputError(source, problems_from(exc, prefix)) from None


def require_object(data: Any, source: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InputError(source, Problem("", f"top level must be a JSON object, not {type(data).__name__}"))
    return data
