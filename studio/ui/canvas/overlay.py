"""What a grid item paints over its cells: pipeline stages (colour per stage, "L12–23" per cell) or
the heat map (colour per utilisation step), both as small integer arrays into a palette.

Colours are palette *indices* so the painters can batch one brush per index (``drawRects`` per colour),
and a 64 × 64 wafer far out is one tiny image built with a lookup table — cheap enough to rebuild every
frame of the demo animation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from PySide6.QtGui import QColor, QImage
from tilewright.engine.results import CATEGORIES
from tilewright.studio.mapping import StageLayout, format_ranges, to_ranges
from tilewright.studio.model.level_cells import GridCells
from tilewright.studio.model.palette import CATEGORY_COLOURS
from tilewright.studio.model.parallel_groups import GroupKind, Groups
from tilewright.studio.ui.canvas import style
from tilewright.studio.ui.canvas.layout import GridShape
from tilewright.studio.ui.canvas.traffic import dominant


@dataclass
class CellColours:
    """``pixels[cell, r, c]`` and ``cells[cell]`` index ``palette``; −1 keeps the kind's own colour."""

    palette: tuple[QColor, ...]
    pixels: np.ndarray
    cells: np.ndarray
    labels: list[str] | None = None  # extra lines per cell ("L12–23\nstage 3"): the layers it holds
    links: dict[tuple[int, int], int] = field(default_factory=dict)  # neighbour cells → palette index
    _lut: np.ndarray | None = None
    _images: dict[int, QImage] = field(default_factory=dict)

    def image(self, shape: GridShape, plane: int, fallback: QColor) -> QImage:
        """One plane as an image, one pixel per raster pixel (a block far out is drawn from this)."""
        cached = self._images.get(plane)
        if cached is not None:
            return cached
        if self._lut is None:
            self._lut = np.array([c.rgba() for c in self.palette] + [fallback.rgba()], dtype=np.uint32)
        n = shape.rows * shape.cols
        block = self.pixels[plane * n : (plane + 1) * n]
        _, rh, rw = self.pixels.shape
        full = np.full((n, rh, rw), -1, np.int32)
        full[: len(block)] = block
        grid = full.reshape(shape.rows, shape.cols, rh, rw).transpose(0, 2, 1, 3).reshape(shape.rows * rh, -1)
        argb = np.ascontiguousarray(self._lut[grid])  # −1 picks the fallback, the last entry
        image = QImage(argb.data, argb.shape[1], argb.shape[0], QImage.Format.Format_ARGB32).copy()
        self._images[plane] = image
        return image


def _dominant(pixels: np.ndarray) -> np.ndarray:
    """Most common non-negative index per cell (−1 for a cell with none)."""
    flat = pixels.reshape(len(pixels), -1)
    if flat.shape[1] == 1:
        return flat[:, 0].copy()
    out = np.full(len(flat), -1, flat.dtype)
    for i, row in enumerate(flat):
        row = row[row >= 0]
        if row.size:
            values, counts = np.unique(row, return_counts=True)
            out[i] = values[np.argmax(counts)]
    return out


def stage_colours(cells: GridCells, layout: StageLayout) -> CellColours:
    """Colour each device by its pipeline stage; label each cell with the layers it holds."""
    stage_of = np.full(len(layout.devices) + 1, -1, np.int32)  # the extra slot answers index −1
    for s, devs in enumerate(layout.stage_devices):
        stage_of[devs] = s
    pixels = stage_of[cells.raster]
    labels = []
    for i in range(len(cells.nodes)):  # every device of the cell, not only the drawn samples
        stages = [int(s) for s in np.unique(stage_of[cells.members[i]]) if s >= 0]
        if len(stages) == 1:
            labels.append(f"{layout.label(stages[0])}\nstage {stages[0]}")
        elif stages:
            layers = [j for s in stages for a, b in layout.stage_layers[s] for j in range(a, b)]
            labels.append(f"{format_ranges(to_ranges(layers))}\n{len(stages)} stages")
        else:
            labels.append("")
    palette = tuple(style.stage_color(s) for s in range(max(1, layout.stages)))
    return CellColours(palette, pixels, _dominant(pixels), labels)


def heat_colours(cells: GridCells, device_values: np.ndarray, links: dict[tuple[int, int], float]) -> CellColours:
    """Colour devices by utilisation (``device_values`` 0…1, NaN = unknown) and neighbour links by theirs."""
    top = style.HEAT_LEVELS - 1
    values = np.append(device_values, np.nan)[cells.raster]  # index −1 reads the NaN
    known = ~np.isnan(values)
    pixels = np.where(known, np.rint(np.nan_to_num(values) * top), -1).astype(np.int32)
    flat = values.reshape(len(values), -1)
    counts = (~np.isnan(flat)).sum(axis=1)
    means = np.nansum(flat, axis=1) / np.maximum(counts, 1)
    per_cell = np.where(counts > 0, np.rint(means * top), -1).astype(np.int32)
    link_idx = {k: int(round(min(1.0, max(0.0, v)) * top)) for k, v in links.items()}
    return CellColours(style.heat_palette(), pixels, per_cell, None, link_idx)


def traffic_colours(cells: GridCells, links: dict[tuple[int, int], dict[str, float]]) -> CellColours:
    """Devices in their own colour; each neighbour link in the colour of the category that kept it busy
    longest (``canvas.traffic.dominant``), the palette being the Gantt's category colours after an unused
    slot 0 (the painters skip index 0, "no traffic")."""
    palette = (style.LINK, *(QColor(CATEGORY_COLOURS[c]) for c in CATEGORIES))
    pixels = np.full(cells.raster.shape, -1, np.int32)
    per_cell = np.full(len(cells.raster), -1, np.int32)
    link_idx = {}
    for pair, split in links.items():
        category = dominant(split)
        if category is not None:
            link_idx[pair] = 1 + CATEGORIES.index(category)
    return CellColours(palette, pixels, per_cell, None, link_idx)


GROUP_NAMES = {GroupKind.expert: "ep group", GroupKind.context: "cp ring"}


def group_colours(cells: GridCells, groups: Groups) -> CellColours:
    """Colour each device by its expert-parallel or context-parallel group (the stage colours, cycled); label
    each cell with the group(s) it holds ("ep group 3", "cp rings 0–1")."""
    pixels = groups.of_device[cells.raster]
    name = GROUP_NAMES[groups.kind]
    labels = []
    for i in range(len(cells.nodes)):
        ids = [int(g) for g in np.unique(groups.of_device[cells.members[i]]) if g >= 0]
        if len(ids) == 1:
            labels.append(f"{name} {ids[0]}\nstage {groups.stage_of_group[ids[0]]}")
        elif ids:
            ranges = ", ".join(f"{a}" if b - a == 1 else f"{a}–{b - 1}" for a, b in to_ranges(ids))
            labels.append(f"{name.replace('group', 'groups').replace('ring', 'rings')} {ranges}")
        else:
            labels.append("")
    palette = tuple(style.stage_color(g) for g in range(max(1, groups.count)))
    return CellColours(palette, pixels, _dominant(pixels), labels)
