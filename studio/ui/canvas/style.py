"""Colours, pens and sizes of the canvas in one place, so every view (and later the heat overlay) agrees."""

from __future__ import annotations

from functools import cache

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QGuiApplication, QPen

CELL = 100.0  # scene units per instance cell
GAP = 28.0  # between cells: where mesh links are drawn
PLANE_GAP = 200.0  # between the planes of a 3-D grid drawn side by side
ITEM_SPACING = 160.0  # between child items laid out automatically
MIN_CELL_PX = 14.0  # below this many pixels per cell a grid is drawn as one shaded block
DETAIL_CELL_PX = 70.0  # above this, cells carry their own text
SNAP = (CELL + GAP) / 4  # moves snap to a quarter of a cell step

BACKGROUND = QColor("#f4f6f8")
FRAME_FILL = QColor("#ffffff")
FRAME_EDGE = QColor("#b8c2cc")
TEXT = QColor("#1c2833")
MUTED_TEXT = QColor("#566573")
SELECTED = QColor("#e67e22")
LINK = QColor("#34495e")
SWITCH_FILL = QColor("#f4d03f")
SWITCH_EDGE = QColor("#7d6608")
MEMORY_FILL = QColor("#f8c471")
MEMORY_EDGE = QColor("#9a6408")

_KIND_FILL = {
    "system": "#d5dbdb",
    "node": "#aed6f1",
    "wafer": "#d7bde2",
    "package": "#d5d8dc",
    "chip": "#85c1e9",
    "die": "#a9cce3",
    "tile": "#76d7c4",
    "core": "#a3e4d7",
    "switch": "#f7dc6f",
}


def kind_fill(kind: str) -> QColor:
    return QColor(_KIND_FILL.get(kind, "#d5dbdb"))


def kind_edge(kind: str) -> QColor:
    return kind_fill(kind).darker(170)


def cosmetic_pen(color: QColor, width: float = 1.0, style: Qt.PenStyle = Qt.PenStyle.SolidLine) -> QPen:
    """A pen whose width is in pixels whatever the zoom, so a 64 × 64 mesh never turns into a smear."""
    pen = QPen(color, width, style)
    pen.setCosmetic(True)
    return pen


def label_font(bold: bool = False, point_delta: float = 0.0) -> QFont:
    """The application font, adjusted; cached per base size, since cells ask for fonts on every paint
    and presentation mode changes the base size. Callers must not modify the returned font."""
    return _label_font(bold, point_delta, QGuiApplication.font().pointSizeF())


@cache
def _label_font(bold: bool, point_delta: float, base_points: float) -> QFont:
    font = QFont(QGuiApplication.font())
    if point_delta:
        font.setPointSizeF(max(6.0, base_points + point_delta))
    font.setBold(bold)
    return font


# -- overlays: pipeline stages and the heat map ------------------------------------------------------
HEAT_LEVELS = 21  # 0 %, 5 %, … 100 %: heat is drawn in steps, so one brush serves many cells
_HEAT_STOPS = ((0.0, "#e8eef3"), (0.25, "#b7e1cd"), (0.5, "#f9e07f"), (0.75, "#f39c4b"), (1.0, "#c0392b"))


def stage_color(stage: int) -> QColor:
    """Pastel, well separated colours (golden-angle hues), so neighbouring stages never look alike
    and dark text stays readable on every one of them."""
    hue = (0.58 + stage * 0.381966) % 1.0
    sat = (0.42, 0.58, 0.34)[stage % 3]
    return QColor.fromHsvF(hue, sat, 0.96)


def heat_color(fraction: float) -> QColor:
    """Utilisation 0…1 on a cool-to-hot ramp (grey-blue, green, yellow, orange, red)."""
    f = min(1.0, max(0.0, fraction))
    for (x0, c0), (x1, c1) in zip(_HEAT_STOPS, _HEAT_STOPS[1:], strict=False):
        if f <= x1:
            t = (f - x0) / (x1 - x0)
            a, b = QColor(c0), QColor(c1)
            return QColor.fromRgbF(
                a.redF() + (b.redF() - a.redF()) * t,
                a.greenF() + (b.greenF() - a.greenF()) * t,
                a.blueF() + (b.blueF() - a.blueF()) * t,
            )
    return QColor(_HEAT_STOPS[-1][1])


@cache
def heat_palette() -> tuple[QColor, ...]:
    return tuple(heat_color(i / (HEAT_LEVELS - 1)) for i in range(HEAT_LEVELS))
