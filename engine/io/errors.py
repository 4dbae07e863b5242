"""Turn pydantic validation errors into short ``path: reason`` problems a person can act on."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from tilewright.engine.errors import Problem

# Tags pydantic inserts for unions and typed containers that mean nothing to a user.
_UNION_TAGS = {"gpt", "llama", "bert", "cnn", "mlp", "custom"}
MAX_PROBLEMS = 8


def dotted(loc: tuple[Any, ...], prefix: str = "") -> str:
    parts: list[str] = [prefix] if prefix else []
    for item in loc:
        if isinstance(item, int):
            parts.append(str(item))
        elif isinstance(item, str) and (item in _UNION_TAGS or "[" in item or item.startswith("function-")):
            continue
        else:
            parts.append(str(item))
    return ".".join(parts)


def _reason(err: dict[str, Any]) -> str:
    kind = err.get("type", "")
    msg = str(err.get("msg", "invalid"))
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return "unknown field (not part of the schema)"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    given = err.get("input")
    if kind not in ("missing",) and isinstance(given, int | float | str | bool) and kind != "value_error":
        return f"{msg} (got {given!r})"
    return msg


def problems_from(exc: ValidationError, prefix: str = "") -> list[Problem]:
    """One problem per pydantic error; model-level messages that already start with a field name keep it."""
    out: list[Problem] = []
    for err in exc.errors()[:MAX_PROBLEMS]:
        path = dotted(tuple(err.get("loc", ())), prefix)
        reason = _reason(err)
        # Model validators phrase messages as "field: reason"; fold that field into the path.
        head, sep, tail = reason.partition(": ")
        if sep and head.replace("_", "").replace(".", "").isalnum() and " " not in head:
            path = f"{path}.{head}" if path else head
            reason = tail
        out.append(Problem(path, reason))
    if len(exc.errors()) > MAX_PROBLEMS:
        out.append(Problem("", f"… and {len(exc.errors()) - MAX_PROBLEMS} more problems"))
    return out
