"""``tilewright studio``: open the studio on a project, or render it to a PNG and exit.

``--screenshot`` runs headless (offscreen unless a platform was chosen), waits for the checks and,
with ``--run``, for the run to end, then grabs the window — so documentation images and CI smoke tests
use the real window, not a mock.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tilewright.engine.errors import EXIT_BAD_INPUT, InputError

if TYPE_CHECKING:
    from tilewright.studio.workers import SimulateFn

RUN_WAIT_MS = 60_000  # a screenshot waits at most this long for a run
CHECKS_WAIT_MS = 3_000
OPEN_WAIT_MS = 600_000  # a screenshot of a large project waits this long for its layout
MAX_SIDE = 8192  # a window (and its screenshot) past this is past Qt's raster limits: it crashed, not failed


def parse_size(text: str | None) -> tuple[int, int]:
    """ "1600x1000" → (1600, 1000); raises ``InputError`` for anything else."""
    match = re.fullmatch(r"\s*(\d{1,9})\s*[xX×]\s*(\d{1,9})\s*", text or "1600x1000")
    w, h = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    if not 200 <= w <= MAX_SIDE or not 150 <= h <= MAX_SIDE:
        raise InputError(
            "--size", f"expected WIDTHxHEIGHT from 200x150 to {MAX_SIDE}x{MAX_SIDE}, e.g. 1600x1000 (got {text!r})"
        )
    return w, h


def check_screenshot_name(path: str) -> None:
    """Refuse, before the window opens, a ``--screenshot`` name whose suffix names no image format Qt writes
    (the file would otherwise hold bytes its name belies, or fail only after the run)."""
    from tilewright.studio.exporting import image_format

    try:
        image_format(path)
    except ValueError as exc:
        raise InputError("--screenshot", f"{path}: {exc}") from None


def load_initial_project(path: str | None) -> tuple[Any, Path | None, str]:
    """The project to open, its file and a note for the status bar.

    An explicit file that fails to load is an error (exit 2); the default preset failing to load only
    falls back to a new project, since the user did not ask for it.
    """
    from tilewright.engine.io import load_project
    from tilewright.engine.io.presets import default_project_path, resolve
    from tilewright.studio.samples import new_project

    if path:
        file = resolve("projects", path)  # a file, or a preset's name as `tilewright presets` lists it
        return load_project(file), file, f"opened {file}"
    try:
        default = default_project_path()
    except InputError:
        return new_project(), None, "new project (no default preset found)"
    try:
        return load_project(default), default, f"opened {default.name}"
    except InputError as exc:
        print(f"tilewright: the default project did not load, starting empty:\n{exc}", file=sys.stderr)
        return new_project(), None, "new project (the default preset did not load)"


def refuse_too_large(project: Any, file_path: Path | None) -> None:
    """A project whose drawing alone would exhaust memory (devices, layers past the size limits) is
    refused with the estimate, as ``tilewright run`` refuses it, unless ``--allow-large``."""
    from tilewright.engine.errors import Problem
    from tilewright.studio.opening import too_large_to_open

    problems = too_large_to_open(project)
    if problems:
        problems.append(Problem("", "past the size limits; `tilewright studio --allow-large` opens it anyway"))
        raise InputError(str(file_path or project.name), problems)


def main(args: Any, simulate: SimulateFn | None = None) -> int:
    """Open the studio as ``args`` ask; ``simulate`` replaces the engine's (tests pass a double)."""
    screenshot = getattr(args, "screenshot", None)
    if screenshot and not os.environ.get("QT_QPA_PLATFORM"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    try:
        size = parse_size(getattr(args, "size", None))
        if screenshot:
            check_screenshot_name(screenshot)
        project, file_path, note = load_initial_project(getattr(args, "project", None))
        if not getattr(args, "allow_large", False):
            refuse_too_large(project, file_path)
    except InputError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_INPUT

    from PySide6.QtCore import Qt, QThreadPool
    from PySide6.QtWidgets import QApplication
    from tilewright.studio.document import ProjectDocument
    from tilewright.studio.icons import icon
    from tilewright.studio.opening import opens_in_background
    from tilewright.studio.samples import new_project
    from tilewright.studio.settings import APPLICATION, ORGANISATION, make_settings
    from tilewright.studio.ui.main_window import MainWindow

    if screenshot:
        _quiet_offscreen_warnings()
    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "tilewright"])
    app.setOrganizationName(ORGANISATION)
    app.setApplicationName(APPLICATION)
    app.setWindowIcon(icon("app"))
    # A large project's layout is built on a worker (``studio.opening``): the window opens on an empty
    # project, shows a busy indicator, and takes the project when its layout is ready.
    later = opens_in_background(project)
    doc = ProjectDocument(new_project() if later else project, None if later else file_path)
    window = MainWindow(doc, make_settings(), persist=not screenshot, simulate=simulate)
    if later:
        window.open_project(project, file_path)
    window.set_allow_large(bool(getattr(args, "allow_large", False)))
    if screenshot:  # a scripted window never waits on a dialog: a run past the limits needs --allow-large
        window.ask_run_anyway = lambda _problems: False
    if getattr(args, "presentation", False):
        window.set_presentation(True)
    window.resize(*size)
    window.show_message(note)
    if screenshot:
        window.show()
    elif getattr(args, "presentation", False):
        window.showFullScreen()
    else:
        window.show()
    refusal = below_minimum(window, size) if not getattr(args, "presentation", False) else None
    if refusal is not None:
        print(refusal, file=sys.stderr)
        window.doc.undo_stack.setClean()
        window.close()
        dispose(window)
        return EXIT_BAD_INPUT
    if screenshot:
        code = take_screenshot(window, Path(screenshot), size, run=bool(getattr(args, "run", False)))
        window.doc.undo_stack.setClean()  # nothing to ask about when closing a scripted window
        window.close()
        QThreadPool.globalInstance().waitForDone(2000)
        dispose(window)
        return code
    if getattr(args, "run", False):
        if window.opening is not None:
            window.opened.connect(window.run_simulation, Qt.ConnectionType.SingleShotConnection)
        else:
            window.run_simulation()
    code = app.exec()
    QThreadPool.globalInstance().waitForDone(2000)
    return int(code)


def below_minimum(window: Any, size: tuple[int, int]) -> str | None:
    """The refusal of a ``--size`` smaller than the shown window's minimum, or None when it fits.

    The minimum is what the window's docks, toolbar and panels need once shown and polished (about
    900 × 600, depending on fonts): Qt silently grows a smaller window to it, so ``--size 400x300`` used
    to give an 897 × 601 screenshot, a warning and exit 0. Only the shown window knows its minimum, so
    this is asked after ``show()``."""
    from PySide6.QtWidgets import QApplication

    QApplication.processEvents()
    need = window.minimumSizeHint().expandedTo(window.minimumSize())
    shown = window.size()
    low_w, low_h = max(need.width(), shown.width()), max(need.height(), shown.height())
    if size[0] >= low_w and size[1] >= low_h:
        return None
    return str(InputError(
        "--size", f"{size[0]}x{size[1]} is smaller than the window's minimum of {low_w}x{low_h} (for this project "
        "and font); give at least that"))


def dispose(window: Any) -> None:
    """Delete a closed window the way Qt expects: deliver the events still queued for it (the platform
    posts activation changes on close), then let Qt delete it on its deferred-delete path. Dropping the
    last Python reference instead deletes it at once, and an event queued for it later hits freed memory.
    """
    from PySide6.QtCore import QCoreApplication, QEvent

    app = QCoreApplication.instance()
    for _ in range(3):
        app.processEvents()
    window.deleteLater()
    QCoreApplication.sendPostedEvents(window, QEvent.Type.DeferredDelete)
    app.processEvents()


def _quiet_offscreen_warnings() -> None:
    """The offscreen platform warns about window hints it cannot honour; in a scripted screenshot that
    is noise on stderr, where real problems should stand out. Other messages pass through."""
    from PySide6.QtCore import qInstallMessageHandler

    def handler(_kind: Any, _context: Any, message: str) -> None:
        if "does not support propagateSizeHints" not in message:
            print(message, file=sys.stderr)

    qInstallMessageHandler(handler)


def _wait(signal: Any, timeout_ms: int) -> None:
    """Spin an event loop until ``signal`` fires or ``timeout_ms`` pass."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    signal.connect(loop.quit)
    QTimer.singleShot(timeout_ms, loop.quit)
    loop.exec()
    signal.disconnect(loop.quit)


def take_screenshot(window: Any, path: Path, size: tuple[int, int], run: bool) -> int:
    """Let the window settle (checks answered, run over), fit the canvas, grab and save ``path``."""
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    if window.opening is not None:  # a large project: its layout is still being built
        _wait(window.opened, OPEN_WAIT_MS)
    if run and window.run_simulation():
        _wait(window.runner.done, RUN_WAIT_MS)
    if not window.status.is_checked:
        _wait(window.status.checked, CHECKS_WAIT_MS)
    window.results.flush()  # a finished run fills its views in later event-loop turns: the image shows them filled
    for _ in range(3):
        app.processEvents()
    if window.canvas.view.auto_fit:  # keep a zoom a script chose
        window.canvas.zoom_to_fit()
    app.processEvents()
    pixmap = window.grab()
    if (pixmap.width(), pixmap.height()) != size:
        print(
            f"tilewright: the window came out {pixmap.width()}x{pixmap.height()}, not {size[0]}x{size[1]}",
            file=sys.stderr,
        )
    from tilewright.studio.exporting import write_image

    try:  # atomically: a screenshot killed mid-write leaves the old image whole
        path.parent.mkdir(parents=True, exist_ok=True)
        write_image(pixmap, path)
    except OSError as exc:
        print(f"{path}: cannot write the screenshot: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0
