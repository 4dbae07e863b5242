"""``--set DOTTED.PATH=VALUE`` (and sweeps): change one field of a project's raw JSON by dotted path."""

from __future__ import annotations

import json
from typing import Any

from tilewright.engine.errors import InputError, Problem


def parse_set_option(option: str) -> tuple[str, Any]:
    """Split ``path=value``; the value is JSON when it parses (numbers, true, lists), else a string."""
    path, sep, raw = option.partition("=")
    if not sep or not path.strip():
        raise InputError("command line", Problem("--set", f"'{option}' is not DOTTED.PATH=VALUE"))
    try:
        value = json.loads(raw, parse_constant=_not_finite, parse_float=_finite_float)
    except json.JSONDecodeError:
        value = raw
    except ValueError as exc:  # a number JSON cannot carry: the --set value's fault, not the project file's
        raise InputError("command line", Problem(f"--set {path.strip()}", f"{raw}: {exc}")) from None
    return path.strip(), value


def _finite_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("out of range for a number (a finite double, at most ~1.8e308)")
    return value


def _not_finite(text: str) -> float:
    raise ValueError(f"{text} is not a finite number")


def apply_overrides(data: dict[str, Any], path: str, value: Any, source: str) -> None:
    """Set ``data`` at ``path`` (keys and list indices joined by dots); the parent must exist."""
    keys = path.split(".")
    node: Any = data
    for depth, key in enumerate(keys[:-1]):
        node = _step(node, key, ".".join(keys[: depth + 1]), source)
    last = keys[-1]
    if isinstance(node, list):
        index = _index(node, last, path, source)
        node[index] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise InputError(source, Problem(path, f"cannot set a field inside a {type(node).__name__}"))


def _step(node: Any, key: str, where: str, source: str) -> Any:
    if isinstance(node, list):
        return node[_index(node, key, where, source)]
    if isinstance(node, dict):
        if key not in node or not isinstance(node[key], dict | list):
            if key in node:
                raise InputError(source, Problem(where, "is a value, not an object"))
            node[key] = {}
        return node[key]
    raise InputError(source, Problem(where, "no such field"))


def _index(node: list[Any], key: str, where: str, source: str) -> int:
    if not key.lstrip("-").isdigit() or not -len(node) <= int(key) < len(node):
        raise InputError(source, Problem(where, f"index {key!r} out of range (0…{len(node) - 1})"))
    return int(key)
