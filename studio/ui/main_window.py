"""The main window: canvas in the centre, docks around it, menus, status bar, file handling.

The window wires parts together and owns the user-facing decisions (save before closing? which file?).
Those decisions are separate small methods (``ask_save_changes``, ``ask_open_path`` …) so tests can
replace them instead of clicking through modal dialogs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QCloseEvent, QFont
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFileDialog,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QWidget,
)
from tilewright.engine.errors import InputError
from tilewright.engine.io import dumps_stable, load_project, read_json, write_atomic
from tilewright.engine.plan.budget import estimate
from tilewright.engine.workloads import ConfigError, import_hf_config
from tilewright.studio.commands import AddChild, RemoveChildren, ReplaceWorkload
from tilewright.studio.document import ProjectDocument
from tilewright.studio.exporting import write_image
from tilewright.studio.icons import icon
from tilewright.studio.model.core_grid import core_grid, grid_device
from tilewright.studio.opening import opening_job, opens_in_background, too_large_to_open
from tilewright.studio.run_controller import RunController
from tilewright.studio.samples import new_project
from tilewright.studio.settings import add_recent_file, recent_files
from tilewright.studio.tree_edit import EditRefused
from tilewright.studio.ui.actions import build_actions
from tilewright.studio.ui.canvas import CanvasWidget
from tilewright.studio.ui.clipboard import copy_components, pasted_components
from tilewright.studio.ui.explore import ExplorePanel
from tilewright.studio.ui.inspector import Inspector
from tilewright.studio.ui.library import Library
from tilewright.studio.ui.outline import Outline
from tilewright.studio.ui.results.time_cursor import TimeCursor
from tilewright.studio.ui.results_panel import ResultsPanel
from tilewright.studio.ui.selection import Selection
from tilewright.studio.ui.settle import SettleGate
from tilewright.studio.ui.status import NO_RUN, StatusBar
from tilewright.studio.ui.workload_panel import WorkloadPanel
from tilewright.studio.workers import NOT_RUN, Job, Relay, SimulateFn, fast_switching, start

LAYOUT_VERSION = 1
PRESENTATION_SCALE = 1.3
PROJECT_FILTER = "Tilewright projects (*.json);;All files (*)"
Decision = QMessageBox.StandardButton


def _model_name(path: Path) -> str | None:
    """The folder a ``config.json`` sits in names the model (as Hugging Face checkouts are laid out);
    for any other file name, the importer's own default (``_name_or_path``) is used."""
    return path.resolve().parent.name if path.name == "config.json" else None


class MainWindow(QMainWindow):
    # A project finished opening: at once, or once a worker built the layout of a large one.
    opened = Signal()

    def __init__(self, doc: ProjectDocument, settings: QSettings, persist: bool = True,
                 parent: QWidget | None = None, simulate: SimulateFn | None = None):
        super().__init__(parent)
        self.doc = doc
        self.settings = settings
        self.persist = persist  # False for scripted screenshots: never save their layout
        self.presenting = False
        self.allow_large = False  # runs past the size limits ask first (see ``run_simulation``)
        self.selection = Selection(doc, self)
        self.runner = RunController(parent=self, gate=SettleGate(self).call, simulate=simulate)
        self.time_cursor = TimeCursor(self)  # shared by the result views and the canvas
        self.setWindowIcon(icon("app"))
        self.canvas = CanvasWidget(doc, self.selection, self)
        self.setCentralWidget(self.canvas)
        self.library = Library(doc, self.selection)
        self.outline = Outline(doc, self.selection)
        self.inspector = Inspector(doc, self.selection)
        self.workload = WorkloadPanel(doc)
        self.results = ResultsPanel(self.time_cursor)
        self.explore = ExplorePanel(doc)
        self.docks: dict[str, QDockWidget] = {}
        self._add_docks()
        self.status = StatusBar(doc, self)
        self.setStatusBar(self.status)
        self.opening: Job | None = None  # the job building a large project's layout (``open_project``)
        self.busy = QProgressBar(self)  # shown while it works
        self.busy.setRange(0, 0)
        self.busy.setMaximumWidth(160)
        self.busy.setTextVisible(False)
        self.busy.hide()
        self.status.addPermanentWidget(self.busy)
        self.actions_ = build_actions(self)
        self._connect()
        self._update_title()
        if persist:
            self.restore_layout()

    # -- construction -------------------------------------------------------------------------------
    def _dock(self, key: str, title: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock.{key}")  # saveState/restoreState find docks by object name
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        self.docks[key] = dock
        return dock

    def _add_docks(self) -> None:
        left, right = Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea
        library = self._dock("library", "Component library", self.library, left)
        outline = self._dock("outline", "Hierarchy", self.outline, left)
        inspector = self._dock("inspector", "Inspector", self.inspector, right)
        workload = self._dock("workload", "Workload", self.workload, right)
        results = self._dock("results", "Results", self.results, Qt.DockWidgetArea.BottomDockWidgetArea)
        explore = self._dock("explore", "Explore", self.explore, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.tabifyDockWidget(results, explore)
        results.raise_()
        self.tabifyDockWidget(inspector, workload)
        inspector.raise_()
        self.resizeDocks([library, outline], [230, 400], Qt.Orientation.Vertical)
        self.resizeDocks([library, inspector], [300, 360], Qt.Orientation.Horizontal)
        self.resizeDocks([results], [175], Qt.Orientation.Vertical)

    def _connect(self) -> None:
        self.doc.dirtyChanged.connect(lambda _d: self._update_title())
        self.doc.filePathChanged.connect(lambda _p: self._update_title())
        self.doc.projectReplaced.connect(self._update_title)
        self.doc.projectReplaced.connect(self._forget_run)
        self.library.message.connect(self.show_message)
        self.canvas.scene.message.connect(self.show_message)
        self.runner.runningChanged.connect(self._on_running)
        self.runner.started.connect(self.results.show_running)
        self.runner.finished.connect(self.results.show_result)
        self.runner.failed.connect(
            lambda m: self.results.show_message(m if m.startswith(NOT_RUN) else f"The run failed: {m}"))
        self.runner.done.connect(lambda: self.status.set_run_state(self.runner.last_message))
        self.results.follow(self.runner)
        self.canvas.set_time_cursor(self.time_cursor)  # the canvas heat map and demo follow the same cursor
        self.runner.finished.connect(
            lambda result, _s: self.canvas.show_result(result, self.runner.last_record.carriage))
        self.canvas.demo.opChosen.connect(self._op_chosen)

    def _forget_run(self) -> None:
        """Another project replaced the shown one (New, Open): a run of the old one still going is cancelled —
        its result would land on this project's canvas and results — and the results, the canvas's heat, the
        result exports and the status bar's "last run" go back to "no run yet" (the Runs tab keeps its history)."""
        self.runner.cancel()
        self.results.forget_run()
        self.canvas.show_result(None)
        self.actions_.exports.enable_results(False)
        self.status.set_run_state(NO_RUN)

    def _op_chosen(self, use: Any) -> None:
        """The op chosen on the canvas: the link view lists its multicast and DRAM traffic too."""
        device = grid_device(self.doc.project.hardware)
        grid = core_grid(device) if device is not None else None
        self.results.links.set_op(use, (grid.rows, grid.cols) if grid is not None else (0, 0))

    def _update_title(self) -> None:
        where = self.doc.file_path.name if self.doc.file_path else "not saved"
        self.setWindowTitle(f"{self.doc.project.name} — {where}[*] — Tilewright Studio")
        self.setWindowModified(self.doc.is_dirty)

    def show_message(self, text: str) -> None:
        self.status.showMessage(text, 8000)

    # -- decisions (replaced in tests) --------------------------------------------------------------
    def ask_save_changes(self) -> Decision:
        return QMessageBox.question(
            self, "Unsaved changes", f"Save the changes to “{self.doc.project.name}” first?",
            Decision.Save | Decision.Discard | Decision.Cancel, Decision.Save,
        )

    def ask_open_path(self, title: str = "Open project", file_filter: str = PROJECT_FILTER) -> str | None:
        path, _ = QFileDialog.getOpenFileName(self, title, self._dialog_dir(), file_filter)
        return path or None

    def ask_save_path(self, title: str = "Save project", file_filter: str = PROJECT_FILTER) -> str | None:
        path, _ = QFileDialog.getSaveFileName(self, title, self._dialog_dir(), file_filter)
        return path or None

    def show_error(self, title: str, text: str) -> None:
        QMessageBox.warning(self, title, text)

    def _dialog_dir(self) -> str:
        return str(self.doc.file_path.parent) if self.doc.file_path else str(Path.cwd())

    # -- files --------------------------------------------------------------------------------------
    def maybe_save(self) -> bool:
        """True when it is fine to drop the current project (saved, discarded, or unchanged)."""
        if not self.doc.is_dirty:
            return True
        decision = self.ask_save_changes()
        if decision == Decision.Save:
            return self.save()
        return decision == Decision.Discard

    def new_project(self) -> bool:
        if not self.maybe_save():
            return False
        self.doc.replace(new_project())
        return True

    def open_dialog(self) -> bool:
        if not self.maybe_save():
            return False
        path = self.ask_open_path()
        return self.open_path(path, guard=False) if path else False

    def open_path(self, path: str | Path, guard: bool = True) -> bool:
        if guard and not self.maybe_save():
            return False
        try:
            project = load_project(path)  # inconsistencies are shown, not refused
        except InputError as exc:
            self.show_error("Cannot open project", str(exc))
            return False
        too_large = [] if self.allow_large else too_large_to_open(project)
        if too_large:
            self.show_error("Cannot open project", "\n".join(f"{path}: {p}" for p in too_large) + "\nDrawing it "
                            "would take very long and may exhaust memory; Run ▸ Allow Large Runs lets it open.")
            return False
        self.open_project(project, Path(path))
        return True

    def open_project(self, project: Any, path: Path | None = None) -> None:
        """Show ``project`` (read from ``path``): at once, or — when drawing it means elaborating a large
        system (``studio.opening``) — once a worker has built its layout, with a busy indicator meanwhile
        and the current project locked. ``opened`` fires when it is shown; a newer open wins."""
        if not opens_in_background(project):
            if self.opening is not None:
                self.opening.cancel()  # overtaken by this one
            self.opening = None
            self._end_busy()
            self._show_project(project, path)
            return
        job = opening_job(project)
        Relay(
            self,
            job,
            finished=lambda ready, _s: self._opened(job, ready, path),
            failed=lambda message: self._open_failed(job, path or project.name, message),
            progress=lambda _f, text: self._opening_progress(job, text),
            stopped=lambda: self._opened(job, None, path),
        )
        was_opening = self.opening is not None
        if was_opening:
            self.opening.cancel()  # overtaken: its worker stops at its next check
        self.opening = job
        self._start_busy(f"opening {path.name if path else project.name}: building the device graph…", was_opening)
        start(job)

    def _show_project(self, project: Any, path: Path | None) -> None:
        self.doc.replace(project, path)
        if path is not None:
            add_recent_file(self.settings, path)
            self.show_message(f"opened {path}")
        self.opened.emit()

    def _opened(self, job: Job, project: Any, path: Path | None) -> None:
        if job is not self.opening:
            return  # an older open, overtaken
        self.opening = None
        self._end_busy()
        if project is not None:
            self._show_project(project, path)

    def _open_failed(self, job: Job, where: object, message: str) -> None:
        if job is self.opening:
            self.opening = None
            self._end_busy()
            self.show_error("Cannot open project", f"{where}: {message}")

    def _opening_progress(self, job: Job, text: str) -> None:
        if job is self.opening and text:
            self.status.showMessage(f"opening: {text}…")

    def _start_busy(self, text: str, already: bool) -> None:
        """While a project opens: the busy bar, a message, no edits to the project still shown, no run."""
        self.busy.setToolTip(text)
        self.busy.show()
        self.status.showMessage(text)
        self.doc.read_only = True
        self.actions_.run.setEnabled(False)
        if not already:
            fast_switching(True)  # the GUI thread gets the GIL back within 0.1 ms of asking

    def _end_busy(self) -> None:
        if self.busy.isHidden():
            return
        self.busy.hide()
        self.status.clearMessage()
        self.doc.read_only = self.presenting
        self.actions_.run.setEnabled(not self.runner.running)
        fast_switching(False)

    def save(self) -> bool:
        if self.doc.file_path is None:
            return self.save_as()
        return self._save_to(self.doc.file_path)

    def save_as(self, path: str | Path | None = None) -> bool:
        path = path or self.ask_save_path()
        if not path:
            return False
        path = Path(path) if Path(path).suffix else Path(f"{path}.json")
        return self._save_to(path)

    def _save_to(self, path: Path) -> bool:
        try:
            self.doc.save(path)
        except (OSError, ValueError, InputError) as exc:  # the window stays open with the edits: nothing lost
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self.show_error("Cannot save project", f"{path}: {reason}")
            return False
        add_recent_file(self.settings, path)
        self.show_message(f"saved {path}")
        return True

    def fill_recent_menu(self) -> None:
        menu = self.actions_.recent_menu
        menu.clear()
        files = recent_files(self.settings)
        for f in files:
            menu.addAction(Path(f).name, lambda p=f: self.open_path(p)).setToolTip(f)
        if not files:
            menu.addAction("(none)").setEnabled(False)

    def import_model_config(self, path: str | Path | None = None) -> bool:
        """A Hugging Face ``config.json`` becomes the workload (one undoable step)."""
        path = path or self.ask_open_path("Import model config", "Model configs (*.json);;All files (*)")
        if not path:
            return False
        try:
            spec = import_hf_config(read_json(path), source_name=_model_name(Path(path)))
        except (InputError, ConfigError) as exc:
            self.show_error("Cannot import model config", f"{path}: {exc}")
            return False
        self.doc.push(ReplaceWorkload(self.doc, spec, f"Import {Path(path).name}"))
        return True

    def export(self, path: str | Path | None = None) -> bool:
        """``.png``: the canvas as shown; ``.json``: the hardware tree as a system file."""
        path = path or self.ask_save_path("Export", "Canvas image (*.png);;System JSON (*.json)")
        if not path:
            return False
        target = Path(path)
        if target.suffix.lower() not in (".png", ".json"):
            self.show_error("Cannot export", f"{target}: choose a .png or .json file name")
            return False
        try:  # both written atomically: a studio killed mid-export leaves the old file whole
            if target.suffix.lower() == ".png":
                write_image(self.canvas.view.grab(), target)
            else:
                write_atomic(target, dumps_stable(self.doc.project.hardware.model_dump(mode="json")))
        except OSError as exc:
            self.show_error("Cannot export", f"{target}: {exc.strerror or exc}")
            return False
        self.show_message(f"exported {target}")
        return True

    # -- edit ---------------------------------------------------------------------------------------
    def _edit(self, action: Any) -> bool:
        try:
            action()
        except EditRefused as exc:
            self.show_message(f"refused: {exc.reason}")
            return False
        return True

    def delete_selection(self) -> bool:
        paths = self.selection.paths
        return bool(paths) and self._edit(lambda: self.doc.push(RemoveChildren(self.doc, paths)))

    def copy(self) -> None:
        hw = self.doc.project.hardware
        comps = [c for c in (hw.find(p) for p in self.selection.paths) if c is not None]
        if comps:
            copy_components(comps)

    def cut(self) -> None:
        self.copy()
        self.delete_selection()

    def paste(self) -> bool:
        def do() -> None:
            comps = pasted_components()
            if not comps:
                return
            stack = self.doc.undo_stack
            stack.beginMacro("Paste")
            added = []
            try:
                for comp in comps:
                    command = AddChild(self.doc, self.selection.level, comp)
                    self.doc.push(command)
                    added.append(command.child_path)
            finally:
                stack.endMacro()
            self.selection.select(added)

        return self._edit(do)

    def select_all(self) -> None:
        self.canvas.scene.select_all()

    # -- run ----------------------------------------------------------------------------------------
    def run_simulation(self) -> bool:
        """Run the project on a worker. A run past the size limits asks first (``ask_run_anyway``),
        unless Run ▸ Allow Large Runs (``--allow-large``) is on. None starts while a project opens."""
        if self.opening is not None:
            return False
        project = self.doc.project
        allow_large = self.allow_large
        if not allow_large and not self.runner.running:
            problems = estimate(project).problems()  # from the IR alone: milliseconds, fine on this thread
            if problems:
                if not self.ask_run_anyway([str(p) for p in problems]):
                    self.status.set_run_state("run not started: past the size limits")
                    return False
                allow_large = True
        started = self.runner.run(project, allow_large=allow_large)
        if started:
            self.status.set_run_state("running…")
        return started

    def set_allow_large(self, on: bool) -> None:
        """Runs past the size limits start without asking (``tilewright studio --allow-large``)."""
        self.allow_large = bool(on)
        toggle = getattr(getattr(self, "actions_", None), "allow_large", None)
        if toggle is not None and toggle.isChecked() != self.allow_large:
            toggle.setChecked(self.allow_large)

    def ask_run_anyway(self, problems: list[str]) -> bool:
        """The size limits refuse this run: run anyway? (Replaced in tests.)"""
        box, run_anyway = self.run_anyway_box(problems)
        box.exec()
        return box.clickedButton() is run_anyway

    def run_anyway_box(self, problems: list[str]) -> tuple[QMessageBox, Any]:
        """The question ``ask_run_anyway`` asks, and its "Run Anyway" button (Cancel is the default)."""
        text = "This run is past the size limits:\n\n" + "\n".join(f"• {p}" for p in problems)
        text += "\n\nIt may take very long or run out of memory. Cancel stops it at any time."
        box = QMessageBox(QMessageBox.Icon.Warning, "Run past the size limits?", text,
                          QMessageBox.StandardButton.Cancel, self)
        run_anyway = box.addButton("Run Anyway", QMessageBox.ButtonRole.AcceptRole)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        return box, run_anyway

    def cancel_run(self) -> None:
        self.runner.cancel()

    def _on_running(self, running: bool) -> None:
        self.actions_.run.setEnabled(not running and self.opening is None)
        self.actions_.cancel.setEnabled(running)

    # -- presentation, layout, closing --------------------------------------------------------------
    def set_presentation(self, on: bool) -> None:
        """Large fonts and editing locked, for talks and demos (demo mode builds on this). The whole
        application font grows, so the canvas captions (sized in pixels) grow with the widgets."""
        if on == self.presenting:
            return
        self.presenting = on
        self.doc.read_only = on
        if getattr(self, "actions_", None) is not None and self.actions_.presentation is not None:
            self.actions_.presentation.setChecked(on)  # started from the command line, say
        app = QApplication.instance()
        font = QFont(app.font())
        font.setPointSizeF(font.pointSizeF() * (PRESENTATION_SCALE if on else 1 / PRESENTATION_SCALE))
        app.setFont(font)
        self.library.setEnabled(not on)
        self.canvas.set_presentation(on)
        self._presentation_docks(on)
        if self.isVisible() and on:  # a scripted screenshot keeps its size; a real window fills the screen
            self.showFullScreen()
        elif self.isFullScreen():
            self.showNormal()
        self.canvas.scene.rebuild()  # captions re-measure in the new font
        self.canvas.breadcrumb.refresh()
        self.inspector.refresh()
        self.workload.refresh()
        if on:
            self.resizeDocks([self.docks["library"], self.docks["inspector"]], [380, 440], Qt.Orientation.Horizontal)

    def _presentation_docks(self, on: bool) -> None:
        """Presenting needs the canvas big and nothing that edits: the library and hierarchy step aside
        (and come back as they were)."""
        if on:
            self._hidden_for_talk = [k for k in ("library", "outline") if not self.docks[k].isHidden()]
            for key in self._hidden_for_talk:
                self.docks[key].hide()
            # The canvas and the Gantt share the screen; the canvas gets the larger part.
            self.resizeDocks([self.docks["results"]], [int(self.height() * 0.36)], Qt.Orientation.Vertical)
        else:
            for key in getattr(self, "_hidden_for_talk", []):
                self.docks[key].show()
            self._hidden_for_talk = []

    def about(self) -> None:
        from tilewright.engine import __version__

        QMessageBox.about(
            self, "About Tilewright",
            f"<b>Tilewright {__version__}</b><br>Design studio and simulator for tiled, wafer-scale and "
            "multi-chip deep-learning accelerators.",
        )

    def save_layout(self) -> None:
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/state", self.saveState(LAYOUT_VERSION))
        self.settings.sync()

    def restore_layout(self) -> bool:
        geometry = self.settings.value("window/geometry")
        state = self.settings.value("window/state")
        if geometry is not None:
            self.restoreGeometry(geometry)
        return state is not None and self.restoreState(state, LAYOUT_VERSION)

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self.maybe_save():
            event.ignore()
            return
        self.runner.cancel()
        if self.opening is not None:  # a large project still opening: its worker stops
            self.opening.cancel()
            self.opening = None
            self._end_busy()
        if self.persist:
            self.save_layout()
        self.set_presentation(False)  # the application font is shared: give it back
        self.results.release()  # result plots go before the window's teardown (see ResultsPanel.release)
        event.accept()

