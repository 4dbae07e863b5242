"""Suite-wide set-up. Qt is touched only if a test imported it, so engine tests stay Qt-free."""

from __future__ import annotations

import sys


def pytest_sessionfinish(session, exitstatus):  # noqa: ARG001 - pytest hook signature
    """Let background jobs on Qt's global pool finish while Python is still fully alive: a worker still
    running during interpreter teardown would call into a half-destroyed runtime."""
    if "PySide6.QtCore" not in sys.modules:
        return
    from PySide6.QtCore import QThreadPool

    QThreadPool.globalInstance().waitForDone(30_000)
