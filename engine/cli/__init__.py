"""The ``tilewright`` command line: one module per command, one dispatcher that turns errors into exit codes.

``entry`` is the console script, ``main`` the callable form (tests, the frozen launcher), ``build_parser`` the
parser the launcher reads the command names from.
"""

from tilewright.engine.cli.dispatch import build_parser, entry, main

__all__ = ["build_parser", "entry", "main"]
