"""Strict JSON in and out: files are read and validated into models with errors that name the file, path
and reason; what Tilewright prints or writes is JSON every strict parser accepts.

In: a key given twice and the non-JSON constants ``NaN``/``Infinity`` are refused (Python's parser accepts
both silently), and values are validated in pydantic's strict JSON mode, so ``true`` or ``"8"`` where a
number belongs is an error instead of 1 or 8. Out: non-finite floats become ``null``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError
from tilewright.engine.errors import InputError, Problem
from tilewright.engine.io.errors import problems_from

T = TypeVar("T")


def read_json(path: str | Path) -> Any:
    """Parse ``path``; a missing, unreadable or malformed file becomes an ``InputError``."""
    if str(path) == "-":  # standard input, as command-line tools accept it
        try:
            return loads_strict(sys.stdin.read(), "<stdin>")
        except UnicodeDecodeError as exc:
            raise InputError("<stdin>", f"cannot be read ({exc})") from None
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
    return loads_strict(text, str(p))


class _NotJson(ValueError):
    """What the parser hooks raise; ``loads_strict`` turns it into an ``InputError``."""


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _NotJson(f"the key {key!r} is given twice in one object")
        out[key] = value
    return out


def _refuse_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON number")


def loads_strict(text: str, source: str) -> Any:
    """Parse JSON text, refusing duplicate keys and NaN/Infinity; errors name ``source``."""
    try:
        data = json.loads(text, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant)
        if "\\u" in text.lower():  # only an escape can make a lone surrogate, which no file can hold again
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        return data
    except json.JSONDecodeError as exc:
        # some of the parser's messages end in "at" ("Unterminated string starting at"): one "at", not two
        where = f"{exc.msg.removesuffix(' at')} at line {exc.lineno}, column {exc.colno}"
        raise InputError(source, f"not valid JSON: {where}") from None
    except _NotJson as exc:
        raise InputError(source, f"not valid JSON: {exc}") from None
    except RecursionError:
        raise InputError(source, "not valid JSON: nested too deeply") from None
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end].encode("unicode_escape").decode()
        raise InputError(source, f"not valid text: {bad} is a lone UTF-16 surrogate, not a character") from None


def json_safe(data: Any) -> Any:
    """``data`` with every non-finite float replaced by ``None`` (JSON has no NaN or Infinity)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: json_safe(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [json_safe(v) for v in data]
    return data


def dumps_strict(data: Any, **kwargs: Any) -> str:
    """``json.dumps`` that never writes NaN/Infinity (strict parsers reject them)."""
    return json.dumps(json_safe(data), allow_nan=False, **kwargs)


def validate_as(kind: Any, data: Any, source: str, prefix: str = "") -> Any:
    """Validate raw JSON data as ``kind`` (a model class or a type for TypeAdapter) in pydantic's strict
    JSON mode: numbers must be numbers and booleans booleans, as the file's JSON types say."""
    try:
        text = json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(source, f"not JSON data: {exc}") from None
    try:
        if hasattr(kind, "model_validate_json"):
            return kind.model_validate_json(text, strict=True)
        return TypeAdapter(kind).validate_json(text, strict=True)
    except ValidationError as exc:
        raise InputError(source, problems_from(exc, prefix, root=kind)) from None


def require_object(data: Any, source: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InputError(source, Problem("", f"top level must be a JSON object, not {type(data).__name__}"))
    return data
