"""File ▸ Export: the canvas or hardware (the window's own export), the project as JSON, and the last run's
plots (PNG, SVG), CSV tables and Chrome trace.

Result exports stay disabled until a run finished. Paths are asked through small methods (the window's
``ask_save_path``, ``ask_folder`` here) so tests can answer them instead of clicking through dialogs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog, QMenu
from tilewright.engine.errors import InputError
from tilewright.engine.results.result import Result
from tilewright.studio import exporting

if TYPE_CHECKING:
    from tilewright.studio.ui.main_window import MainWindow

JSON_FILTER = "JSON (*.json);;All files (*)"


class ResultExports(QObject):
    def __init__(self, window: MainWindow, canvas_action: QAction):
        super().__init__(window)
        self.window = window
        self.menu = QMenu("&Export", window)
        canvas_action.setText("&Canvas image or system JSON…")
        self.menu.addAction(canvas_action)
        self.project = self._add("&Project JSON…", self.export_project, "a copy of the project file")
        self.menu.addSeparator()
        self.png = self._add("Plots as P&NG…", lambda: self.export_plots("png"), "every result plot, 1600 × 900 px")
        self.svg = self._add("Plots as S&VG…", lambda: self.export_plots("svg"), "every result plot, as vectors")
        self.csv = self._add(
            "Metrics and timelines as &CSV…", self.export_csv, "metrics.csv, timeline.csv, links.csv, memory.csv"
        )
        self.trace = self._add(
            "Chrome &trace (Perfetto)…", self.export_trace, "open in ui.perfetto.dev or chrome://tracing"
        )
        self.result_actions = [self.png, self.svg, self.csv, self.trace]
        for action in self.result_actions:
            action.setEnabled(False)
        window.runner.recorded.connect(lambda _record: self.enable_results(True))

    def _add(self, text: str, slot: Callable[[], Any], tip: str) -> QAction:
        action = self.menu.addAction(text)
        action.setStatusTip(tip)
        action.triggered.connect(lambda _checked=False: slot())
        return action

    def enable_results(self, on: bool) -> None:
        """A run finished (on), or the project it ran was replaced by another (off: nothing of this one to export)."""
        for action in self.result_actions:
            action.setEnabled(on)

    def ask_folder(self, title: str) -> str | None:
        return QFileDialog.getExistingDirectory(self.window, title, self.window._dialog_dir()) or None

    def _result(self) -> Result | None:
        record = self.window.results.record
        if record is None:
            self.window.show_message("nothing to export yet: run the project first (F5)")
        return None if record is None else record.result

    def _done(self, what: str, write: Callable[[], Any]) -> Any:
        try:
            out = write()
        except InputError as exc:  # a refused target: its reasons, without the path the title already names
            reasons = "\n".join(str(p) for p in exc.problems)
            self.window.show_error("Cannot export", f"{what}: {reasons}")
            return None
        except (OSError, ValueError) as exc:
            self.window.show_error("Cannot export", f"{what}: {exc}")
            return None
        self.window.show_message(f"exported {what}")
        return out

    def export_project(self, path: str | Path | None = None) -> Path | None:
        path = path or self.window.ask_save_path("Export project JSON", JSON_FILTER)
        if not path:
            return None
        return self._done(str(path), lambda: exporting.write_project_json(self.window.doc.project, path))

    def export_plots(self, fmt: str, folder: str | Path | None = None) -> list[Path] | None:
        if self._result() is None:
            return None
        folder = folder or self.ask_folder(f"Export plots as {fmt.upper()} into…")
        if not folder:
            return None
        return self._done(f"plots to {folder}", lambda: exporting.write_plots(self.window.results, folder, fmt))

    def export_csv(self, folder: str | Path | None = None) -> list[Path] | None:
        result = self._result()
        if result is None:
            return None
        folder = folder or self.ask_folder("Export CSV files into…")
        if not folder:
            return None
        return self._done(f"CSV files to {folder}", lambda: exporting.write_result_csv(result, folder))

    def export_trace(self, path: str | Path | None = None) -> Path | None:
        result = self._result()
        if result is None:
            return None
        path = path or self.window.ask_save_path("Export Chrome trace", JSON_FILTER)
        if not path:
            return None
        return self._done(str(path), lambda: exporting.write_trace(result, path))
