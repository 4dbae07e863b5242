"""The serving view (Run ▸ Serve…): serving simulations of the open project on a worker, with progress
and Cancel as a run has, and their latency, goodput, KV-cache and per-request views.

``serving_action(window)`` is the menu entry; ``show_serving(window)`` opens (or raises) the window, a
child of the main window that reads the project when Serve is pressed."""

from __future__ import annotations

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QWidget
from tilewright.studio.ui.serving.window import ServingWindow

__all__ = ["ServingWindow", "serving_action", "show_serving"]


def show_serving(window: QWidget) -> ServingWindow:
    """The serving window of ``window`` (a ``MainWindow``), opened if none is, shown and raised."""
    serving = next((c for c in window.findChildren(ServingWindow) if not c.released), None)
    if serving is None:
        serving = ServingWindow(lambda: window.doc.project, parent=window)
    serving.show()
    serving.raise_()
    serving.activateWindow()
    return serving


def serving_action(window: QWidget) -> QAction:
    action = QAction("&Serve…", window)
    tip = "simulate serving: requests arriving at a rate, continuous batching, TTFT/TPOT and KV cache"
    action.setStatusTip(tip)
    action.setToolTip(tip)
    action.triggered.connect(lambda _checked=False: show_serving(window))
    return action
