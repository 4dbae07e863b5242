"""``tilewright sweep``: run a sweep spec on a process pool or Ray into a resumable CSV; its Pareto front."""

from __future__ import annotations

import argparse
from pathlib import Path

from tilewright.engine.cli.common import COMMAND_LINE, print_result, refuse_overwriting_inputs, require_positive
from tilewright.engine.errors import InputError, Problem


def _cmd_sweep(args: argparse.Namespace) -> int:
    from tilewright.engine.cli.progress import ProgressPrinter
    from tilewright.engine.cli.sweep_check import check_sweep_paths
    from tilewright.engine.search.sweep.run import load_spec, run_sweep, sweep_json, sweep_text

    spec, base, source = load_spec(args.spec)
    check_sweep_paths(spec, base, args.spec)
    require_positive("--workers", args.workers)
    if args.ray_address and args.executor != "ray":
        raise InputError(COMMAND_LINE, Problem("--ray-address", "needs --executor ray"))
    out = args.out or str(Path(args.spec).with_suffix(".csv"))
    refuse_overwriting_inputs({"--out": out}, [args.spec, source])  # source: the base project's file
    with ProgressPrinter(not args.quiet) as progress:
        result = run_sweep(
            spec, base, source, out, executor=args.executor, workers=args.workers, ray_address=args.ray_address,
            progress=progress,
        )
    print_result(sweep_json(result), args.json, sweep_text(result, spec))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
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
