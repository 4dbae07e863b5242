"""``tilewright map``: multi-level mapping — tp/pp/dp per network dimension and operator fusion per chip."""

from __future__ import annotations

import argparse

from tilewright.engine.cli.common import finite_float, print_result, require_positive


def _cmd_map(args: argparse.Namespace) -> int:
    from tilewright.engine.cli.progress import ProgressPrinter
    from tilewright.engine.io.presets import load_project_preset
    from tilewright.engine.plan.checks import raise_for_problems
    from tilewright.engine.search.multilevel.map import map_json, map_text, multilevel_map

    project = load_project_preset(args.project, check=raise_for_problems)
    if args.sram_mb is not None:
        require_positive("--sram-mb", args.sram_mb)
    with ProgressPrinter(not args.quiet, lines=False) as progress:  # a bar on a terminal, as `run`
        result = multilevel_map(project, sram_mb=args.sram_mb, check=not args.no_check, progress=progress)
    if args.output:
        from tilewright.engine.io import save_project

        save_project(result.project, args.output)
    print_result(map_json(result), args.json, map_text(result))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "map", help="multi-level mapping: tp/pp/dp per network dimension and operator fusion per chip (MILP)"
    )
    p.add_argument("project", metavar="PROJECT", help="a project preset or file; its device count is kept")
    p.add_argument("--sram-mb", type=finite_float, metavar="MB",
                   help="on-chip memory to fuse against (default: the device's)")
    p.add_argument("-o", "--output", metavar="FILE.json", help="write the project with the optimized mapping")
    p.add_argument("--no-check", action="store_true", help="skip the analytic-engine runs of both mappings")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_map)
