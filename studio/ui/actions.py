"""Menus, toolbar and keyboard shortcuts of the main window, declared in one place.

Standard shortcuts come from ``QKeySequence.StandardKey`` so they follow each platform's conventions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMenu, QStyle, QToolBar
from tilewright.studio.icons import icon
from tilewright.studio.ui.results.export_menu import ResultExports
from tilewright.studio.ui.serving import serving_action

if TYPE_CHECKING:
    from tilewright.studio.ui.main_window import MainWindow

Key = QKeySequence.StandardKey


@dataclass
class Actions:
    new: QAction
    open: QAction
    save: QAction
    save_as: QAction
    import_model: QAction
    export: QAction
    quit: QAction
    undo: QAction
    redo: QAction
    cut: QAction
    copy: QAction
    paste: QAction
    delete: QAction
    select_all: QAction
    zoom_fit: QAction
    run: QAction
    cancel: QAction
    about: QAction
    recent_menu: QMenu
    dock_toggles: list[QAction] = field(default_factory=list)
    presentation: QAction | None = None
    snap: QAction | None = None
    link_mode: QAction | None = None
    play: QAction | None = None
    allow_large: QAction | None = None  # Run ▸ Allow Large Runs: no question before a run past the size limits
    exports: ResultExports | None = None  # File ▸ Export (canvas, project, plots, CSV, trace)


def _action(window: MainWindow, text: str, slot, shortcut=None, icon_=None, tip: str = "") -> QAction:  # noqa: ANN001
    action = QAction(text, window)
    if shortcut is not None:
        action.setShortcut(QKeySequence(shortcut))
    if icon_ is not None:
        action.setIcon(icon_)
    if tip:
        action.setStatusTip(tip)
        action.setToolTip(tip)
    action.triggered.connect(lambda _checked=False: slot())
    return action


def build_actions(w: MainWindow) -> Actions:
    std = w.style().standardIcon
    stack = w.doc.undo_stack
    undo = stack.createUndoAction(w, "&Undo")
    undo.setShortcut(QKeySequence(Key.Undo))
    undo.setIcon(std(QStyle.StandardPixmap.SP_ArrowBack))
    redo = stack.createRedoAction(w, "&Redo")
    redo.setShortcut(QKeySequence(Key.Redo))
    redo.setIcon(std(QStyle.StandardPixmap.SP_ArrowForward))
    a = Actions(
        new=_action(w, "&New", w.new_project, Key.New, std(QStyle.StandardPixmap.SP_FileIcon), "new project"),
        open=_action(
            w, "&Open…", w.open_dialog, Key.Open, std(QStyle.StandardPixmap.SP_DialogOpenButton), "open a project file"
        ),
        save=_action(w, "&Save", w.save, Key.Save, std(QStyle.StandardPixmap.SP_DialogSaveButton), "save"),
        save_as=_action(w, "Save &As…", w.save_as, Key.SaveAs),
        import_model=_action(
            w, "&Import model config…", w.import_model_config, tip="a Hugging Face config.json becomes the workload"
        ),
        export=_action(w, "&Export…", w.export, tip="the canvas as PNG, or the hardware as a system JSON"),
        quit=_action(w, "&Quit", w.close, Key.Quit),
        undo=undo,
        redo=redo,
        cut=_action(w, "Cu&t", w.cut, Key.Cut),
        copy=_action(w, "&Copy", w.copy, Key.Copy),
        paste=_action(w, "&Paste", w.paste, Key.Paste),
        delete=_action(w, "&Delete", w.delete_selection, Key.Delete),
        select_all=_action(w, "Select &All", w.select_all, Key.SelectAll),
        zoom_fit=_action(w, "&Zoom to Fit", w.canvas.zoom_to_fit, "Ctrl+0", icon("zoom-fit"), "zoom to fit"),
        run=_action(w, "&Run", w.run_simulation, "F5", icon("run"), "simulate the project (F5)"),
        cancel=_action(w, "&Cancel Run", w.cancel_run, "Shift+F5", icon("cancel"), "cancel the run"),
        about=_action(w, "&About Tilewright", w.about),
        recent_menu=QMenu("Open &Recent", w),
    )
    a.cancel.setEnabled(False)
    a.recent_menu.aboutToShow.connect(w.fill_recent_menu)
    _canvas_actions(w, a)
    _menus(w, a)
    _toolbar(w, a)
    return a


def _menus(w: MainWindow, a: Actions) -> None:
    bar = w.menuBar()
    file_menu = bar.addMenu("&File")
    file_menu.addActions([a.new, a.open])
    file_menu.addMenu(a.recent_menu)
    file_menu.addSeparator()
    file_menu.addActions([a.save, a.save_as])
    file_menu.addSeparator()
    file_menu.addAction(a.import_model)
    a.exports = ResultExports(w, a.export)
    file_menu.addMenu(a.exports.menu)
    file_menu.addSeparator()
    file_menu.addAction(a.quit)
    edit = bar.addMenu("&Edit")
    edit.addActions([a.undo, a.redo])
    edit.addSeparator()
    edit.addActions([a.cut, a.copy, a.paste, a.delete])
    edit.addSeparator()
    edit.addAction(a.select_all)
    view = bar.addMenu("&View")
    for dock in w.docks.values():
        toggle = dock.toggleViewAction()
        a.dock_toggles.append(toggle)
        view.addAction(toggle)
    view.addSeparator()
    view.addAction(a.zoom_fit)
    view.addActions([a.snap, a.link_mode])
    view.addSeparator()
    view.addAction(a.presentation)
    run = bar.addMenu("&Run")
    run.addActions([a.run, a.cancel])
    run.addAction(a.play)
    run.addSeparator()
    run.addAction(serving_action(w))  # Run ▸ Serve…: the serving window (studio.ui.serving)
    run.addSeparator()
    run.addAction(a.allow_large)
    bar.addMenu("&Help").addAction(a.about)


def _toolbar(w: MainWindow, a: Actions) -> None:
    tb = QToolBar("Main", w)
    tb.setObjectName("toolbar.main")
    tb.setMovable(False)
    tb.addActions([a.new, a.open, a.save])
    tb.addSeparator()
    tb.addActions([a.undo, a.redo])
    tb.addSeparator()
    tb.addAction(a.zoom_fit)
    tb.addAction(a.link_mode)
    tb.addSeparator()
    tb.addActions([a.run, a.cancel])
    tb.addSeparator()
    tb.addAction(a.presentation)
    w.addToolBar(tb)


def _toggle(
    w: MainWindow,
    text: str,
    slot,
    shortcut: str | None,
    tip: str,
    checked: bool = False,  # noqa: ANN001
    icon_name: str | None = None,
) -> QAction:
    action = QAction(text, w)
    if icon_name:
        action.setIcon(icon(icon_name))
    action.setCheckable(True)
    action.setChecked(checked)
    if shortcut:
        action.setShortcut(QKeySequence(shortcut))
    action.setStatusTip(tip)
    action.setToolTip(tip)
    action.toggled.connect(slot)
    return action


def _canvas_actions(w: MainWindow, a: Actions) -> None:
    """Canvas modes, demo and presentation (toggles, so menus show their state)."""
    a.snap = _toggle(w, "&Snap to Grid", w.canvas.set_snap, None, "moves snap to a quarter of a cell", True)
    a.link_mode = _toggle(
        w,
        "Draw &Links",
        w.canvas.set_link_mode,
        "L",
        "drag from one component to another to link them (Shift-drag works any time)",
        icon_name="link",
    )
    a.presentation = _toggle(
        w,
        "&Presentation Mode",
        w.set_presentation,
        "F11",
        "full screen, large fonts, editing locked (F11)",
        icon_name="presentation",
    )
    w.addAction(a.presentation)  # the shortcut must work while the menu bar is hidden in full screen
    a.play = _toggle(
        w,
        "&Play Run on Canvas",
        w.canvas.demo.set_playing,
        "Space",
        "animate the last run on the canvas (Space)",
        icon_name="play",
    )
    w.canvas.demo.playingChanged.connect(a.play.setChecked)
    a.allow_large = _toggle(
        w,
        "Allow &Large Runs",
        w.set_allow_large,
        None,
        "start runs past the size limits without asking (they may take long or run out of memory; Cancel stops them)",
        w.allow_large,
    )
