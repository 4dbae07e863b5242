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
    from tilewright.engine.workloads.hf_config import ConfigError
    from tilewright.engine.workloads.onnx_import import import_onnx_model

    dims: dict[str, int] = {}
    for item in args.dim:
        key, sep, value = item.partition("=")
        if not sep or not key or not value.isdigit() or int(value) < 1:
            raise InputError(args.model, Problem("--dim", f"{item!r}: expected NAME=VALUE with a positive integer"))
        dims[key] = int(value)
    if not Path(args.model).is_file():  # named once, as every command names a missing input
        raise InputError(args.model, "file not found" if not Path(args.model).exists() else "not a file")
    # -o MODEL.onnx would replace the model with its workload; -o below a file fails only at the write
    refuse_overwriting_inputs({"-o": args.output}, [args.model])
    refuse_unreachable_outputs({"-o": args.output})
    refuse_file_outputs_at_folders({"-o": args.output})
    try:
        spec = import_onnx_model(args.model, name=args.name, dims=dims)
    except ConfigError as exc:
        raise InputError(args.model, Problem("--dim" if exc.field == "dims" else exc.field, exc.reason)) from None
    text = dumps_stable(spec.model_dump(mode="json"))
    if args.output:
        write_atomic(args.output, text)
        print(f"wrote {args.output} ({len(spec.ops)} ops in {len(spec.layer_names)} layers)")
    else:
        print(text, end="")
    return 0


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
        help="value of a symbolic dimension, e.g. --dim seq=2048 (others count as 1 per sample)",
    )
    p.set_defaults(handler=import_onnx_command)
