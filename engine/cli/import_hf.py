"""``tilewright import-hf``: a Hugging Face config.json → a workload spec (or a whole project)."""

from __future__ import annotations

import argparse
from pathlib import Path


def import_hf_command(args: argparse.Namespace) -> int:
    from tilewright.engine.errors import InputError, Problem
    from tilewright.engine.io.atomic import dumps_stable, write_atomic
    from tilewright.engine.io.json_file import read_json, require_object
    from tilewright.engine.workloads import import_hf_config
    from tilewright.engine.workloads.hf_import import ConfigError

    data = require_object(read_json(args.config), args.config)
    name = args.name or data.get("_name_or_path") or Path(args.config).resolve().parent.name
    try:
        spec = import_hf_config(data, source_name=str(name))
    except ConfigError as exc:
        raise InputError(args.config, Problem(exc.field, exc.reason)) from None
    out = spec.model_dump(mode="json")
    if args.system:
        out = _project_around(spec, args.system)
    text = dumps_stable(out)
    if args.output:
        write_atomic(args.output, text)
        print(f"wrote {args.output}")
    else:
        print(text, end="")
    return 0


def _project_around(spec, system: str) -> dict:
    from tilewright.engine.io.presets import load_system
    from tilewright.engine.ir.project import Project

    hw = load_system(system)
    project = Project(name=spec.name or "imported model", hardware=hw, workload=spec)
    return project.model_dump(mode="json")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import-hf", help="turn a Hugging Face config.json into a workload")
    p.add_argument("config")
    p.add_argument("-o", "--output", help="write the workload (or project) here instead of stdout")
    p.add_argument("--system", help="also make a project on this system (name or file)")
    p.add_argument("--name", help="model name (default: from the config or its folder)")
    p.set_defaults(handler=import_hf_command)
