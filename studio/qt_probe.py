"""Check that Qt can open the studio's window before the studio or the GUI tests start; if not, say why
and name the missing system packages (``engine.cli.qt_check``). Exit 0 when Qt starts, 2 when it cannot.

Importing PySide6 is not enough: Qt loads its platform plugin (``xcb`` on an X11 desktop) when the first
application object starts, and aborts the process when it cannot. So the probe starts one in a child
process, with this environment (the same ``QT_QPA_PLATFORM``), and catches the abort there.
"""

from __future__ import annotations

import sys

from tilewright.engine.cli.qt_check import explain_probe, explain_qt_import_error, probe_qt

EXIT_QT_UNAVAILABLE = 2


def main() -> int:
    try:
        import PySide6.QtGui  # noqa: F401
        import PySide6.QtWidgets  # noqa: F401
    except ImportError as exc:
        print(explain_qt_import_error(exc), file=sys.stderr)
        return EXIT_QT_UNAVAILABLE
    probe = probe_qt()
    if not probe.ok:
        print(explain_probe(probe), file=sys.stderr)
        return EXIT_QT_UNAVAILABLE
    return 0


if __name__ == "__main__":
    sys.exit(main())
