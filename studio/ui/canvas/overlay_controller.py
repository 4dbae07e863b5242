"""Keeps the colours on the canvas in step with the model and the run.

Two things can colour the level on screen: the mapping (each device by its pipeline stage, each cell
labelled with its layers) and, after a run, the heat map (devices by busy share, links by utilisation,
at the shared time cursor or averaged). This controller follows the document's signals and the scene's
rebuilds, recomputes what changed (the stage layout only when the project changed, the cells only when
the level did) and hands each grid item its ``CellColours``; the legend follows ``changed``.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from tilewright.engine.results.result import Result
from tilewright.studio.mapping import StageLayout, stage_layout
from tilewright.studio.model.core_grid import CoreUse
from tilewright.studio.model.level_cells import GridCells, level_cells
from tilewright.studio.model.traffic_rows import port_loads
from tilewright.studio.ui.canvas.heat import (
    HeatFrame,
    LinkPlaces,
    grid_link_values,
    heat_frame,
    place_links,
    port_values,
    spoke_values,
)
from tilewright.studio.ui.canvas.overlay import CellColours, heat_colours, stage_colours

if TYPE_CHECKING:
    from tilewright.studio.ui.canvas.scene import LevelScene


class Overlay(Enum):
    stages = "stages"  # pipeline stages of the mapping
    cursor = "cursor"  # heat at the shared time cursor
    average = "average"  # heat averaged over the iteration
    off = "off"


class OverlayController(QObject):
    changed = Signal()  # what the legend shows changed
    resultChanged = Signal()  # a run arrived, or was forgotten with its project

    def __init__(self, scene: LevelScene):
        super().__init__(scene)
        self.scene = scene
        self.doc = scene.doc
        self.mode = Overlay.stages
        self.result: Result | None = None
        self.time = 0.0
        self.layout = StageLayout()
        self.cells: dict[str, GridCells] = {}
        self.frame: HeatFrame | None = None
        self._layout_of: object = None
        self._cells_of: tuple[object, ...] = ()
        self._places: tuple[tuple[object, ...], LinkPlaces] | None = None
        self._stage_colours: dict[str, CellColours] = {}  # for the current ``_cells_of``
        self._tagged: tuple[int, ...] = ()
        self.core_use: CoreUse | None = None  # the op of the last run whose cores the devices highlight
        self.doc.changed.connect(self.refresh)
        self.doc.projectReplaced.connect(self._forget_result)
        scene.rebuilt.connect(lambda _level_changed: self.refresh())
        self.refresh()

    # -- inputs -------------------------------------------------------------------------------------
    def set_mode(self, mode: Overlay) -> None:
        if mode is not self.mode:
            self.mode = mode
            self.refresh()

    def set_result(self, result: Result | None) -> None:
        """A run finished (or None): heat becomes available; the mode is the caller's choice."""
        self.result = result
        self.core_use = None
        self._places = None
        self.refresh()
        self.resultChanged.emit()

    def set_core_use(self, use: CoreUse | None) -> None:
        """Show which cores one op of the run uses (a row of ``Result.spatial_splits``), or none."""
        self.core_use = use
        for item in self.scene.grids.values():
            item.set_core_use(use if self.result is not None else None)

    def set_time(self, t: float) -> None:
        self.time = t
        if self.mode is Overlay.cursor:
            self.refresh()

    @property
    def heat_active(self) -> bool:
        return self.result is not None and self.mode in (Overlay.cursor, Overlay.average)

    def _forget_result(self) -> None:
        self.set_result(None)

    # -- work ---------------------------------------------------------------------------------------
    def _ensure(self) -> None:
        project = self.doc.project
        if self._layout_of is not project:
            self.layout = stage_layout(project)
            self._layout_of = project
        key = (id(self.layout), self.scene.selection.level, self.scene.level_node, id(self.scene.hardware))
        if self._cells_of != key:
            self.cells = level_cells(self.scene.level, self.scene.selection.level, self.scene.level_node,
                                     self.layout.devices)
            self._cells_of = key
            self._places = None
            self._stage_colours = {}

    def places(self) -> LinkPlaces:
        keys = [(s.src, s.dst) for s in self.result.link_utilisation] if self.result is not None else []
        if self._places is None or self._places[0] != self._cells_of:
            self._places = (self._cells_of, place_links(keys, self.cells, self.scene.level_node))
        return self._places[1]

    def _stages_of(self, path: str) -> CellColours:
        if path not in self._stage_colours:
            self._stage_colours[path] = stage_colours(self.cells[path], self.layout)
        return self._stage_colours[path]

    def refresh(self) -> None:
        """Recolour every grid item of the level (cheap enough to call on every frame of the demo)."""
        self._ensure()
        grids = self.scene.grids
        if self.heat_active:
            t = self.time if self.mode is Overlay.cursor else None
            self.frame = heat_frame(self.result, [d.node for d in self.layout.devices], t)
            places = self.places()
            for path, item in grids.items():
                cells = self.cells.get(path)
                if not cells:
                    item.set_colours(None)
                    continue
                colours = heat_colours(cells, self.frame.devices, grid_link_values(places, path, self.frame.links))
                colours.labels = self._stages_of(path).labels  # which layers stay readable under the heat
                item.set_colours(colours)
            if self.scene.links is not None:
                self.scene.links.set_heat(spoke_values(places, self.frame.links))
            if self.scene.frame is not None:
                self.scene.frame.set_heat(port_values(places, self.frame.links))
        else:
            self.frame = None
            show = self.mode is Overlay.stages and not self.layout.problem
            for path, item in grids.items():
                item.set_colours(self._stages_of(path) if show and self.cells.get(path) else None)
            if self.scene.links is not None:
                self.scene.links.set_heat(None)
            if self.scene.frame is not None:
                self.scene.frame.set_heat(None)
        if self.scene.tags is not None:
            show_tags = self.mode is Overlay.stages and not self.layout.problem  # heat needs the room
            tagged = {item: self._stages_of(p) for p, item in grids.items() if show_tags and self.cells.get(p)}
            key = (id(self.scene.tags), *(id(c) for c in tagged.values()))
            if key != self._tagged:  # tags move only when the stages do, not on every demo frame
                self._tagged = key
                self.scene.tags.set_tags(self.layout, tagged)
        for item in grids.values():  # items are new after a rebuild
            item.set_core_use(self.core_use if self.result is not None else None)
        if self.scene.frame is not None:  # DRAM port load of the run on the shown instance's port boxes
            ports = self.result.dram_ports if self.result is not None else []
            span = self.result.iteration_time_s if self.result is not None else 0.0
            self.scene.frame.set_port_loads(port_loads(ports, self.scene.level_node, span) if ports else None)
        self.changed.emit()
