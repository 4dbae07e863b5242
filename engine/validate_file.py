"""``tilewright validate``: check a project, system or model file and summarise what it holds."""

from __future__ import annotations

from typing import Any

from tilewright.engine.errors import InputError
from tilewright.engine.io.json_file import read_json, require_object, validate_as
from tilewright.engine.ir.hardware import Component, ComponentKind
from tilewright.engine.ir.workload import WorkloadSpec


def detect_kind(data: dict[str, Any]) -> str:
    if "hardware" in data or "system" in data or "schema_version" in data:
        return "project"
    if data.get("kind") in {k.value for k in ComponentKind}:
        return "system"
    return "model"


def validate_file(path: str, kind: str = "auto") -> str:
    """Return a one-line summary; raise ``InputError`` naming each problem."""
    data = require_object(read_json(path), path)
    kind = detect_kind(data) if kind == "auto" else kind
    if kind == "project":
        from tilewright.engine.checks import raise_for_problems
        from tilewright.engine.io.project_file import project_from_data

        project = project_from_data(data, path)
        raise_for_problems(project, path)
        m = project.mapping
        from tilewright.engine.checks import device_capacity

        cap = device_capacity(project)
        size = f"{project.hardware.device_count()} devices" if cap is not None else f"grows to {m.devices} devices"
        return (
            f"{path}: valid project '{project.name}' — {project.hardware.name} "
            f"({size}), model {project.workload.kind}, "
            f"tp {m.tp} × pp {m.pp} × dp {m.dp}, {project.run.mode.value}, {project.run.dtype.value}"
        )
    if kind == "system":
        comp: Component = validate_as(Component, data, path)
        return f"{path}: valid system '{comp.name}' — {comp.device_count()} devices"
    if kind == "model":
        from tilewright.engine.workloads import build_workload

        spec = validate_as(WorkloadSpec, data, path)
        graph = build_workload(spec)
        return f"{path}: valid model '{graph.name}' — {len(graph.layers)} layers, {graph.params / 1e9:.3f} B parameters"
    raise InputError(path, f"unknown kind '{kind}'")
