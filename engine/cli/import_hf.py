"""``tilewright import-hf``: a Hugging Face config.json → a workload spec (or a whole project).

With ``--system`` the project gets a mapping that fits: the parallelism search's fast estimator (no event
re-simulation) ranks every tp × pp × dp × micro-batch × recompute × ZeRO mapping on the devices, and the
fastest that fits in memory is written. Without ``--devices`` a growable system (a DGX cluster) grows by
whole nodes until one fits; an explicit ``--devices`` is a fixed budget. The search starts from fused
(flash) attention where the devices have a DRAM of their own (``fused_attention_runs``), so the mapping it
picks is the fused one's. What was chosen goes to stderr and into the project's ``description``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilewright.engine.workloads.graph import WorkloadGraph

# A growable system grows node by node up to this many devices before the import gives up.
MAX_GROWN_DEVICES = 1024
DEFAULT_GLOBAL_BATCH = 64  # sequences per iteration unless --global-batch (or more devices) says otherwise
PROGRESS_EVERY_S = 10.0  # a progress line on stderr at most this often while the mapping search runs


def import_hf_command(args: argparse.Namespace) -> int:
    from tilewright.engine.cli.common import (
        refuse_file_outputs_at_folders,
        refuse_overwriting_inputs,
        refuse_unreachable_outputs,
    )
    from tilewright.engine.errors import InputError, Problem
    from tilewright.engine.io.atomic import dumps_stable, write_atomic
    from tilewright.engine.io.json_file import read_json, require_object
    from tilewright.engine.plan.budget import MAX_LAYERS, layer_count
    from tilewright.engine.workloads import build_workload, import_hf_config
    from tilewright.engine.workloads.hf_config import DEFAULTED
    from tilewright.engine.workloads.hf_import import MAX_SEQ_LEN, ConfigError, default_name

    if not args.system:
        for flag, value in (("--devices", args.devices), ("--global-batch", args.global_batch)):
            if value is not None:
                raise InputError(args.config, Problem(flag, "only means something with --system"))
    for flag, value in (("--devices", args.devices), ("--global-batch", args.global_batch),
                        ("--seq-len", args.seq_len)):
        if value is not None and value < 1:
            raise InputError(args.config, Problem(flag, f"{value} must be at least 1"))
    if Path(args.config).is_dir():  # a model folder holding config.json, as import_hf_config takes
        args.config = str(Path(args.config) / "config.json")
    refuse_overwriting_inputs({"-o": args.output}, [args.config, args.system])
    refuse_unreachable_outputs({"-o": args.output})  # before the mapping search, not at the write after it
    refuse_file_outputs_at_folders({"-o": args.output})
    data = require_object(read_json(args.config), args.config)
    name = args.name or default_name(data, Path(args.config).resolve())
    try:
        spec = import_hf_config(data, source_name=str(name), seq_len=args.seq_len, mtp=args.mtp)
    except ConfigError as exc:
        raise InputError(args.config, Problem(exc.field, exc.reason)) from None
    seq = getattr(spec, "seq_len", None)
    if seq is not None:
        how = ("as asked" if args.seq_len is not None
               else f"a default, capped at {MAX_SEQ_LEN}: the config sets no context limit (max_position_embeddings "
                    "or its family's key); --seq-len sets it" if DEFAULTED in spec.comment
               else f"the config's context limit, capped at {MAX_SEQ_LEN}; --seq-len sets it")
        print(f"import-hf: seq_len {seq} ({how})", file=sys.stderr)
    notes = spec.comment.split("; ")[2:]  # after "Imported from …" and the family's seq_len note (hf_import)
    if notes:  # what the spec approximates or leaves out, said where the user looks, not only in the file
        print(f"import-hf: notes: {'; '.join(notes)}", file=sys.stderr)
    out = spec.model_dump(mode="json")
    if args.system:  # says the size once its budget check has passed (``_project_around``)
        out = _project_around(spec, args.system, args.devices, args.global_batch, args.config, args.allow_large,
                              quiet=args.quiet)
    elif args.allow_large or layer_count(spec) <= MAX_LAYERS:  # past the limit a graph takes minutes to build
        _say_size(spec, build_workload(spec))
    text = dumps_stable(out)
    if args.output:
        write_atomic(args.output, text)
        print(f"wrote {args.output}")
    else:
        print(text, end="")
    return 0


def _say_size(spec, graph: WorkloadGraph) -> None:
    """The imported model's size on stderr, to check against its model card: blocks, parameters, and for a
    mixture of experts those one token passes through."""
    from tilewright.engine.cli.model_size import size_text

    print(f"import-hf: '{spec.name}': {size_text(graph)}", file=sys.stderr)


def _project_around(spec, system: str, devices: int | None, global_batch: int | None, source: str,
                    allow_large: bool = False, quiet: bool = False) -> dict:
    """The project of ``spec`` on ``system`` with the fastest mapping that fits (see the module doc). The search
    may take minutes (a large MoE model on a thousand devices): what it does is said on stderr first, then a
    progress line every ``PROGRESS_EVERY_S`` whether or not stderr is a terminal (``--quiet``: none)."""
    from tilewright.engine.cli.progress import ProgressPrinter
    from tilewright.engine.cli.run import FUSED_ATTENTION
    from tilewright.engine.errors import InputError, Problem
    from tilewright.engine.hardware.grow import grow
    from tilewright.engine.io.presets import load_system
    from tilewright.engine.ir.mapping import Mapping
    from tilewright.engine.ir.project import Project
    from tilewright.engine.plan.budget import check_search_budget
    from tilewright.engine.search.parallel.extended import first_stage_only
    from tilewright.engine.search.parallel.report import sharding_text
    from tilewright.engine.search.parallel.search import search
    from tilewright.engine.workloads import build_workload

    hw = load_system(system)
    holds = hw.device_count()
    project = Project(name=spec.name or "imported model", hardware=hw, workload=spec)
    # the size limits before anything is built: a model past them is refused at once, not after its graph
    check_search_budget(project, devices if devices is not None else holds, source, command="import-hf",
                        allow_large=allow_large)
    graph = build_workload(spec)  # once: the fusion check, every search below and the no-fit message share it
    _say_size(spec, graph)
    fused = fused_attention_runs(hw, graph)
    # the mapping the search starts from: its fusion is searched with, so the fastest mapping is the fused one's
    project = project.model_copy(update={"mapping": Mapping(fusion=[FUSED_ATTENTION] if fused else [])})
    growable = grow(hw, holds + 1).device_count() > holds
    if devices is not None and devices > holds and not growable:
        raise InputError(source, Problem("--devices", f"{devices}: {hw.name} holds {holds} and cannot grow"))
    n = devices if devices is not None else holds
    while True:
        batch = global_batch if global_batch is not None else max(DEFAULT_GLOBAL_BATCH, n)
        # the fast estimator's space only: a grown system is searched once per size (ep, cp, ZeRO-3 and
        # offload plan each candidate, too slow to repeat; ``tilewright search`` explores them)
        if not quiet:
            print(f"import-hf: searching the mappings of '{project.name}' on {n:,} devices of {hw.name} (global "
                  f"batch {batch:,}); a large model on many devices takes minutes", file=sys.stderr, flush=True)
        with ProgressPrinter(not quiet, every_s=PROGRESS_EVERY_S) as progress:
            result = search(project, n, batch, top=0, keep=1, resimulate=False, extensions=first_stage_only(),
                            workload=graph, progress=progress)
        if result.ranked:
            break
        if devices is not None or not growable or n >= MAX_GROWN_DEVICES:
            raise InputError(source, Problem("--devices", _no_fit(project, graph, n, batch, devices is not None,
                                                                   growable)))
        n = min(grow(hw, n + 1).device_count(), MAX_GROWN_DEVICES)
    if getattr(spec, "moe", None) is not None:  # experts: the second stage (expert parallelism), once, at this size
        if not quiet:
            print(f"import-hf: searching expert parallelism on {n:,} devices (the second stage)", file=sys.stderr,
                  flush=True)
        with ProgressPrinter(not quiet, every_s=PROGRESS_EVERY_S) as progress:
            full = search(project, n, batch, top=0, keep=1, resimulate=False, workload=graph, progress=progress)
        if full.ranked and full.ranked[0].iteration_time_s < result.ranked[0].iteration_time_s:
            result = full
    best = result.ranked[0]
    c = best.candidate
    mapping = c.mapping(batch, project.mapping)
    seq = getattr(spec, "seq_len", None)
    why = ("as asked" if devices is not None else
           f"what {hw.name} holds" if n == holds else f"the fewest whole nodes of {hw.name} that fit")
    text = (
        f"Mapping chosen by import-hf with the parallelism search's estimator: {c.devices} of {n} devices "
        f"({why}), tp {c.tp} pp {c.pp} dp {c.dp}, micro-batch {c.micro_batch} of global batch {batch}"
        + (f", interleave {c.interleave}" if c.interleave > 1 else "")
        + f", recompute {c.recompute.value}"
        + (", sequence parallel" if c.sequence_parallel else "")
        + (f", ZeRO-{c.zero}" if c.zero else "")
        + (f", {sharding_text(c)}" if sharding_text(c) != "-" else "")
        + (f", seq_len {seq}" if seq is not None else "")
        + (", fused (flash) attention: mapping.fusion attention → softmax" if fused else
           f", unfused attention (mapping.fusion empty): {_unfused_why(hw, graph)}")
        + f"; predicted iteration {best.iteration_time_s:.3f} s, peak memory "
        f"{best.peak_memory_bytes / 2**30:.1f} GiB per device."
    )
    print(f"import-hf: {text}", file=sys.stderr)
    project = project.model_copy(update={"mapping": mapping, "description": text})
    return project.model_dump(mode="json")


def fused_attention_runs(hw, graph: WorkloadGraph) -> bool:
    """Whether an imported model trains with fused (flash) attention on ``hw``: the fusion chain attention →
    softmax where the devices have a DRAM of their own (GPUs run FlashAttention or cuDNN's fused kernel, as
    every modern framework and the shipped Mixtral preset do; TPUs fuse it with XLA, as the TPU v4 preset
    does; Tenstorrent grids run tt-metal's SDPA kernel), and the model has such a chain. SRAM-only tiles
    (a chiplet mesh, a wafer) keep the unfused default, as their presets do: the designs they reproduce
    (Simba, PALM) run attention op by op, and the ``--attention`` or ``mapping.fusion`` of a run can say
    otherwise."""
    from tilewright.engine.ir.hardware import MemoryKind

    device = next((c for _, c in hw.walk() if c.compute is not None), None)
    if device is None or all(m.kind is MemoryKind.sram for m in device.memories):
        return False
    return _has_attention_chain(graph)


def _has_attention_chain(graph: WorkloadGraph) -> bool:
    from tilewright.engine.cli.run import FUSED_ATTENTION
    from tilewright.engine.plan.passes import local_name

    for layer in graph.layers:
        names = [local_name(op) for op in graph.layer_ops(layer.index)]
        if any(names[i : i + 2] == FUSED_ATTENTION for i in range(len(names) - 1)):
            return True
    return False


def _unfused_why(hw, graph: WorkloadGraph) -> str:
    if not _has_attention_chain(graph):
        return "the model has no attention → softmax chain"
    return (f"{hw.name}'s devices are SRAM-only tiles, whose presets run attention op by op; "
            "tilewright run --attention fused tries the fused kernel")


def _no_fit(project, workload: WorkloadGraph, devices: int, batch: int, fixed: bool, growable: bool) -> str:
    from tilewright.engine.hardware import elaborate
    from tilewright.engine.search.parallel.estimate import Estimator

    capacity = Estimator(project, elaborate(project.hardware, devices_needed=devices), workload).capacity
    seq = getattr(project.workload, "seq_len", None)
    what = (f"{workload.params / 1e9:.1f} B parameters" + (f", seq_len {seq}" if seq is not None else "")
            + f", global batch {batch}")
    why = "as --devices asked" if fixed else f"grown to the limit of {MAX_GROWN_DEVICES}" if growable else ""
    if not growable:
        why = f"{why}, and it cannot grow" if why else "it cannot grow"
    return (f"no mapping of the model ({what}) fits in memory on {devices} device(s) of {project.hardware.name} "
            f"({capacity / 2**30:.0f} GiB each; {why}); try more --devices, a shorter --seq-len or a larger system")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import-hf", help="turn a Hugging Face config.json into a workload (or a project that fits)")
    p.add_argument("config", help="a config.json, or the folder holding one")
    p.add_argument("-o", "--output", help="write the workload (or project) here instead of stdout")
    p.add_argument("--system", help="also make a project on this system (name or file), mapped to fit in memory")
    p.add_argument("--name", help="model name (default: from the config or its folder)")
    p.add_argument("--seq-len", type=int, metavar="N",
                   help="sequence length (default: the config's max_position_embeddings, capped at 4096)")
    p.add_argument("--devices", type=int, metavar="N",
                   help="devices to map onto (default: what the system holds; a growable one grows by whole "
                        "nodes until the model fits)")
    p.add_argument("--global-batch", type=int, metavar="B",
                   help=f"sequences per iteration (default: {DEFAULT_GLOBAL_BATCH}, or the devices if more)")
    p.add_argument("--allow-large", action="store_true",
                   help="map even past the size limits (devices, layers) that a run has")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr while --system's mapping is searched")
    p.add_argument("--mtp", action="store_true",
                   help="keep the config's multi-token-prediction layers (num_nextn_predict_layers) for training; "
                        "left out by default, as Hugging Face's model skips them")
    p.set_defaults(handler=import_hf_command)
