"""``tilewright hw-search``: accelerator designs for training a model under area and power budgets (WHAM)."""

from __future__ import annotations

import argparse

from tilewright.engine.cli.common import COMMAND_LINE, finite_float, print_result


def _cmd_hw_search(args: argparse.Namespace) -> int:
    from tilewright.engine.cli.progress import ProgressPrinter
    from tilewright.engine.io.presets import load_model
    from tilewright.engine.ir.common import dtype_bytes
    from tilewright.engine.search.hardware.search import hw_result_json, hw_result_text, search_hardware
    from tilewright.engine.workloads import build_workload

    workload = build_workload(load_model(args.model))
    _refuse_tp_split(workload, args.tp)
    with ProgressPrinter(not args.quiet) as progress:
        result = search_hardware(
            workload, area_mm2=args.area_mm2, power_w=args.power_w, pp=args.pp, tp=args.tp,
            micro_batch=args.micro_batch, elem_bytes=dtype_bytes(args.dtype), top=args.top,
            link_bandwidth=args.link_gbps * 1e9, progress=progress,
        )
    print_result(hw_result_json(result), args.json, hw_result_text(result))
    return 0


def _refuse_tp_split(workload, tp: int) -> None:
    """A tp the model's heads, key/value heads or MLP cannot be split by, refused as ``run`` refuses it (the
    project checks' own rule, ``plan.checks``): the search priced 3 chips of a third of 16 heads each."""
    from tilewright.engine.errors import InputError, Problem
    from tilewright.engine.ir import Mapping
    from tilewright.engine.plan.checks import _transformer_checks

    if tp <= 1 or workload.dims is None:
        return
    problems = [p for p in _transformer_checks(workload.dims, Mapping(tp=tp)) if p.path == "mapping.tp"]
    if problems:
        raise InputError(COMMAND_LINE, Problem("--tp", "; ".join(p.reason for p in problems)))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hw-search", help="search accelerator designs for training under area and power budgets")
    p.add_argument("--model", required=True, metavar="NAME|FILE")
    p.add_argument("--area-mm2", type=finite_float, required=True, metavar="A", help="die area budget per chip")
    p.add_argument("--power-w", type=finite_float, required=True, metavar="P", help="TDP budget per chip")
    p.add_argument("--top", type=int, default=5, metavar="K", help="designs kept per stage (default 5)")
    p.add_argument("--pp", type=int, default=1, metavar="N", help="pipeline stages, one design each")
    p.add_argument("--tp", type=int, default=1, metavar="N", help="tensor-parallel chips per stage")
    p.add_argument("--micro-batch", type=int, default=1, metavar="N")
    p.add_argument("--dtype", default="bf16", choices=["fp32", "bf16", "fp16", "fp8"])
    p.add_argument("--link-gbps", type=finite_float, default=300.0, metavar="GB/S", help="chip-to-chip bandwidth (tp)")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_hw_search)
