"""Drawing a link: Shift-drag (or drag in link mode) from one instance to another on the canvas.

A dashed line follows the mouse; releasing over another instance pushes ONE ``AddLink`` command (the
level's interconnect gains the pair). Releasing anywhere else, or on a refused edit, changes nothing and
says why in the status bar. The scene hands the mouse to this object between press and release.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QLineF, QPointF, Qt
from PySide6.QtWidgets import QGraphicsLineItem, QGraphicsSceneMouseEvent
from tilewright.studio.commands import AddLink
from tilewright.studio.model.level_cells import instance_name
from tilewright.studio.tree_edit import EditRefused
from tilewright.studio.ui.canvas import style
from tilewright.studio.ui.canvas.layout import auto_positions

if TYPE_CHECKING:
    from tilewright.studio.ui.canvas.grid_item import GridItem
    from tilewright.studio.ui.canvas.scene import LevelScene


class LinkGesture:
    def __init__(self, scene: LevelScene, start: QPointF):
        self.scene = scene
        grid = scene.grid_at(start)
        assert grid is not None
        self.source: tuple[GridItem, int] = (grid, grid.cell_at(start) or 0)
        origin = grid.instance_center(self.source[1])
        self.line = QGraphicsLineItem(QLineF(origin, start))
        self.line.setPen(style.cosmetic_pen(style.SELECTED, 2.5, Qt.PenStyle.DashLine))
        self.line.setZValue(100)
        scene.addItem(self.line)

    @staticmethod
    def starts(scene: LevelScene, event: QGraphicsSceneMouseEvent) -> bool:
        """A link starts on a left press with Shift held (or in link mode) over an instance."""
        if event.button() != Qt.MouseButton.LeftButton or scene.doc.read_only:
            return False
        wanted = bool(event.modifiers() & Qt.KeyboardModifier.ShiftModifier) or getattr(scene, "link_mode", False)
        grid = scene.grid_at(event.scenePos()) if wanted else None
        return grid is not None and grid.cell_at(event.scenePos()) is not None

    def move(self, pos: QPointF) -> None:
        line = self.line.line()
        self.line.setLine(QLineF(line.p1(), pos))

    def finish(self, pos: QPointF) -> bool:
        self.scene.removeItem(self.line)
        grid = self.scene.grid_at(pos)
        cell = grid.cell_at(pos) if grid is not None else None
        if grid is None or cell is None:
            self.scene.message.emit("no link drawn: release the drag over another component instance")
            return False
        a, b = self._global(*self.source), self._global(grid, cell)
        if a == b:
            return False
        doc, path = self.scene.doc, self.scene.selection.level
        try:
            command = AddLink(doc, path, a, b)
        except EditRefused as exc:
            self.scene.message.emit(f"no link drawn: {exc.reason}")
            return False
        doc.push(command)
        names = f"{instance_name(self.source[0].component, self.source[1])} – {instance_name(grid.component, cell)}"
        note = f" (the {command.converted} here became hand-drawn links)" if command.converted else ""
        self.scene.message.emit(f"linked {names}{note}")
        return True

    def _global(self, grid: GridItem, cell: int) -> int:
        """Instance index over all children of the level, as ``edge_list`` counts them."""
        level = self.scene.level
        for place in auto_positions(level, self.scene.selection.level, {}):
            if place.path == grid.path:
                return place.first_instance + cell
        return cell
