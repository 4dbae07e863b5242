"""Argument wiring of the search subcommands: ``hypar``, ``search``, ``hw-search``, ``map`` and ``sweep``.

``engine.cli`` calls ``register`` once; each handler imports its search module lazily so that
``tilewright --help`` stays fast and one missing optional dependency never breaks another command.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tilewright.engine.errors import InputError, Problem

COMMAND_LINE = "command line"


def _print(data: dict[str, Any], as_json: bool, text: str) -> None:
    print(json.dumps(data, sort_keys=True) if as_json else text)


def _positive(flag: str, value: int | float | None) -> None:
    if value is not None and value <= 0:
        raise InputError(COMMAND_LINE, Problem(flag, f"{value} must be positive"))


# --- hypar --------------------------------------------------------------------------------------------


def _cmd_hypar(args: argparse.Namespace) -> int:
    from tilewright.engine.presets import load_model
    from tilewright.engine.search.hypar import hypar, hypar_layers, uniform
    from tilewright.engine.search.hypar_report import partition_json, partition_text
    from tilewright.engine.workloads import build_workload

    spec = load_model(args.model)
    layers = hypar_layers(build_workload(spec))
    _positive("--batch", args.batch)
    best = hypar(layers, args.accelerators, args.batch, args.dtype)
    dp = uniform(layers, args.accelerators, args.batch, args.dtype, "dp")
    mp = uniform(layers, args.accelerators, args.batch, args.dtype, "mp")
    data = partition_json(best, dp, mp, getattr(spec, "name", "") or args.model, args.dtype)
    text = partition_text(data)
    if args.project_out:
        _write_hypar_project(args, spec, best)
        data["project"] = args.project_out
    if args.simulate:
        from tilewright.engine.search.hypar_compare import compare, compare_text

        data["simulated"] = compare(_hypar_base(args, spec), best)
        text += "\n" + compare_text(data["simulated"])
    _print(data, args.json, text)
    return 0


def _hypar_base(args: argparse.Namespace, spec):
    """The project the partition is written into or simulated on: --project, or a fresh one on --system."""
    from tilewright.engine.presets import load_project_preset, load_system
    from tilewright.engine.search.hypar_compare import base_project

    if not args.project and not args.system:
        flag = "--simulate" if args.simulate else "--write-project"
        raise InputError(COMMAND_LINE, Problem(flag, "needs --system (or --project, a project to start from)"))
    return base_project(
        spec,
        system=load_system(args.system) if args.system else None,
        project=load_project_preset(args.project) if args.project else None,
        dtype=args.dtype,
        engine=args.engine,
    )


def _write_hypar_project(args: argparse.Namespace, spec, best) -> None:
    from tilewright.engine.checks import raise_for_problems
    from tilewright.engine.io import save_project
    from tilewright.engine.search.hypar_report import apply_partition

    project = apply_partition(_hypar_base(args, spec), best)
    raise_for_problems(project, COMMAND_LINE)
    save_project(project, args.project_out)


HYPAR_EPILOG = """\
To see what the partition does on a system, either
  tilewright hypar --model vgg-a --accelerators 16 --batch 128 --system hypar-array-16 --simulate
which simulates the partition and pure data parallelism on the same mapping and prints both (with --json:
"simulated": {"hypar": {...}, "all_dp": {...}, "speedup": ...}), or write the partition into a project
  tilewright hypar ... --system hypar-array-16 --write-project hybrid.json   (or --project NAME|FILE)
  tilewright run hybrid.json
and compare with the same project without mapping.layer_parallelism (e.g. tilewright run hybrid.json
--set mapping.layer_parallelism=[]). The written mapping is HyPar's array: dp = N, tp = pp = 1, the batch
as one step, and every layer's choice at every level. Activation exchanges report as tp_comm, weight-
gradient exchanges as dp_comm.
"""


def _add_hypar(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "hypar", help="HyPar: layer-wise data/model parallelism minimising communication",
        description="HyPar (Song et al., HPCA 2019): per layer and per level of halving the array of "
        "accelerators, data or model parallelism, minimising the bytes exchanged per step.",
        epilog=HYPAR_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, metavar="NAME|FILE", help="a CNN or MLP (conv/fc layers)")
    p.add_argument("--accelerators", type=int, required=True, metavar="N", help="a power of two")
    p.add_argument("--batch", type=int, required=True, metavar="B")
    p.add_argument(
        "--dtype", default="fp32", choices=["fp32", "tf32", "bf16", "fp16", "fp8", "int8"],
        help="element size of the exchanged tensors; also the written or simulated project's dtype",
    )
    p.add_argument("--system", metavar="NAME|FILE", help="the accelerator array to simulate or write a project for")
    p.add_argument("--project", metavar="NAME|FILE", help="start from this project (its system unless --system)")
    p.add_argument(
        "--write-project", dest="project_out", metavar="FILE.json",
        help="write the project with the whole partition in mapping.layer_parallelism (then: tilewright run FILE)",
    )
    p.add_argument(
        "--simulate", action="store_true",
        help="simulate the partition and pure data parallelism on --system (or --project) and compare them",
    )
    p.add_argument("--engine", choices=["event", "analytic"], help="engine of the written or simulated project")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_hypar)


# --- search (parallelism) -----------------------------------------------------------------------------


def search_template(args: argparse.Namespace):
    """The project whose hardware, workload and run settings the search maps (its mapping is ignored)."""
    from tilewright.engine.cli_run import _model_data
    from tilewright.engine.io.json_file import read_json, require_object
    from tilewright.engine.io.migrate import migrate
    from tilewright.engine.io.project_file import project_from_data
    from tilewright.engine.presets import load_system

    source = args.project or COMMAND_LINE
    base: dict[str, Any] = {}
    if args.project:
        from tilewright.engine.presets import resolve

        path = str(resolve("projects", args.project))
        base = migrate(require_object(read_json(path), path), path)
        source = path
    data: dict[str, Any] = dict(base)
    data.setdefault("name", "search")
    if args.system or "hardware" not in data:
        data["hardware"] = load_system(args.system or "dgx-a100").model_dump(mode="json")
    dims = any(getattr(args, d) is not None for d in ("layers", "hidden", "heads", "ffn", "seq_len", "vocab"))
    if args.model or dims or "workload" not in data:
        if not args.model and not dims:
            raise InputError(COMMAND_LINE, Problem("--model", "required (a preset, a file, or 'gpt' with --layers …)"))
        data["workload"] = _model_data(args, base.get("workload"))
    run = dict(data.get("run") or {})
    if args.dtype:
        run["dtype"] = args.dtype
    data["run"] = run
    data["mapping"] = {}
    project = project_from_data(data, source)
    base_mapping = project_from_data(base, source).mapping if base else None
    devices = args.devices if args.devices is not None else (base_mapping.devices if base_mapping else None)
    batch = args.global_batch
    if batch is None and base_mapping is not None:
        batch = base_mapping.global_batch
    if devices is None:
        raise InputError(COMMAND_LINE, Problem("--devices", "required (devices available to the search)"))
    if batch is None:
        raise InputError(COMMAND_LINE, Problem("--global-batch", "required"))
    return project, devices, batch


def _cmd_search(args: argparse.Namespace) -> int:
    from tilewright.engine.errors import EXIT_OUT_OF_MEMORY
    from tilewright.engine.search.parallelism import result_json, search
    from tilewright.engine.search.report import search_text

    project, devices, batch = search_template(args)
    _positive("--top", args.top)
    result = search(
        project, devices, batch, top=args.top, keep=max(args.list, args.top),
        progress=progress_printer(not args.quiet), resimulate=args.top > 0 and not args.no_simulate,
    )
    data = result_json(result)
    _print(data, args.json, search_text(result))
    if not result.ranked:
        print("tilewright search: no mapping fits in memory", file=sys.stderr)
        return EXIT_OUT_OF_MEMORY
    return 0


def _add_search(sub: argparse._SubParsersAction) -> None:
    from tilewright.engine.cli_run import DIM_FLAGS

    p = sub.add_parser("search", help="find the fastest tp/pp/dp/micro-batch/… mapping of a model on a system")
    p.add_argument("project", nargs="?", metavar="PROJECT.json", help="take system, model and run settings from here")
    p.add_argument("--system", metavar="NAME|FILE")
    p.add_argument("--model", metavar="NAME|FILE", help="a preset, a file, or 'gpt' built from the dims")
    for dim in DIM_FLAGS:
        p.add_argument(f"--{dim.replace('_', '-')}", dest=dim, type=int, metavar="N")
    p.add_argument("--devices", type=int, metavar="N", help="devices available (a mapping may use fewer)")
    p.add_argument("--global-batch", type=int, metavar="B")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16", "fp8"])
    p.add_argument("--top", type=int, default=3, metavar="K", help="re-simulate the best K on the event engine")
    p.add_argument("--list", type=int, default=10, metavar="N", help="candidates to print (default 10)")
    p.add_argument("--no-simulate", action="store_true", help="rank with the fast evaluator only")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_search)


# --- hw-search --------------------------------------------------------------------------------------------


def _cmd_hw_search(args: argparse.Namespace) -> int:
    from tilewright.engine.ir.common import dtype_bytes
    from tilewright.engine.presets import load_model
    from tilewright.engine.search.hardware import hw_result_json, hw_result_text, search_hardware
    from tilewright.engine.workloads import build_workload

    workload = build_workload(load_model(args.model))
    result = search_hardware(
        workload, area_mm2=args.area_mm2, power_w=args.power_w, pp=args.pp, tp=args.tp, micro_batch=args.micro_batch,
        elem_bytes=dtype_bytes(args.dtype), top=args.top, link_bandwidth=args.link_gbps * 1e9,
        progress=progress_printer(not args.quiet),
    )
    _print(hw_result_json(result), args.json, hw_result_text(result))
    return 0


def _add_hw_search(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hw-search", help="search accelerator designs for training under area and power budgets")
    p.add_argument("--model", required=True, metavar="NAME|FILE")
    p.add_argument("--area-mm2", type=float, required=True, metavar="A", help="die area budget per chip")
    p.add_argument("--power-w", type=float, required=True, metavar="P", help="TDP budget per chip")
    p.add_argument("--top", type=int, default=5, metavar="K", help="designs kept per stage (default 5)")
    p.add_argument("--pp", type=int, default=1, metavar="N", help="pipeline stages, one design each")
    p.add_argument("--tp", type=int, default=1, metavar="N", help="tensor-parallel chips per stage")
    p.add_argument("--micro-batch", type=int, default=1, metavar="N")
    p.add_argument("--dtype", default="bf16", choices=["fp32", "bf16", "fp16", "fp8"])
    p.add_argument("--link-gbps", type=float, default=300.0, metavar="GB/S", help="chip-to-chip bandwidth (tp)")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_hw_search)


# --- map (multi-level mapping) ------------------------------------------------------------------------


def _cmd_map(args: argparse.Namespace) -> int:
    from tilewright.engine.presets import load_project_preset
    from tilewright.engine.search.multilevel import map_json, map_text, multilevel_map

    project = load_project_preset(args.project)
    if args.sram_mb is not None:
        _positive("--sram-mb", args.sram_mb)
    result = multilevel_map(project, sram_mb=args.sram_mb, check=not args.no_check)
    if args.output:
        from tilewright.engine.io import save_project

        save_project(result.project, args.output)
    _print(map_json(result), args.json, map_text(result))
    return 0


def _add_map(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "map", help="multi-level mapping: tp/pp/dp per network dimension and operator fusion per chip (MILP)"
    )
    p.add_argument("project", metavar="PROJECT", help="a project preset or file; its device count is kept")
    p.add_argument("--sram-mb", type=float, metavar="MB", help="on-chip memory to fuse against (default: the device's)")
    p.add_argument("-o", "--output", metavar="FILE.json", help="write the project with the optimized mapping")
    p.add_argument("--no-check", action="store_true", help="skip the analytic-engine runs of both mappings")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_map)


# --- sweep --------------------------------------------------------------------------------------------


def _cmd_sweep(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tilewright.engine.search.sweep import load_spec, run_sweep, sweep_json, sweep_text

    spec, base, source = load_spec(args.spec)
    _positive("--workers", args.workers)
    if args.ray_address and args.executor != "ray":
        raise InputError(COMMAND_LINE, Problem("--ray-address", "needs --executor ray"))
    out = args.out or str(Path(args.spec).with_suffix(".csv"))
    result = run_sweep(
        spec, base, source, out, executor=args.executor, workers=args.workers,
        progress=progress_printer(not args.quiet), ray_address=args.ray_address,
    )
    _print(sweep_json(result), args.json, sweep_text(result, spec))
    return 0


def _add_sweep(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run a sweep spec (grid, random, Latin hypercube) and find its Pareto front")
    p.add_argument("spec", metavar="SPEC.json")
    p.add_argument("--out", metavar="FILE.csv", help="results, one row per point (default: SPEC.csv); resumes")
    p.add_argument(
        "--executor", choices=["local", "ray"], default="local",
        help="local: a process pool; ray: Ray tasks (pip install 'tilewright[ray]')",
    )
    p.add_argument(
        "--ray-address", metavar="HOST:PORT",
        help="Ray cluster to run on, whose nodes have tilewright installed (default: $RAY_ADDRESS, "
        "else a local cluster started for this sweep)",
    )
    p.add_argument(
        "--workers", type=int, metavar="N",
        help="parallel workers (default: one per core; with Ray, the whole cluster)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_sweep)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the search subcommands to ``tilewright``'s subparsers."""
    _add_hypar(sub)
    _add_search(sub)
    _add_hw_search(sub)
    _add_map(sub)
    _add_sweep(sub)


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
