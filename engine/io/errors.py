"""Turn pydantic validation errors into short ``path: reason`` problems a person can act on."""

from __future__ import annotations

import enum
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from tilewright.engine.errors import Problem
from tilewright.engine.ir.workload import WorkloadSpec


def _workload_kinds() -> tuple[str, ...]:
    """The ``kind`` values of ``WorkloadSpec``, the one discriminated union a user's file reaches (a project's
    ``workload``, a model file, ``--model FILE``), read off the union so a new model family needs no edit here."""
    members = get_args(get_args(WorkloadSpec)[0])
    return tuple(str(m.model_fields["kind"].default) for m in members)


WORKLOAD_KINDS = _workload_kinds()
# Tags pydantic inserts for unions and typed containers that mean nothing to a user.
_UNION_TAGS = set(WORKLOAD_KINDS)
MAX_PROBLEMS = 8


def dotted(loc: tuple[Any, ...], prefix: str = "") -> str:
    parts: list[str] = [prefix] if prefix else []
    for item in loc:
        if isinstance(item, int):
            parts.append(str(item))
        elif isinstance(item, str) and (
            item in _UNION_TAGS or "[" in item or item.startswith(("function-", "constrained-"))
        ):
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


def _union_tag(err: dict[str, Any]) -> tuple[str, str] | None:
    """A discriminated union's missing or unknown tag as (field, reason): pydantic says "Unable to extract tag
    using discriminator 'kind'", naming neither the field a user writes nor the values it takes."""
    kind = err.get("type", "")
    if kind not in ("union_tag_not_found", "union_tag_invalid"):
        return None
    ctx = err.get("ctx") or {}
    field = str(ctx.get("discriminator", "kind")).strip("'\"")
    expected = ctx.get("expected_tags")
    workloads = ", ".join(f"'{k}'" for k in WORKLOAD_KINDS)
    allowed = str(expected) if expected else workloads  # pydantic lists them only for an unknown tag
    model = allowed == workloads
    given = err.get("input")
    if isinstance(given, dict) and field in given:  # the value as the file holds it (ctx has it as a string)
        return field, f"{given[field]!r} is not {'a model kind' if model else 'allowed'}; give one of {allowed}"
    reason = f"required field is missing; give {'the model kind, ' if model else ''}one of {allowed}"
    if model and isinstance(given, dict) and ("model_type" in given or "architectures" in given):
        # a Hugging Face config.json handed to run or validate as it is
        reason += "; this looks like a Hugging Face config.json: make it a workload with tilewright import-hf FILE"
    return field, reason


def _members(annotation: Any) -> list[Any]:
    """The types an annotation may hold: ``Annotated`` and ``X | None`` unwrapped, unions split."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        return [m for a in get_args(annotation) if a is not type(None) for m in _members(a)]
    return [annotation]


def _field_type(root: Any, loc: tuple[Any, ...]) -> Any:
    """The annotation of the field at pydantic's ``loc`` below ``root`` (None when the walk loses it)."""
    current: list[Any] = _members(root)
    for item in loc:
        nxt: list[Any] = []
        for t in current:
            if isinstance(t, type) and issubclass(t, BaseModel):
                field = t.model_fields.get(str(item))
                if field is not None:
                    nxt += _members(field.annotation)
                elif item == getattr(t.model_fields.get("kind"), "default", None):  # a union's tag
                    nxt.append(t)
            elif isinstance(item, int) and get_origin(t) is list:
                nxt += _members(get_args(t)[0])
        current = nxt
        if not current:
            return None
    return current[0] if len(current) == 1 else None


def _allowed(annotation: Any) -> str | None:
    """The values an enum or literal field takes, quoted as pydantic quotes them; None for other types."""
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = [m.value for m in annotation]
    elif get_origin(annotation) is Literal:
        values = list(get_args(annotation))
    else:
        return None
    return ", ".join(f"'{v}'" for v in values)


def problems_from(exc: ValidationError, prefix: str = "", root: Any = None) -> list[Problem]:
    """One problem per pydantic error; model-level messages that already start with a field name keep it.
    ``root`` (the type validated) lets a missing enum field name the values it takes."""
    out: list[Problem] = []
    for err in exc.errors()[:MAX_PROBLEMS]:
        path = dotted(tuple(err.get("loc", ())), prefix)
        tag = _union_tag(err)
        if tag is not None:
            out.append(Problem(f"{path}.{tag[0]}" if path else tag[0], tag[1]))
            continue
        reason = _reason(err)
        if err.get("type") == "missing" and root is not None:
            allowed = _allowed(_field_type(root, tuple(err.get("loc", ()))))
            if allowed:
                reason += f"; give one of {allowed}"
        # Model validators phrase messages as "field: reason"; fold that field into the path.
        head, sep, tail = reason.partition(": ")
        if sep and head.replace("_", "").replace(".", "").isalnum() and " " not in head:
            path = f"{path}.{head}" if path else head
            reason = tail
        out.append(Problem(path, reason))
    if len(exc.errors()) > MAX_PROBLEMS:
        out.append(Problem("", f"… and {len(exc.errors()) - MAX_PROBLEMS} more problems"))
    return out
