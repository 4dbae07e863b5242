"""``tilewright import-onnx``: an ONNX model graph → a ``custom`` workload (``engine.workloads.onnx_import``)."""

from __future__ import annotations

import argparse


def import_onnx_command(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tilewright.engine.cli.common import (
        refuse_file_outputs_at_folders,
        refuse_overwriting_inputs,
        refuse_unreachable_outputs,
    )
    from tilewright.engine.errors import InputError, Problem
    from tilewright.engine.io.atomic import dumps_stable, write_atomic
    from tilewright.engine.results.text import counted
    from tilewright.engine.workloads.hf_config import ConfigError
    from tilewright.engine.workloads.onnx_import import import_onnx

    dims: dict[str, int] = {}
    for item in args.dim:
        key, sep, value = item.partition("=")
        if not sep or not key or not value.isdigit() or int(value) < 1:
            raise InputError(args.model, Problem("--dim", f"{item!r}: expected NAME=VALUE with a positive integer"))
        if dims.get(key, int(value)) != int(value):  # the later one silently won: say which was meant
            raise InputError(args.model, Problem("--dim", f"{key} given twice ({dims[key]} and {value}): give it once"))
        dims[key] = int(value)
    if not Path(args.model).is_file():  # named once, as every command names a missing input
        raise InputError(args.model, "file not found" if not Path(args.model).exists() else "not a file")
    # -o MODEL.onnx would replace the model with its workload; -o below a file fails only at the write
    refuse_overwriting_inputs({"-o": args.output}, [args.model])
    refuse_unreachable_outputs({"-o": args.output})
    refuse_file_outputs_at_folders({"-o": args.output})
    try:
        imported = import_onnx(args.model, name=args.name, dims=dims)
    except ConfigError as exc:
        raise InputError(args.model, Problem("--dim" if exc.field == "dims" else exc.field, exc.reason)) from None
    refuse_unsized_inputs(args.model, imported.unbound_inputs)
    report_dimensions(imported.bound, imported.unbound_inner)
    report_foreign(imported.foreign)
    spec = imported.spec
    text = dumps_stable(spec.model_dump(mode="json"))
    if args.output:
        write_atomic(args.output, text)
        print(f"wrote {args.output} ({counted(len(spec.ops), 'op')} in {counted(len(spec.layer_names), 'layer')})")
    else:
        print(text, end="")
    return 0


def refuse_unsized_inputs(model: str, unbound: dict[str, list[str]]) -> None:
    """A graph input's symbolic dimension (``batch``, ``seq``) that ``--dim`` does not size is refused (exit 2):
    it used to count as 1 with a word only in the workload's comment, and a sequence of 1 token is another
    workload. Every quantity is per sample, so a batch dimension is given as 1 (the run's batch multiplies it)."""
    from tilewright.engine.errors import InputError, Problem

    if not unbound:
        return
    problems = []
    for name, places in sorted(unbound.items()):
        where = ", ".join(places)
        if name:
            problems.append(Problem(where, f"symbolic dimension '{name}' has no value: give --dim {name}=N"))
        else:
            problems.append(Problem(where, "a dimension with neither a size nor a name: export the model with a "
                                           "fixed size there"))
    problems.append(Problem("", "sizes are per sample: give a batch dimension as 1 (e.g. --dim batch=1); the "
                                "run's micro-batch multiplies the workload"))
    raise InputError(model, problems)


def report_dimensions(bound: dict[str, int], inner: dict[str, list[str]]) -> None:
    """Say on stderr what the symbolic dimensions were taken as: the ``--dim`` values, and the dimensions
    shape inference left unsized inside the graph (``unk__N``, counted as 1 per sample; static-shape exports
    have none)."""
    import sys

    if bound:
        print("import-onnx: symbolic dimensions " + ", ".join(f"{k}={v}" for k, v in sorted(bound.items()))
              + " (--dim)", file=sys.stderr)
    if inner:
        shown = [f"{name or '?'} ({places[0]}{', …' if len(places) > 1 else ''})" for name, places in
                 sorted(inner.items())]
        print("import-onnx: warning: dimensions shape inference left unsized inside the graph count as 1 per "
              f"sample: {', '.join(shown)}; size a named one with --dim NAME=N, or export with static shapes",
              file=sys.stderr)


def report_foreign(foreign: dict[str, int]) -> None:
    """Warn on stderr of nodes of another operator set (onnxruntime's ``com.microsoft`` fusions: ``FusedMatMul``,
    ``MatMulNBits``…) that the importer has no rule for: they count as elementwise with 0 FLOPs, so a fused GEMM's
    work is missing from the workload, and the comment alone did not say so."""
    import sys

    from tilewright.engine.results.text import counted
    from tilewright.engine.workloads.onnx_import import foreign_text

    if foreign:
        print(f"import-onnx: warning: {counted(sum(foreign.values()), 'node')} of operators the importer does not "
              f"know count as elementwise with 0 FLOPs: {foreign_text(foreign)}; if any of them multiplies matrices "
              "(onnxruntime's FusedMatMul, MatMulNBits), export the model without onnxruntime's fusions and "
              "quantization to have that work costed", file=sys.stderr)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import-onnx", help="turn an ONNX model graph into a custom workload (needs the onnx extra)")
    p.add_argument("model", metavar="MODEL.onnx")
    p.add_argument("-o", "--output", help="write the workload here instead of stdout")
    p.add_argument("--name", help="workload name (default: the graph's name or the file's)")
    p.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="value of a symbolic dimension, e.g. --dim batch=1 --dim seq=2048: every symbolic dimension of "
        "the graph's inputs needs one (sizes are per sample, so a batch dimension is 1)",
    )
    p.set_defaults(handler=import_onnx_command)
