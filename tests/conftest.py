"""Suite-wide set-up. Qt is touched only if a test imported it, so engine tests stay Qt-free."""

from __future__ import annotations

import sys


def pytest_sessionfinish(session, exitstatus):  # noqa: ARG001 - pytest hook signature
    """Let background jobs finish and delete top-level windows while Qt and Python are both alive.

    Without this, workers still running on the global thread pool, or windows left for the interpreter
    to destroy, can crash CPython during its final teardown (after every test has passed)."""
    if "PySide6.QtWidgets" not in sys.modules:
        return
    from PySide6.QtCore import QCoreApplication, QEvent, QThreadPool
    from PySide6.QtWidgets import QApplication

    QThreadPool.globalInstance().waitForDone(10_000)
    app = QApplication.instance()
    if app is None:
        return
    for widget in app.topLevelWidgets():
        widget.close()
        widget.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    app.processEvents()
