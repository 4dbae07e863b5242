"""Suite-wide set-up. Qt is touched only if a test imported it, so engine tests stay Qt-free."""

from __future__ import annotations

import sys

import pytest


def pytest_sessionfinish(session, exitstatus):  # noqa: ARG001 - pytest hook signature
    """Let background jobs on Qt's global pool finish while Python is still fully alive: a worker still
    running during interpreter teardown would call into a half-destroyed runtime."""
    if "PySide6.QtCore" not in sys.modules:
        return
    from PySide6.QtCore import QThreadPool

    QThreadPool.globalInstance().waitForDone(30_000)


@pytest.fixture
def make_window(qtbot, tmp_path):
    """A shown main window on ``project``, with its own settings file and a close that never asks;
    ``simulate`` replaces the engine (a test double), the real one otherwise."""
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QMessageBox
    from tilewright.studio.document import ProjectDocument
    from tilewright.studio.ui.main_window import MainWindow

    def make(project, size: tuple[int, int] = (1400, 900), persist: bool = True, simulate=None):
        settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
        window = MainWindow(ProjectDocument(project), settings, persist=persist, simulate=simulate)
        window.ask_save_changes = lambda: QMessageBox.StandardButton.Discard
        qtbot.addWidget(window)
        window.resize(*size)
        window.show()
        qtbot.waitExposed(window)
        return window

    return make
