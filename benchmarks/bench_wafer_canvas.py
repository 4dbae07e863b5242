"""Studio and workload speed on the largest presets: the speed bars the test suite no longer times.

Tests assert behaviour (the level of detail a frame draws, the cells it culls); wall-clock bars live here,
where a loaded CI machine cannot fail them (house rule). Cases:

- ``canvas zoom/pan``: a 64 x 64-tile wafer on the canvas (1000 x 700), 12 zoom notches, 10 pans and the
  worst case (zoomed to fit, then x3: most cells visible, just above the block threshold); mean frame
  target < 50 ms;
- ``demo frame``: the presentation demo's cursor step on the same wafer after a run, with a full render of
  the canvas's viewport; mean frame target < 1.5 frame periods of the demo's ``FPS``;
- ``build gpt-1008b``: building the 1T workload preset's layer graph, best of 3 after a warm-up; target
  < 100 ms.

Prints one line per case with its verdict and exits 0 (``make bench`` stops only on a broken benchmark).
Run: ``QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/bench_wafer_canvas.py``
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

# pydantic whole before PySide6: shiboken's import hook inspects each module imported after it, and pydantic's
# lazy attributes, read half-imported, raise a circular ImportError (PySide6 6.10, pydantic 2.14)
import pydantic.fields  # noqa: E402, F401
from pydantic import TypeAdapter  # noqa: E402
from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402
from tilewright.engine.ir import WorkloadSpec  # noqa: E402
from tilewright.engine.simulate import simulate  # noqa: E402
from tilewright.engine.workloads import build_workload  # noqa: E402
from tilewright.engine.workloads.presets import MODEL_PRESETS_DIR  # noqa: E402
from tilewright.studio.document import ProjectDocument  # noqa: E402
from tilewright.studio.samples import big_wafer_project  # noqa: E402
from tilewright.studio.ui.canvas import CanvasWidget  # noqa: E402
from tilewright.studio.ui.canvas.overlay_controller import Overlay  # noqa: E402
from tilewright.studio.ui.demo import FPS  # noqa: E402
from tilewright.studio.ui.main_window import MainWindow  # noqa: E402
from tilewright.studio.ui.selection import Selection  # noqa: E402


def render(widget: CanvasWidget) -> None:
    widget.view.viewport().repaint()
    QApplication.processEvents()


def canvas_zoom_pan_s() -> float:
    """Mean seconds per frame of zooming and panning the 64 x 64 wafer."""
    doc = ProjectDocument(big_wafer_project(64))
    widget = CanvasWidget(doc, Selection(doc))
    widget.resize(1000, 700)
    widget.show()
    QApplication.processEvents()
    widget.zoom_to_fit()
    frames, start = 0, time.perf_counter()
    for _ in range(12):
        widget.view.zoom_by(1.25)
        render(widget)
        frames += 1
    for _ in range(10):
        widget.view.pan_by(40, 25)
        render(widget)
        frames += 1
    widget.view.zoom_to_fit()
    widget.view.zoom_by(3.0)
    render(widget)
    frames += 1
    seconds = (time.perf_counter() - start) / frames
    widget.close()
    return seconds


def demo_frame_s() -> float:
    """Mean seconds per demo frame (cursor step and a full render) on the 64 x 64 wafer after a run."""
    project = big_wafer_project(64)
    with tempfile.TemporaryDirectory() as tmp:
        settings = QSettings(str(Path(tmp) / "s.ini"), QSettings.Format.IniFormat)
        window = MainWindow(ProjectDocument(project), settings, persist=False)
        window.resize(1400, 900)
        window.show()
        QApplication.processEvents()
        window.canvas.show_result(simulate(project))
        demo = window.canvas.demo
        demo.set_mode(Overlay.cursor)
        viewport = window.canvas.view.viewport()
        frames, start = 20, time.perf_counter()
        for _ in range(frames):
            demo.step()
            viewport.grab()
        seconds = (time.perf_counter() - start) / frames
        window.hide()
    return seconds


def build_1t_s() -> float:
    """Best of three builds of the 1T GPT's layer graph, after a warm-up."""
    spec = TypeAdapter(WorkloadSpec).validate_json((MODEL_PRESETS_DIR / "gpt-1008b.json").read_bytes())
    build_workload(spec)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        build_workload(spec)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    QApplication.instance() or QApplication(sys.argv)
    cases = [
        ("canvas zoom/pan 64x64", canvas_zoom_pan_s, 0.050, "per frame"),
        ("demo frame 64x64", demo_frame_s, 1.5 / FPS, "per frame"),
        ("build gpt-1008b", build_1t_s, 0.100, "best of 3"),
    ]
    print(f"{'case':<24} {'ms':>8} {'target':>8}  verdict")
    for name, fn, target, what in cases:
        seconds = fn()
        verdict = "ok" if seconds < target else "SLOW"
        print(f"{name:<24} {seconds * 1e3:8.1f} {target * 1e3:8.1f}  {verdict} ({what})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
