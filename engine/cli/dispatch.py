"""The ``tilewright`` parser and dispatcher: each command module registers its subcommand, and ``main`` is the
one place that turns errors into exit statuses."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable, Sequence

from tilewright.engine.errors import EXIT_BAD_INPUT, InputError

Handler = Callable[[argparse.Namespace], int]

# Headless commands end the process without tearing down the interpreter: freeing a large run's
# timeline and plan object by object costs ~0.15 s of a 2.5 s command, and they hold nothing that
# needs finalizing (files are written and closed before they return). The studio exits normally.
FAST_EXIT_COMMANDS = {"run", "search", "hw-search", "hypar", "map", "sweep", "validate", "schema", "presets"}


def build_parser() -> argparse.ArgumentParser:
    """Every command, in the order ``--help`` lists them. Command modules import the engine lazily, in their
    handlers, so ``tilewright --help`` stays fast and one missing optional dependency breaks no other command."""
    from tilewright.engine import __version__
    from tilewright.engine.cli import (
        catalog,
        hw_search,
        hypar,
        import_hf,
        import_onnx,
        multilevel,
        run,
        search,
        serve,
        studio,
        sweep,
        validate,
    )

    parser = argparse.ArgumentParser(
        prog="tilewright",
        description="Design, map and simulate tiled, wafer-scale and multi-chip deep-learning accelerators.",
    )
    parser.add_argument("--version", action="version", version=f"tilewright {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands = (validate, catalog, import_hf, import_onnx, run, serve, studio, hypar, search, hw_search, multilevel)
    for module in (*commands, sweep):
        module.register(sub)
    for name, command in sub.choices.items():  # each command's own parser, to report its own usage
        command.set_defaults(command_parser=command)
        command.prog = f"tilewright {name}"
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # the command's usage, not the top level's: the flag is wrong for this command (exits 2)
        own: argparse.ArgumentParser = getattr(args, "command_parser", parser)
        own.error(f"unrecognized arguments: {' '.join(extra)}")
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
    except OSError as exc:  # a user's path: read-only, full disk, a directory, missing — their input, not our fault
        where = exc.filename if exc.filename is not None else "tilewright"
        print(f"{where}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemoryError:
        print("tilewright: ran out of memory; the run is too large for this machine", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # an internal fault: say so briefly; the traceback only on request
        if os.environ.get("TILEWRIGHT_DEBUG"):
            raise
        print(
            f"tilewright: internal error: {exc.__class__.__name__}: {exc}\n"
            "(set TILEWRIGHT_DEBUG=1 for the traceback, and please report it)",
            file=sys.stderr,
        )
        return 1


def entry() -> None:
    """The ``tilewright`` console script."""
    argv = sys.argv[1:]
    if argv and argv[0] == "run":
        # One simulation, then os._exit: ``run_command`` switches the cyclic collector off for the run and
        # back on at its end, where the first allocation made it scan everything the run allocated (0.1-0.3 s
        # of a large run) just before the process ends. Off from the start, it also skips the imports' scans.
        gc.disable()
    code = main(argv)
    if argv and argv[0] in FAST_EXIT_COMMANDS:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BrokenPipeError:
            pass
        os._exit(code)
    sys.exit(code)
