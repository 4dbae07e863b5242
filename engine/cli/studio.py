"""``tilewright studio``: open the design studio, the one command that imports Qt (lazily)."""

from __future__ import annotations

import argparse
import sys


def _cmd_studio(args: argparse.Namespace) -> int:
    try:
        from tilewright.studio.app import main as studio_main
    except ImportError as exc:  # Qt's system libraries missing, or PySide6 absent
        from tilewright.engine.cli.qt_check import explain_qt_import_error

        print(explain_qt_import_error(exc), file=sys.stderr)
        return 1
    return studio_main(args)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("studio", help="open the design studio")
    p.add_argument("project", nargs="?", metavar="PROJECT", help="a project file, or a preset project's name")
    p.add_argument("--run", action="store_true", help="run the simulation after opening")
    p.add_argument(
        "--screenshot", metavar="FILE.png",
        help="render offscreen, save an image in the format its suffix names (.png, .jpg, .bmp, .webp…) and exit",
    )
    p.add_argument("--size", default="1600x1000", metavar="WxH")
    p.add_argument("--presentation", action="store_true", help="full screen, large fonts, editing locked")
    p.add_argument(
        "--allow-large",
        action="store_true",
        help="open and run projects past the size limits without asking (Run ▸ Allow Large Runs)",
    )
    p.set_defaults(handler=_cmd_studio)
