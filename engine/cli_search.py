"""Argument wiring of the search subcommands: ``hypar``, ``search``, ``hw-search``, ``map`` and ``sweep``.

``engine.cli`` calls ``register`` once; each handler imports its search module lazily so that
``tilewright --help`` stays fast and one missing optional dependency never breaks another command.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from engine.errors import InputError, Problem

COMMAND_LINE = "command line"


def _print(data: dict[str, Any], as_json: bool, text: str) -> None:
    print(json.dumps(data, sort_keys=True) if as_json else text)


def _positive(flag: str, value: int | float | None) -> None:
    if value is not None and value <= 0:
        raise InputError(COMMAND_LINE, Problem(flag, f"{value} must be positive"))


# --- hypar --------------------------------------------------------------------------------------------


def _cmd_hypar(args: argparse.Namespace) -> int:
    from engine.presets import load_model
    from engine.search.hypar import hypar, hypar_layers, uniform
    from engine.search.hypar_report import partition_json, partition_text
    from engine.workloads import build_workload

    spec = load_model(args.model)
    layers = hypar_layers(build_workload(spec))
    _positive("--batch", args.batch)
    best = hypar(layers, args.accelerators, args.batch, args.dtype)
    dp = uniform(layers, args.accelerators, args.batch, args.dtype, "dp")
    mp = uniform(layers, args.accelerators, args.batch, args.dtype, "mp")
    data = partition_json(best, dp, mp, getattr(spec, "name", "") or args.model, args.dtype)
    if args.project_out:
        _write_hypar_project(args, best)
        data["project"] = args.project_out
    _print(data, args.json, partition_text(data))
    return 0


def _write_hypar_project(args: argparse.Namespace, best) -> None:
    from engine.io import save_project
    from engine.presets import load_project_preset
    from engine.search.hypar_report import apply_partition

    if not args.project:
        raise InputError(COMMAND_LINE, Problem("--write-project", "needs --project, the project to start from"))
    project = apply_partition(load_project_preset(args.project), best)
    save_project(project, args.project_out)


def _add_hypar(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hypar", help="HyPar: layer-wise data/model parallelism minimising communication")
    p.add_argument("--model", required=True, metavar="NAME|FILE", help="a CNN or MLP (conv/fc layers)")
    p.add_argument("--accelerators", type=int, required=True, metavar="N", help="a power of two")
    p.add_argument("--batch", type=int, required=True, metavar="B")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "tf32", "bf16", "fp16", "fp8", "int8"])
    p.add_argument("--project", metavar="NAME|FILE", help="with --write-project: the project to copy")
    p.add_argument(
        "--write-project", dest="project_out", metavar="FILE.json",
        help="write --project with mapping.layer_parallelism set to the top-level choices",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_hypar)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the search subcommands to ``tilewright``'s subparsers."""
    _add_hypar(sub)


def progress_printer(enabled: bool = True):
    """A ``progress(message)`` callback writing one updating line on stderr (plain lines when not a tty)."""
    tty = sys.stderr.isatty()

    def report(message: str, final: bool = False) -> None:
        if not enabled:
            return
        if tty:
            sys.stderr.write("\r\033[K" + message + ("\n" if final else ""))
        else:
            sys.stderr.write(message + "\n")
        sys.stderr.flush()

    return report
