"""``tilewright search``: the fastest tp/pp/dp/micro-batch/… mapping of a model on a system."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tilewright.engine.cli.common import COMMAND_LINE, print_result, require_positive
from tilewright.engine.cli.idle_flags import refuse_idle_search_flags
from tilewright.engine.cli.optimizer_flags import add_optimizer_arguments, apply_optimizer_flags
from tilewright.engine.cli.run import (
    DIM_FLAGS,
    add_fp8_bf16_layers_argument,
    add_model_variant_arguments,
    fp8_bf16_layers,
)
from tilewright.engine.errors import InputError, Problem

# What a project's mapping says besides the parallelism the search chooses: how each op is costed (tensor
# formats, fidelity, spatial split over a grid device's cores, fusion), where state lives, and the training
# recipe's number formats the parallelism does not decide (the gradient buffer's, Adam's moments' and master copy's,
# fp8 weights gathered in fp8: a candidate without a sharded optimizer drops the last three, ``Candidate.mapping``),
# how a tp-overlapping candidate hides its forward reduce-scatters (the recipe's userbuffers configuration), and
# whose FSDP a ZeRO-3/FSDP candidate runs (PyTorch FSDP2's copies, ``mapping.fsdp_copies``: ``Candidate.mapping``
# keeps them where weights are gathered).
KEPT_MAPPING_FIELDS = ("formats", "fidelity", "spatial", "fusion", "memory_levels", "grad_reduce_in_fp32",
                       "optimizer_moments", "optimizer_master", "fp8_param_gather", "tp_overlap_reduce_scatter",
                       "fsdp_copies")


def search_template(args: argparse.Namespace):
    """The project whose hardware, workload and run settings the search maps (of its mapping only the
    ``KEPT_MAPPING_FIELDS``: the search chooses the rest), the devices available and the global batch."""
    from tilewright.engine.cli.flag_blame import FlagEdits
    from tilewright.engine.cli.run import model_data
    from tilewright.engine.io.json_file import read_json, require_object
    from tilewright.engine.io.migrate import migrate
    from tilewright.engine.io.presets import load_system, resolve
    from tilewright.engine.io.project_file import project_from_data

    source = args.project or COMMAND_LINE
    base: dict[str, Any] = {}
    if args.project:
        path = str(resolve("projects", args.project))
        base = migrate(require_object(read_json(path), path), path)
        source = path
    data: dict[str, Any] = dict(base)
    data.setdefault("name", "search")
    if args.system or "hardware" not in data:
        data["hardware"] = load_system(args.system or "dgx-a100").model_dump(mode="json")
    dims = any(getattr(args, d) is not None for d in DIM_FLAGS)
    if args.model or dims or "workload" not in data:
        if not args.model and not dims:
            raise InputError(COMMAND_LINE, Problem("--model", "required (a preset, a file, or 'gpt' with --layers …)"))
        data["workload"] = model_data(args, base.get("workload"))
    run = dict(data.get("run") or {})
    if args.dtype:
        run["dtype"] = args.dtype
    data["run"] = run
    data["mapping"] = {k: v for k, v in (base.get("mapping") or {}).items() if k in KEPT_MAPPING_FIELDS}
    apply_optimizer_flags(args, data["mapping"], run)  # a recipe's optimizer flags, as `run` takes them
    if getattr(args, "fsdp_copies", None):  # refused where no candidate gathers weights (``_refuse_idle_copies``)
        data["mapping"]["fsdp_copies"] = True
    if (edge := fp8_bf16_layers(args, data["mapping"].get("formats"))) is not None:  # bf16 edge layers
        data["mapping"]["formats"] = edge
    base_mapping = project_from_data(base, source).mapping if base else None  # the file's own faults first
    edits = FlagEdits(args, source, {**base, "mapping": {k: v for k, v in (base.get("mapping") or {}).items()
                                                         if k in KEPT_MAPPING_FIELDS}})
    edits.after_flags(data)
    with edits.blamed():  # a value a flag gave is refused naming the flag, not the file (flag_blame)
        project = project_from_data(data, source)
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
    from tilewright.engine.cli.progress import ProgressPrinter
    from tilewright.engine.errors import EXIT_OUT_OF_MEMORY
    from tilewright.engine.plan.budget import check_search_budget
    from tilewright.engine.search.parallel.ranking import result_json
    from tilewright.engine.search.parallel.report import search_text
    from tilewright.engine.search.parallel.search import search

    project, devices, batch = search_template(args)
    require_positive("--top", args.top)
    require_positive("--list", args.list)  # 0 printed one row anyway (the best is always reported)
    require_positive("--devices", devices)
    require_positive("--global-batch", batch)
    refuse_idle_search_flags(args, project, devices)  # lists naming what the model cannot use
    _refuse_idle_copies(args)
    check_search_budget(project, devices, args.project or COMMAND_LINE, command="search",
                        allow_large=args.allow_large)
    with ProgressPrinter(not args.quiet) as progress:
        result = search(
            project,
            devices,
            batch,
            top=args.top,
            keep=max(args.list, args.top),
            resimulate=args.top > 0 and not args.no_simulate,
            progress=progress,
            narrow=_narrowing(args),
        )
    print_result(result_json(result), args.json, search_text(result))
    if not result.ranked:
        print("tilewright search: no mapping fits in memory", file=sys.stderr)
        return EXIT_OUT_OF_MEMORY
    return 0


def _refuse_idle_copies(args: argparse.Namespace) -> None:
    """``--fsdp-copies`` prices PyTorch FSDP2's copies around each layer's weight all-gather and gradient
    reduce-scatter (``plan.sharding``); only ZeRO-3 and FSDP candidates gather weights, so with ``--zero`` naming
    neither every candidate would rank as without the flag: refused (exit 2), as ``run`` refuses it below ZeRO-3."""
    from tilewright.engine.search.parallel.extended import ZERO_CHOICES

    if not getattr(args, "fsdp_copies", None) or args.zero is None:
        return
    chosen = {v.strip() for v in args.zero.split(",") if v.strip()}
    if chosen and chosen <= set(ZERO_CHOICES) and not chosen & {"3", "fsdp"}:  # a bad list is the narrowing's to refuse
        raise InputError(COMMAND_LINE, Problem("--fsdp-copies", f"prices FSDP2's copies around the per-layer weight "
                                               f"gathers, and --zero {args.zero} tries no candidate that gathers "
                                               "weights (add 3 or fsdp to --zero, or leave the flag out)"))


def _narrowing(args: argparse.Namespace) -> dict:
    """The second stage's space as the flags narrow it (``extended.default_extensions``' keywords)."""
    from tilewright.engine.search.parallel.narrowing import narrowing

    return narrowing(COMMAND_LINE, ep=args.ep, cp=args.cp, zero=args.zero, ep_dispatcher=args.ep_dispatcher,
                     recompute_modules=args.recompute_modules, offload=not args.no_offload,
                     overlap=not args.no_overlap)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help="find the fastest tp/pp/dp/micro-batch/… mapping of a model on a system")
    p.add_argument("project", nargs="?", metavar="PROJECT.json", help="take system, model and run settings from here")
    p.add_argument("--system", metavar="NAME|FILE")
    p.add_argument("--model", metavar="NAME|FILE", help="a preset, a file, or 'gpt' built from the dims")
    for dim in DIM_FLAGS:
        p.add_argument(f"--{dim.replace('_', '-')}", dest=dim, type=int, metavar="N")
    add_model_variant_arguments(p)
    p.add_argument("--devices", type=int, metavar="N", help="devices available (a mapping may use fewer)")
    p.add_argument("--global-batch", type=int, metavar="B")
    p.add_argument("--allow-large", action="store_true",
                   help="search even past the size limits (devices, layers) that a run has")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16", "fp8"])
    add_fp8_bf16_layers_argument(p)
    add_optimizer_arguments(p, gather=False)
    p.add_argument("--top", type=int, default=3, metavar="K", help="re-simulate the best K on the event engine")
    p.add_argument("--list", type=int, default=10, metavar="N", help="candidates to print (default 10)")
    p.add_argument("--no-simulate", action="store_true", help="rank with the fast evaluator only")
    g = p.add_argument_group(
        "second stage (default: ep for MoE models, cp from 8k tokens, ZeRO 0-3, FSDP, offload, overlapped "
        "gradient reduction)"
    )
    g.add_argument("--ep", metavar="LIST", help="expert-parallel sizes to try, e.g. 1,2,4,8")
    g.add_argument("--cp", metavar="LIST", help="context-parallel sizes to try, e.g. 1,2,4")
    g.add_argument("--zero", metavar="LIST", help="ZeRO stages to try: 0,1,2,3 and fsdp")
    g.add_argument("--fsdp-copies", action="store_true", default=None,
                   help="ZeRO-3/FSDP candidates run PyTorch FSDP2 (fully_shard): each layer's gathered weights "
                   "copied out of the all-gather buffer and its gradients copied into the reduce-scatter buffer on "
                   "the compute stream (mapping.fsdp_copies); default: flat buffers the layers view (Megatron-FSDP)")
    g.add_argument("--ep-dispatcher", metavar="LIST",
                   help="MoE token exchanges to try: alltoall (flat) and deepep (node by node); default both")
    g.add_argument("--recompute-modules", metavar="LISTS",
                   help="selective-recomputation module lists to try, ';' between lists, e.g. "
                        "'core_attn,mlp;core_attn,layernorm,moe_act', or 'none' (default: Megatron-Core's "
                        "recipes the model has)")
    g.add_argument("--no-offload", action="store_true", help="never put the optimizer in host memory")
    g.add_argument("--no-overlap", action="store_true",
                   help="never try overlapping communication with compute (gradient reduction, expert all-to-all)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_search)
