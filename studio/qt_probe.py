"""Check that Qt can load before the studio or the GUI tests start; name the missing system packages if not."""

from __future__ import annotations

import sys


def main() -> int:
    try:
        import PySide6.QtGui  # noqa: F401
        import PySide6.QtWidgets  # noqa: F401
    except ImportError as exc:
        from tilewright.engine.cli.qt_check import explain_qt_import_error

        print(explain_qt_import_error(exc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
