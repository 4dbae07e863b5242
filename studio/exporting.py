"""Files out of the studio: the project as JSON, every result plot as PNG or SVG, metrics and timelines as
CSV, and a Chrome trace for Perfetto / chrome://tracing.

Result files come from the engine's own writers (``write_csv``, ``write_chrome_trace``), so the studio
and ``tilewright run`` export the same bytes; plots are drawn at a fixed size whatever their tab's size
(or whether the results dock is open at all), so exported figures are reproducible.

A plot laid out at the export size must also have its view boxes' data-to-pixel matrices updated before
it is drawn. pyqtgraph updates them lazily, when the scene is about to paint: the PNG exporter renders the
scene (so it happens), the SVG exporter paints item by item (so it did not), and SVGs came out with the
data drawn at the on-screen tab's scale — memory areas shrunk into a corner, link curves collapsed to
nothing — while the axes were right. ``_AtSize`` asks the scene to prepare for painting, like a render.
SVGs also get an explicit width and height (pyqtgraph writes only a viewBox, which resvg refuses).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QRectF, QSize
from tilewright.engine.io import save_project
from tilewright.engine.io.atomic import write_atomic
from tilewright.engine.results.result import Result

PLOT_SIZE = (1600, 900)


def write_project_json(project: Any, path: str | Path) -> Path:
    """A copy of the project, through the same serializer the document's Save uses; unlike Save As it
    leaves the document's file name and its unsaved-changes state alone."""
    target = Path(path) if Path(path).suffix else Path(f"{path}.json")
    save_project(project, target)
    return target


class _AtSize:
    """Lay a plot out at ``size`` for the duration of an export, then put it back."""

    def __init__(self, plot_widget: Any, size: tuple[int, int], prepare: Callable[[], None] | None,
                 title: str = ""):
        self.item = plot_widget.getPlotItem()
        self.size, self.prepare, self.title = size, prepare, title

    def __enter__(self) -> Any:
        self.old = self.item.geometry()
        if self.title:  # a figure on its own says what it shows; on screen the view's own header does
            self.item.setTitle(self.title, color="#3d4852", size="11pt")
        self.item.setGeometry(QRectF(0, 0, *self.size))
        self.item.layout.activate()
        self._prepare_paint()
        if self.prepare is not None:
            self.prepare()  # e.g. the Gantt's level of detail for the export's pixel width
            self._prepare_paint()
        return self.item

    def _prepare_paint(self) -> None:
        """What a scene render does first: view boxes update their matrices for the new geometry."""
        scene = self.item.scene()
        if scene is not None and hasattr(scene, "prepareForPaint"):
            scene.prepareForPaint()

    def __exit__(self, *_exc: object) -> None:
        if self.title:
            self.item.setTitle(None)
        self.item.setGeometry(self.old)
        self.item.layout.activate()  # the view redraws itself for its own size again


def write_plot_png(plot_widget: Any, path: str | Path, size: tuple[int, int] = PLOT_SIZE,
                   prepare: Callable[[], None] | None = None, title: str = "") -> QSize:
    from pyqtgraph.exporters import ImageExporter

    with _AtSize(plot_widget, size, prepare, title) as item:
        exporter = ImageExporter(item)
        exporter.parameters()["width"] = size[0]
        exporter.parameters().param("height").setValue(size[1], blockSignal=exporter.heightChanged)
        exporter.export(str(path))
    return QSize(*size)


def write_plot_svg(plot_widget: Any, path: str | Path, size: tuple[int, int] = PLOT_SIZE,
                   prepare: Callable[[], None] | None = None, title: str = "") -> Path:
    from pyqtgraph.exporters import SVGExporter

    with _AtSize(plot_widget, size, prepare, title) as item:
        exporter = SVGExporter(item)
        exporter.parameters()["width"] = size[0]
        exporter.parameters().param("height").setValue(size[1], blockSignal=exporter.heightChanged)
        text = exporter.export(toBytes=True).decode("utf-8")
    write_atomic(path, with_generic_fonts(svg_with_size(text, *size)))
    return Path(path)


def svg_with_size(text: str, width: int, height: int) -> str:
    """The root ``<svg>`` with an explicit width and height (pyqtgraph writes only ``viewBox``)."""
    return re.sub(r"<svg\b([^>]*?)\s*viewBox\s*=\s*", rf'<svg\1 width="{width}" height="{height}" viewBox=', text,
                  count=1)


GENERIC_FAMILIES = {"serif", "sans-serif", "monospace", "cursive", "fantasy", "system-ui"}


def with_generic_fonts(text: str) -> str:
    """Every ``font-family`` ends with a generic family: Qt writes the widget font's alias alone ("Sans
    Serif"), which fontconfig knows but renderers without it (resvg) do not, and they drew no text."""

    def fix(match: re.Match[str]) -> str:
        families = [f.strip().strip('"').replace("&quot;", "").strip() for f in match.group(1).split(",")]
        if any(f.lower() in GENERIC_FAMILIES for f in families):
            return match.group(0)
        return f'font-family="{match.group(1)}, sans-serif"'

    return re.sub(r'font-family="([^"]*)"', fix, text)


def write_plots(panel: Any, folder: str | Path, fmt: str) -> list[Path]:
    """Every plot of the results panel into ``folder`` as ``<name>.png`` or ``<name>.svg`` (the time
    breakdown bar included), returning the files written."""
    if fmt not in ("png", "svg"):
        raise ValueError(f"plots export as png or svg, not {fmt!r}")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name, view in panel.plot_views().items():
        path = out / f"{name}.{fmt}"
        writer = write_plot_png if fmt == "png" else write_plot_svg
        # The Gantt redraws for the export's width, its bars cut to the view (SVG does not clip).
        prepare = (lambda v=view: v.refresh_bars(clip=True)) if name == "timeline" else None
        writer(view.plot_widget, path, prepare=prepare, title=view.export_title())
        if name == "timeline":
            view.refresh_bars()  # unclipped again, for panning on screen
        written.append(path)
    if panel.breakdown.segments:
        path = out / f"time-breakdown.{fmt}"
        panel.breakdown.save_png(path) if fmt == "png" else panel.breakdown.save_svg(path)
        written.append(path)
    return written


def write_result_csv(result: Result, folder: str | Path) -> list[Path]:
    """metrics.csv (with units), timeline.csv, links.csv and memory.csv, by the engine's writer."""
    from tilewright.engine.results.csv_export import write_csv

    return write_csv(result, folder)


def write_trace(result: Result, path: str | Path) -> Path:
    """Chrome Trace Event JSON (``traceEvents``), readable by Perfetto and chrome://tracing."""
    from tilewright.engine.results.chrome_trace import write_chrome_trace

    target = Path(path) if Path(path).suffix else Path(f"{path}.json")
    write_chrome_trace(result, target)
    return target
