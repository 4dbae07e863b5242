"""What can be dropped on the canvas, and what each drop does (always ONE undo command).

- A library template: the component is added to the viewed level where it was dropped (``AddChildAt``);
  a memory template goes onto the component under the cursor (or the level itself).
- A range of layers from the workload panel: placed on the instance under the cursor — or on the whole
  selection when dropped onto a selected component — as explicit pipeline stages (``PlaceLayers``).
  A target holding fewer devices than a stage needs (tp × cp × dp) takes the group the placement strategy
  forms around it, so dropping onto one tile of a 16-tile stage does the expected thing.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from PySide6.QtCore import QMimeData, QPointF
from tilewright.studio.commands import AddChildAt, AddMemory
from tilewright.studio.mapping import format_ranges, stage_layout
from tilewright.studio.mapping_commands import PlaceLayers
from tilewright.studio.mapping_edit import group_around
from tilewright.studio.model.level_cells import instance_name
from tilewright.studio.templates import build_component, hbm_memory, template
from tilewright.studio.tree_edit import EditRefused

if TYPE_CHECKING:
    from tilewright.studio.ui.canvas.scene import LevelScene

MIME_TEMPLATE = "application/x-tilewright-template"
MIME_LAYERS = "application/x-tilewright-layers"


def layers_mime(first: int, last: int) -> QMimeData:
    """Layers [first, last) as drag data (with a text form for drops outside the studio)."""
    mime = QMimeData()
    mime.setData(MIME_LAYERS, json.dumps({"first": first, "last": last}).encode())
    mime.setText(f"layers {first}–{last - 1}")
    return mime


def template_mime(key: str) -> QMimeData:
    mime = QMimeData()
    mime.setData(MIME_TEMPLATE, key.encode())
    mime.setText(key)
    return mime


def accepts(mime: QMimeData | None) -> bool:
    return mime is not None and (mime.hasFormat(MIME_TEMPLATE) or mime.hasFormat(MIME_LAYERS))


def drop(scene: LevelScene, mime: QMimeData, pos: QPointF) -> bool:
    """Carry out a drop at scene position ``pos``; a refusal is reported on ``scene.message``."""
    if scene.doc.read_only:
        return False
    try:
        if mime.hasFormat(MIME_TEMPLATE):
            return _drop_template(scene, bytes(mime.data(MIME_TEMPLATE).data()).decode(), pos)
        if mime.hasFormat(MIME_LAYERS):
            data = json.loads(bytes(mime.data(MIME_LAYERS).data()).decode())
            return _drop_layers(scene, (int(data["first"]), int(data["last"])), pos)
    except EditRefused as exc:
        scene.message.emit(f"not dropped: {exc.reason}")
    return False


def _drop_template(scene: LevelScene, key: str, pos: QPointF) -> bool:
    t = template(key)
    doc = scene.doc
    if t.target == "memory":
        grid = scene.grid_at(pos)
        target = grid.path if grid is not None else scene.selection.level
        doc.push(AddMemory(doc, target, hbm_memory()))
        scene.message.emit(f"added {t.label} to {target}")
        return True
    at = scene.snapped(pos)
    command = AddChildAt(doc, scene.selection.level, build_component(key), (at.x(), at.y()))
    doc.push(command)
    scene.selection.select([command.child_path])
    scene.message.emit(f"added {command.child_path}")
    return True


def drop_target(scene: LevelScene, pos: QPointF) -> tuple[str, list[int]]:
    """(name, device indices) of what is under ``pos``: the selection if a selected component is hit,
    else the one instance under the cursor."""
    grid = scene.grid_at(pos)
    if grid is None:
        raise EditRefused("drop the layers onto a tile, chip or selected group")
    cells = scene.overlay.cells
    if grid.isSelected() and scene.selection.paths:
        paths = [p for p in scene.selection.paths if p in cells]
        devices = [d for p in paths for d in cells[p].all_devices()]
        return ", ".join(p.rpartition("/")[2] for p in paths), devices
    cell = grid.cell_at(pos)
    if cell is None or grid.path not in cells:
        raise EditRefused("drop the layers onto a tile, chip or selected group")
    return instance_name(grid.component, cell), cells[grid.path].devices(cell)


def _drop_layers(scene: LevelScene, layers: tuple[int, int], pos: QPointF) -> bool:
    doc = scene.doc
    name, devices = drop_target(scene, pos)
    if not devices:
        raise EditRefused(f"{name} holds no devices the run can use")
    m = doc.project.mapping
    size = m.stage_devices
    if len(devices) < size:
        devices = group_around(stage_layout(doc.project, chunks=1), devices[0], m)
        name = f"{name} and its group of {size}"
    command = PlaceLayers(doc, layers, devices, name)
    doc.push(command)
    stages = command.mapping.pp
    scene.message.emit(f"placed {format_ranges([layers])} on {name} · the pipeline now has {stages} stages")
    return True
