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

Every file is written atomically (``engine.io.atomic``): images are encoded in memory and written with
``write_atomic_bytes``, so a studio killed mid-export leaves the earlier file whole, never a truncated one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRectF, QSize
from tilewright.engine.io import save_project
from tilewright.engine.io.atomic import atomic_folder, write_atomic, write_atomic_bytes
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

    def __init__(self, plot_widget: Any, size: tuple[int, int], prepare: Callable[[], None] | None, title: str = ""):
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


def write_plot_png(
    plot_widget: Any,
    path: str | Path,
    size: tuple[int, int] = PLOT_SIZE,
    prepare: Callable[[], None] | None = None,
    title: str = "",
) -> QSize:
    from pyqtgraph.exporters import ImageExporter

    with _AtSize(plot_widget, size, prepare, title) as item:
        exporter = ImageExporter(item)
        exporter.parameters()["width"] = size[0]
        exporter.parameters().param("height").setValue(size[1], blockSignal=exporter.heightChanged)
        write_image(exporter.export(toBytes=True), path)
    return QSize(*size)


def image_format(path: str | Path) -> str:
    """The format ``path``'s suffix names ("PNG" without one); ``ValueError`` for one Qt cannot write.

    The bytes must match the name: a screenshot saved as ``x.jpg`` used to hold PNG bytes, which viewers
    that trust the suffix (and upload forms that check it) refuse."""
    from PySide6.QtGui import QImageWriter

    suffix = Path(path).suffix.lower().lstrip(".")
    if not suffix:
        return "PNG"
    known = sorted(bytes(f.data()).decode() for f in QImageWriter.supportedImageFormats())
    if suffix not in known:
        raise ValueError(f"cannot write '.{suffix}' images; name a file ending in one of: {', '.join(known)}")
    return suffix.upper()


def image_bytes(image: Any, fmt: str = "PNG") -> bytes:
    """A ``QImage`` or ``QPixmap`` encoded in memory as ``fmt`` (PNG, JPG, BMP, WEBP…)."""
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buffer, fmt):
        raise OSError(f"could not encode the image as {fmt} ({image.width()}x{image.height()})")
    buffer.close()
    return bytes(data.data())


def png_bytes(image: Any) -> bytes:
    """A ``QImage`` or ``QPixmap`` encoded as PNG in memory."""
    return image_bytes(image, "PNG")


def write_image(image: Any, path: str | Path) -> Path:
    """``image`` in the format ``path``'s suffix names (PNG without one), written atomically (a killed
    export leaves the old file whole). An unknown suffix raises ``ValueError`` before anything is written."""
    try:
        fmt = image_format(path)
    except ValueError as exc:
        raise OSError(str(exc)) from None
    write_atomic_bytes(path, image_bytes(image, fmt))
    return Path(path)


def write_plot_svg(
    plot_widget: Any,
    path: str | Path,
    size: tuple[int, int] = PLOT_SIZE,
    prepare: Callable[[], None] | None = None,
    title: str = "",
) -> Path:
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
    return re.sub(
        r"<svg\b([^>]*?)\s*viewBox\s*=\s*", rf'<svg\1 width="{width}" height="{height}" viewBox=', text, count=1
    )


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


PLOT_NAMES = ("timeline", "links", "memory", "time-breakdown")


def plot_files(fmt: str) -> tuple[str, ...]:
    """The file names a plots export in ``fmt`` may write (what an earlier export left, and may be replaced)."""
    return tuple(f"{name}.{fmt}" for name in PLOT_NAMES)


def write_plots(panel: Any, folder: str | Path, fmt: str) -> list[Path]:
    """Every plot of the results panel into ``folder`` as ``<name>.png`` or ``<name>.svg`` (the time
    breakdown bar included), returning the files written.

    The plots belong to one run, so the folder is replaced whole (``atomic_folder``, as the CSV export
    does): a studio killed mid-export leaves the earlier export complete, never plots of two runs. A folder
    holding anything else (other files, or the other format's plots) is refused with ``InputError``."""
    if fmt not in ("png", "svg"):
        raise ValueError(f"plots export as png or svg, not {fmt!r}")
    names: list[str] = []
    with atomic_folder(folder, allowed=plot_files(fmt)) as tmp:
        for name, view in panel.plot_views().items():
            writer = write_plot_png if fmt == "png" else write_plot_svg
            # The Gantt redraws for the export's width, its bars cut to the view (SVG does not clip).
            prepare = (lambda v=view: v.refresh_bars(clip=True)) if name == "timeline" else None
            # A view may name more in a figure than on screen (the links plot's legend: every curve).
            whole = getattr(view, "full_legend", None)
            with whole() if whole is not None else nullcontext():
                writer(view.plot_widget, tmp / f"{name}.{fmt}", prepare=prepare, title=view.export_title())
            if name == "timeline":
                view.refresh_bars()  # unclipped again, for panning on screen
            names.append(f"{name}.{fmt}")
        if panel.breakdown.segments:
            path = tmp / f"time-breakdown.{fmt}"
            panel.breakdown.save_png(path) if fmt == "png" else panel.breakdown.save_svg(path)
            names.append(path.name)
    return [Path(folder) / n for n in names]


def write_result_csv(result: Result, folder: str | Path) -> list[Path]:
    """metrics.csv (with units), timeline.csv, links.csv and memory.csv, by the engine's writer, which
    replaces the folder whole and refuses one holding other files (``InputError``)."""
    from tilewright.engine.results.csv_export import write_csv

    return write_csv(result, folder)


def write_trace(result: Result, path: str | Path) -> Path:
    """Chrome Trace Event JSON (``traceEvents``), readable by Perfetto and chrome://tracing."""
    from tilewright.engine.results.chrome_trace import write_chrome_trace

    target = Path(path) if Path(path).suffix else Path(f"{path}.json")
    write_chrome_trace(result, target)
    return target
