"""Entry point of the packaged app: ``tilewright`` as on the command line, the studio by default.

Launched from a desktop menu (no arguments) or by opening a project file (one path argument), the
bundle should open the studio, not print the command-line usage; any known command (``run``,
``validate``, ``studio`` …) or option is passed to ``tilewright.engine.cli.main`` unchanged.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

PASS_THROUGH = ("-h", "--help", "--version")


def commands() -> set[str]:
    """The command names ``tilewright.engine.cli`` knows, read from its parser (so new commands need no edit here)."""
    from tilewright.engine.cli import build_parser

    for action in build_parser()._actions:  # noqa: SLF001 - argparse keeps subcommands here only
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return set(action.choices)
    return set()


def launch_args(argv: Sequence[str]) -> list[str]:
    """``argv`` for ``tilewright.engine.cli.main``: the studio when no command was given."""
    args = list(argv)
    if args and (args[0] in PASS_THROUGH or args[0] in commands()):
        return args
    return ["studio", *args]


def main() -> int:
    from tilewright.engine.cli import main as cli_main

    return cli_main(launch_args(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
