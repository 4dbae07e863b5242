"""Pure edits of the hardware tree: each returns a new, fully validated ``Component`` or raises ``EditRefused``.

Undo commands are built on these, so a refused edit never reaches the undo stack and the model is only
ever replaced by a value pydantic accepted. Editing goes through plain data (``model_dump``) and a full
re-validation of the root, because the model validators that matter (interconnect needed, dims match the
child count, names unique) live on the *parent* of the field being edited.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError
from tilewright.engine.ir.hardware import Component, ComponentKind, Interconnect, Memory, Topology

FieldPath = tuple[str | int, ...]

# pydantic's phrasing → what an architect expects to read beside a field.
_FRIENDLY = [
    ("Input should be greater than or equal to ", "must be ≥ "),
    ("Input should be greater than ", "must be > "),
    ("Input should be less than or equal to ", "must be ≤ "),
    ("Input should be less than ", "must be < "),
    ("String should have at least 1 character", "must not be empty"),
    ("String should have at most 64 characters", "at most 64 characters"),
    ("String should match pattern '^[A-Za-z0-9_.\\-]+$'", "letters, digits, '_', '.' and '-' only"),
    ("Input should be a valid integer, got a number with a fractional part", "must be a whole number"),
]


class EditRefused(Exception):
    """An edit the model does not accept; ``reason`` is short enough to show beside a field."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def friendly(message: str) -> str:
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    for old, new in _FRIENDLY:
        message = message.replace(old, new)
    return message


def _reason(exc: ValidationError, skip: int) -> str:
    """The first error, with its location shown relative to the edited component."""
    err = exc.errors()[0]
    loc = [str(p) for p in err.get("loc", ())[skip:] if not str(p).startswith("function-")]
    text = friendly(str(err.get("msg", "invalid")))
    return f"{'.'.join(loc)}: {text}" if loc else text


def split_path(path: str) -> list[str]:
    return path.split("/")


def parent_path(path: str) -> str | None:
    head, sep, _ = path.rpartition("/")
    return head if sep else None


def component_at(root: Component, path: str) -> Component:
    found = root.find(path)
    if found is None:
        raise EditRefused(f"no component at '{path}'")
    return found


def _locate(data: dict[str, Any], path: str) -> tuple[dict[str, Any], list[str | int]]:
    """The dumped dict of the component at ``path`` and its pydantic location below the root."""
    names = split_path(path)
    if names[0] != data["name"]:
        raise EditRefused(f"no component at '{path}'")
    node, loc = data, []
    for name in names[1:]:
        for i, child in enumerate(node.get("children", [])):
            if child["name"] == name:
                node, loc = child, [*loc, "children", i]
                break
        else:
            raise EditRefused(f"no component at '{path}'")
    return node, loc


def _validate(data: dict[str, Any], loc: list[str | int]) -> Component:
    try:
        return Component.model_validate(data)
    except ValidationError as exc:
        skip = len(loc) if list(exc.errors()[0].get("loc", ()))[: len(loc)] == loc else 0
        raise EditRefused(_reason(exc, skip)) from None


def get_field(component: Component, field: FieldPath) -> Any:
    """``field`` of ``component`` as in its JSON dump. Only the model holding the field's first key
    is dumped, and of it only that key: dumping the whole tree for every field of the inspector (the
    root of a wafer holds every design) was most of the GUI thread's work when a project opened."""
    value: Any = component
    keys = list(field)
    while len(keys) > 1 and isinstance(value, BaseModel) and isinstance(keys[0], str):
        inner = getattr(value, keys[0], None) if keys[0] in type(value).model_fields else None
        if not isinstance(inner, BaseModel):
            break
        value = inner
        keys.pop(0)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", include={keys[0]} if keys else None)
    for key in keys:
        value = value[key] if value is not None else None
    return value


def set_field(root: Component, path: str, field: FieldPath, value: Any) -> Component:
    """``root`` with ``field`` of the component at ``path`` set to ``value``, validated as a whole."""
    data = root.model_dump(mode="json")
    node, loc = _locate(data, path)
    target: Any = node
    for key in field[:-1]:
        if isinstance(target, dict) and target.get(key) is None:
            raise EditRefused(f"{key}: not present on this component")
        target = target[key]
    target[field[-1]] = value
    return _validate(data, loc)


def unique_name(existing: Iterable[str], base: str) -> str:
    taken = set(existing)
    if base not in taken:
        return base
    n = 2
    while f"{base}_{n}" in taken:
        n += 1
    return f"{base}_{n}"


def default_interconnect(kind: ComponentKind) -> Interconnect:
    """What joins children when a second one is added: a switch for boxes, a mesh on silicon."""
    if kind in (ComponentKind.system, ComponentKind.node, ComponentKind.package):
        return Interconnect(topology=Topology.switch, link_bandwidth_bytes_per_s=100e9, link_latency_s=1e-6)
    return Interconnect(topology=Topology.mesh, link_bandwidth_bytes_per_s=256e9, link_latency_s=5e-9)


def add_child(root: Component, parent: str, child: Component) -> tuple[Component, str]:
    """Add ``child`` (renamed if its name is taken) under ``parent``; returns the new root and child path."""
    data = root.model_dump(mode="json")
    node, loc = _locate(data, parent)
    siblings = node.setdefault("children", [])
    child_data = child.model_dump(mode="json")
    child_data["name"] = unique_name((c["name"] for c in siblings), child.name)
    siblings.append(child_data)
    instances = sum(c.get("rows", 1) * c.get("cols", 1) for c in siblings)
    if instances > 1 and node.get("interconnect") is None:
        node["interconnect"] = default_interconnect(ComponentKind(node["kind"])).model_dump(mode="json")
    return _validate(data, loc), f"{parent}/{child_data['name']}"


def remove_children(root: Component, paths: Iterable[str]) -> Component:
    """``root`` without the components at ``paths`` (the root itself cannot be removed)."""
    data = root.model_dump(mode="json")
    last_loc: list[str | int] = []
    for path in sorted(set(paths), key=lambda p: -p.count("/")):
        parent = parent_path(path)
        if parent is None:
            raise EditRefused("the top-level component cannot be removed")
        node, last_loc = _locate(data, parent)
        name = split_path(path)[-1]
        node["children"] = [c for c in node.get("children", []) if c["name"] != name]
    return _validate(data, last_loc)


def add_memory(root: Component, path: str, memory: Memory) -> Component:
    data = root.model_dump(mode="json")
    node, loc = _locate(data, path)
    mems = node.setdefault("memories", [])
    mem = memory.model_dump(mode="json")
    mem["name"] = unique_name((m["name"] for m in mems), memory.name)
    mems.append(mem)
    return _validate(data, loc)


def rename_keys(table: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """Re-key a path-keyed table after a rename of ``old`` to ``new`` (descendants follow)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key == old:
            out[new] = value
        elif key.startswith(old + "/"):
            out[new + key[len(old) :]] = value
        else:
            out[key] = copy.copy(value)
    return out


def drop_keys(table: dict[str, Any], removed: Iterable[str]) -> dict[str, Any]:
    gone = list(removed)
    return {k: v for k, v in table.items() if not any(k == p or k.startswith(p + "/") for p in gone)}


def renamed_path(path: str, old: str, new: str) -> str:
    if path == old:
        return new
    if path.startswith(old + "/"):
        return new + path[len(old) :]
    return path
