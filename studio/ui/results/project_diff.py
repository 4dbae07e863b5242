"""What changed between the projects of two runs, as "mapping.tp: 8 → 4" lines: a comparison of metrics
means little without knowing which edit separates the runs. No Qt."""

from __future__ import annotations

from typing import Any

MAX_LINES = 12
MAX_VALUE_CHARS = 40
IGNORED = ("canvas", "description")  # where things sit on the canvas, and prose, change no result


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaves: {"mapping": {"tp": 8}} → {"mapping.tp": 8}; list items by index."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{i}]"))
        return out or {prefix: []}
    return {prefix: value}


def _dump(project: Any) -> dict[str, Any]:
    dump = getattr(project, "model_dump", None)
    data = dump(mode="json") if callable(dump) else {}
    return {k: v for k, v in data.items() if k not in IGNORED}


def _show(value: Any) -> str:
    text = "—" if value is None else str(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def project_changes(before: Any, after: Any, limit: int = MAX_LINES) -> list[str]:
    """Lines "path: old → new" for every leaf that differs (added and removed ones too)."""
    if before is after:
        return []
    a, b = flatten(_dump(before)), flatten(_dump(after))
    lines = [f"{path}: {_show(a.get(path))} → {_show(b.get(path))}"
             for path in sorted(set(a) | set(b)) if a.get(path) != b.get(path)]
    if len(lines) > limit:
        lines = [*lines[:limit], f"… and {len(lines) - limit} more changes"]
    return lines
