"""``tilewright hypar``: HyPar's layer-wise partition of a CNN or MLP, optionally written into a project or
simulated against pure data parallelism."""

from __future__ import annotations

import argparse

from tilewright.engine.cli.common import COMMAND_LINE, print_result, require_positive
from tilewright.engine.errors import InputError, Problem


def _cmd_hypar(args: argparse.Namespace) -> int:
    from tilewright.engine.io.presets import load_model
    from tilewright.engine.search.hypar.partition import hypar, hypar_layers, uniform
    from tilewright.engine.search.hypar.report import partition_json, partition_text
    from tilewright.engine.workloads import build_workload

    spec = load_model(args.model)
    layers = hypar_layers(build_workload(spec))
    require_positive("--batch", args.batch)
    best = hypar(layers, args.accelerators, args.batch, args.dtype)
    dp = uniform(layers, args.accelerators, args.batch, args.dtype, "dp")
    mp = uniform(layers, args.accelerators, args.batch, args.dtype, "mp")
    data = partition_json(best, dp, mp, getattr(spec, "name", "") or args.model, args.dtype)
    text = partition_text(data)
    if args.project_out:
        _write_hypar_project(args, spec, best)
        data["project"] = args.project_out
    if args.simulate:
        from tilewright.engine.cli.progress import ProgressPrinter
        from tilewright.engine.search.hypar.compare import compare, compare_text

        with ProgressPrinter(not args.quiet) as progress:  # two simulations: lines on stderr, as search's
            data["simulated"] = compare(_hypar_base(args, spec), best, progress)
        text += "\n" + compare_text(data["simulated"])
    print_result(data, args.json, text)
    return 0


def _hypar_base(args: argparse.Namespace, spec):
    """The project the partition is written into or simulated on: --project, or a fresh one on --system."""
    from tilewright.engine.io.presets import load_project_preset, load_system
    from tilewright.engine.plan.checks import raise_for_problems
    from tilewright.engine.search.hypar.compare import base_project

    if not args.project and not args.system:
        flag = "--simulate" if args.simulate else "--write-project"
        raise InputError(COMMAND_LINE, Problem(flag, "needs --system (or --project, a project to start from)"))
    return base_project(
        spec,
        system=load_system(args.system) if args.system else None,
        project=load_project_preset(args.project, check=raise_for_problems) if args.project else None,
        dtype=args.dtype,
        engine=args.engine,
    )


def _write_hypar_project(args: argparse.Namespace, spec, best) -> None:
    from tilewright.engine.io import save_project
    from tilewright.engine.plan.checks import raise_for_problems
    from tilewright.engine.search.hypar.report import apply_partition

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


def register(sub: argparse._SubParsersAction) -> None:
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
    p.add_argument("--quiet", action="store_true", help="no progress on stderr (--simulate's two runs)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_hypar)
