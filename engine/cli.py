"""The ``tilewright`` command: one entry point, subcommands, and one place that turns errors into exit codes."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence

from tilewright.engine.errors import EXIT_BAD_INPUT, InputError

Handler = Callable[[argparse.Namespace], int]


def _cmd_validate(args: argparse.Namespace) -> int:
    from tilewright.engine.validate_file import validate_file

    print(validate_file(args.file, kind=args.kind))
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from pydantic import TypeAdapter
    from tilewright.engine.ir import Component, Project, WorkloadSpec

    kinds = {"project": Project, "system": Component, "model": WorkloadSpec}
    schema = TypeAdapter(kinds[args.kind]).json_schema()
    print(json.dumps(schema, indent=2, sort_keys=True))
    return 0


def _cmd_presets(args: argparse.Namespace) -> int:
    from tilewright.engine.preset_catalog import catalog, format_catalog

    entries = catalog()
    print(json.dumps(entries, indent=2, sort_keys=True) if args.json else format_catalog(entries))
    return 0


def _cmd_import_hf(args: argparse.Namespace) -> int:
    from tilewright.engine.hf_command import import_hf_command

    return import_hf_command(args)


def _cmd_run(args: argparse.Namespace) -> int:
    from tilewright.engine.cli_run import run_command

    return run_command(args)


def _cmd_studio(args: argparse.Namespace) -> int:
    try:
        from tilewright.studio.app import main as studio_main
    except ImportError as exc:  # Qt's system libraries missing, or PySide6 absent
        from tilewright.engine.qt_check import explain_qt_import_error

        print(explain_qt_import_error(exc), file=sys.stderr)
        return 1
    return studio_main(args)


def build_parser() -> argparse.ArgumentParser:
    from tilewright.engine import __version__
    from tilewright.engine.cli_run import add_run_arguments

    parser = argparse.ArgumentParser(
        prog="tilewright",
        description="Design, map and simulate tiled, wafer-scale and multi-chip deep-learning accelerators.",
    )
    parser.add_argument("--version", action="version", version=f"tilewright {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("validate", help="check a project, system or model file")
    p.add_argument("file")
    p.add_argument("--kind", choices=["auto", "project", "system", "model"], default="auto")
    p.set_defaults(handler=_cmd_validate)

    p = sub.add_parser("schema", help="print the JSON Schema of project files")
    p.add_argument("--kind", choices=["project", "system", "model"], default="project")
    p.set_defaults(handler=_cmd_schema)

    p = sub.add_parser("presets", help="list the preset systems, models and projects")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_presets)

    p = sub.add_parser("import-hf", help="turn a Hugging Face config.json into a workload")
    p.add_argument("config")
    p.add_argument("-o", "--output", help="write the workload (or project) here instead of stdout")
    p.add_argument("--system", help="also make a project on this system (name or file)")
    p.add_argument("--name", help="model name (default: from the config or its folder)")
    p.set_defaults(handler=_cmd_import_hf)

    p = sub.add_parser("run", help="simulate one training iteration or an inference request")
    add_run_arguments(p)
    p.set_defaults(handler=_cmd_run)

    p = sub.add_parser("studio", help="open the design studio")
    p.add_argument("project", nargs="?")
    p.add_argument("--run", action="store_true", help="run the simulation after opening")
    p.add_argument("--screenshot", metavar="FILE.png", help="render offscreen, save a PNG and exit")
    p.add_argument("--size", default="1600x1000", metavar="WxH")
    p.add_argument("--presentation", action="store_true", help="full screen, large fonts, editing locked")
    p.set_defaults(handler=_cmd_studio)

    from tilewright.engine.cli_search import register as register_search  # hypar, search, hw-search, map, sweep

    register_search(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except InputError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # an internal fault: say so briefly; the traceback only on request
        if os.environ.get("TILEWRIGHT_DEBUG"):
            raise
        print(
            f"tilewright: internal error: {exc.__class__.__name__}: {exc}\n"
            "(set TILEWRIGHT_DEBUG=1 for the traceback, and please report it)",
            file=sys.stderr,
        )
        return 1


# Headless commands end the process without tearing down the interpreter: freeing a large run's
# timeline and plan object by object costs ~0.15 s of a 2.5 s command, and they hold nothing that
# needs finalizing (files are written and closed before they return). The studio exits normally.
FAST_EXIT_COMMANDS = {"run", "search", "hw-search", "hypar", "map", "sweep", "validate", "schema", "presets"}


def entry() -> None:
    """The ``tilewright`` console script."""
    argv = sys.argv[1:]
    code = main(argv)
    if argv and argv[0] in FAST_EXIT_COMMANDS:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BrokenPipeError:
            pass
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
