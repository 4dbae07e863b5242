"""``tilewright validate`` (check a project, system or model file and summarise it) and ``tilewright schema``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from tilewright.engine.errors import InputError
from tilewright.engine.io.json_file import dumps_strict
from tilewright.engine.results.text import counted

if TYPE_CHECKING:
    from tilewright.engine.ir.mapping import Mapping


def detect_kind(data: dict[str, Any]) -> str:
    """What a file is, from its top-level keys. A ``kind`` that is neither a component's nor a model's (missing,
    misspelt) is read by the fields beside it: a system file with ``"kind": "sistem"`` used to be validated
    as a model and told to pick a model kind."""
    from tilewright.engine.io.errors import WORKLOAD_KINDS
    from tilewright.engine.ir.hardware import Component, ComponentKind

    if "parameters" in data and "base" in data:
        return "sweep"
    if "hardware" in data or "system" in data or "schema_version" in data:
        return "project"
    kind = data.get("kind")
    if not isinstance(kind, str):  # a list or an object is no kind: validated below, where the message names it
        kind = None
    if kind in {k.value for k in ComponentKind}:
        return "system"
    if kind in WORKLOAD_KINDS:
        return "model"
    shared = {"kind", "name", "comment"}
    if set(data) & (set(Component.model_fields) - shared):
        return "system"
    return "model"


def _degrees(m: Mapping) -> str:
    """The parallel degrees, cp among the product when it splits devices (the product is the devices the mapping
    uses, tp × pp × cp × dp) and ep after it (experts split over dp ranks: no devices of its own)."""
    devices = f"tp {m.tp} × pp {m.pp}" + (f" × cp {m.cp}" if m.cp > 1 else "") + f" × dp {m.dp}"
    return devices + (f", ep {m.ep}" if m.ep > 1 else "")


def validate_file(path: str, kind: str = "auto", *, allow_large: bool = False) -> str:
    """Return a one-line summary; raise ``InputError`` naming each problem."""
    from tilewright.engine.io.json_file import read_json, require_object, validate_as
    from tilewright.engine.ir.hardware import Component
    from tilewright.engine.ir.workload import WorkloadSpec

    data = require_object(read_json(path), path)
    kind = detect_kind(data) if kind == "auto" else kind
    if kind == "project":
        from tilewright.engine.io.project_file import project_from_data
        from tilewright.engine.plan.budget import check_budget
        from tilewright.engine.plan.checks import device_capacity, raise_for_problems

        project = project_from_data(data, path)
        check_budget(project, path, allow_large=allow_large)
        raise_for_problems(project, path, allow_large=allow_large)  # what `run` refuses (the context too)
        m = project.mapping
        cap = device_capacity(project)
        size = counted(project.hardware.device_count(), "device") if cap is not None else \
            f"grows to {counted(m.devices, 'device')}"
        return (
            f"{path}: valid project '{project.name}' — {project.hardware.name} "
            f"({size}), model {project.workload.kind}, "
            f"{_degrees(m)}, {project.run.mode.value}, {project.run.dtype.value}"
        )
    if kind == "system":
        comp: Component = validate_as(Component, data, path)
        return f"{path}: valid system '{comp.name}' — {counted(comp.device_count(), 'device')}"
    if kind == "model":
        from tilewright.engine.plan.budget import MAX_LAYERS, layer_count
        from tilewright.engine.workloads import build_workload

        spec = validate_as(WorkloadSpec, data, path)
        if layer_count(spec) > MAX_LAYERS and not allow_large:
            limit = f"{layer_count(spec):,} layers (limit {MAX_LAYERS:,}); pass --allow-large to try anyway"
            raise InputError(path, limit)
        from tilewright.engine.cli.model_size import size_text

        graph = build_workload(spec)
        return f"{path}: valid model '{graph.name}' — {size_text(graph)}"
    if kind == "sweep":
        from tilewright.engine.cli.sweep_check import check_sweep_paths
        from tilewright.engine.io.project_file import project_from_data
        from tilewright.engine.search.sweep.run import load_spec
        from tilewright.engine.search.sweep.spec import point_count

        spec, base, source = load_spec(path)
        project = project_from_data(base, source)
        check_sweep_paths(spec, base, path)
        return (f"{path}: valid sweep — {counted(point_count(spec), spec.method + ' point')} over "
                f"{counted(len(spec.parameters), 'parameter')} of '{project.name}'")
    raise InputError(path, f"unknown kind '{kind}'")


def preset_or_file(name: str, kind: str = "auto") -> str:
    """``name`` itself when it is a file (or ``-``), else the preset it names as ``tilewright presets`` lists
    them, as ``run`` and ``studio`` take them: a project's, else a system's, else a model's (``kind`` picks
    one). An unknown name is refused listing the projects (or the kind asked for)."""
    from tilewright.engine.io.presets import PresetKind, resolve

    kinds: tuple[PresetKind, ...] = {"project": ("projects",), "system": ("systems",),
                                     "model": ("models",)}.get(kind, ("projects", "systems", "models"))
    refusal: InputError | None = None
    for preset_kind in kinds:
        try:
            return str(resolve(preset_kind, name))
        except InputError as exc:
            refusal = refusal or exc
    assert refusal is not None
    raise refusal


def _cmd_validate(args: argparse.Namespace) -> int:
    path = args.file if args.kind == "sweep" else preset_or_file(args.file, args.kind)
    print(validate_file(path, kind=args.kind, allow_large=args.allow_large))
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from pydantic import TypeAdapter
    from tilewright.engine.ir import Component, Project, WorkloadSpec

    kinds = {"project": Project, "system": Component, "model": WorkloadSpec}
    schema = TypeAdapter(kinds[args.kind]).json_schema()
    print(dumps_strict(schema, indent=2, sort_keys=True))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check a project, system, model or sweep file")
    p.add_argument("file", help="a file, a preset's name as `tilewright presets` lists it, or - for standard input")
    p.add_argument("--kind", choices=["auto", "project", "system", "model", "sweep"], default="auto")
    p.add_argument("--allow-large", action="store_true", help="check even past the size limits")
    p.set_defaults(handler=_cmd_validate)

    p = sub.add_parser("schema", help="print the JSON Schema of project files")
    p.add_argument("--kind", choices=["project", "system", "model"], default="project")
    p.set_defaults(handler=_cmd_schema)

