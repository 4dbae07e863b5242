"""Keeps the colours on the canvas in step with the model and the run.

Three things can colour the level on screen: the mapping (each device by its pipeline stage, each cell
labelled with its layers) and, after a run, the heat map (devices by busy share, links by utilisation,
at the shared time cursor or averaged) or the traffic by collective (each link in the colours of what it
carried: expert all-to-all, data-parallel all-reduce, …; ``canvas.traffic``). This controller follows the
document's signals and the scene's rebuilds, recomputes what changed (the stage layout only when the
project changed, the cells only when the level did) and hands each grid item its ``CellColours``; the
legend follows ``changed``.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from tilewright.engine.results.result import Result
from tilewright.studio.mapping import StageLayout, stage_layout
from tilewright.studio.model.core_grid import CoreUse
from tilewright.studio.model.level_cells import GridCells, level_cells
from tilewright.studio.model.link_carriage import LinkCarriage, link_carriage
from tilewright.studio.model.parallel_groups import GroupKind, Groups, parallel_groups
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
from tilewright.studio.ui.canvas.overlay import (
    CellColours,
    group_colours,
    heat_colours,
    stage_colours,
    traffic_colours,
)
from tilewright.studio.ui.canvas.traffic import (
    carried_by_key,
    drawn_categories,
    grid_link_traffic,
    inside_categories,
    outside_categories,
    spoke_traffic,
)

if TYPE_CHECKING:
    from tilewright.studio.ui.canvas.scene import LevelScene


class Overlay(Enum):
    stages = "stages"  # pipeline stages of the mapping
    cursor = "cursor"  # heat at the shared time cursor
    average = "average"  # heat averaged over the iteration
    traffic = "traffic"  # links in the colours of the collectives they carried
    experts = "experts"  # devices by expert-parallel group (the all-to-all's members)
    context = "context"  # devices by context-parallel ring
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
        self._group_colours: dict[tuple[str, GroupKind], CellColours] = {}  # likewise
        self._groups: dict[GroupKind, Groups | None] = {}  # for the current layout
        self._tagged: tuple[int, ...] = ()
        self.core_use: CoreUse | None = None  # the op of the last run whose cores the devices highlight
        self._carriage: tuple[Result, LinkCarriage] | None = None
        self.doc.changed.connect(self.refresh)
        self.doc.projectReplaced.connect(self._forget_result)
        scene.rebuilt.connect(lambda _level_changed: self.refresh())
        self.refresh()

    # -- inputs -------------------------------------------------------------------------------------
    def set_mode(self, mode: Overlay) -> None:
        if mode is not self.mode:
            self.mode = mode
            self.refresh()

    def set_result(self, result: Result | None, carriage: LinkCarriage | None = None) -> None:
        """A run finished (or None): heat becomes available; the mode is the caller's choice. ``carriage``
        (what each link carried) may come prepared by the worker; otherwise it is summed when first shown."""
        self.result = result
        self._carriage = (result, carriage) if result is not None and carriage is not None else None
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

    @property
    def traffic_active(self) -> bool:
        return self.result is not None and self.mode is Overlay.traffic

    @property
    def carriage(self) -> LinkCarriage:
        """What each link of the run carried, by category (empty without a run)."""
        if self.result is None:
            return LinkCarriage()
        if self._carriage is None or self._carriage[0] is not self.result:
            self._carriage = (self.result, link_carriage(self.result.timeline))
        return self._carriage[1]

    def traffic_where(self) -> tuple[set[str], dict[str, set[str]], set[str]]:
        """Which categories a link drawn at this level carried; per category, the grids whose cells hide
        links that carried it (both ends inside one cell); and the categories links leaving the opened level
        carried: what the traffic key says of each."""
        if self.result is None:
            return set(), {}, set()
        self._ensure()
        places = self.places()
        carried = carried_by_key(self.result, self.carriage)
        return (drawn_categories(places, carried), inside_categories(places, carried),
                outside_categories(places, carried))

    def _forget_result(self) -> None:
        self.set_result(None)

    # -- work ---------------------------------------------------------------------------------------
    def _ensure(self) -> None:
        project = self.doc.project
        if self._layout_of is not project:
            self.layout = stage_layout(project)
            self._layout_of = project
            self._groups = {}
            self._group_colours = {}
        key = (id(self.layout), self.scene.selection.level, self.scene.level_node, id(self.scene.hardware))
        if self._cells_of != key:
            self.cells = level_cells(self.scene.level, self.scene.selection.level, self.scene.level_node,
                                     self.layout.devices)
            self._cells_of = key
            self._places = None
            self._stage_colours = {}
            self._group_colours = {}

    def places(self) -> LinkPlaces:
        keys = [(s.src, s.dst) for s in self.result.link_utilisation] if self.result is not None else []
        if self._places is None or self._places[0] != self._cells_of:
            self._places = (self._cells_of, place_links(keys, self.cells, self.scene.level_node))
        return self._places[1]

    @property
    def group_kind(self) -> GroupKind | None:
        """The groups the mode shows, if it shows groups."""
        return {Overlay.experts: GroupKind.expert, Overlay.context: GroupKind.context}.get(self.mode)

    def groups(self, kind: GroupKind) -> Groups | None:
        """The layout's expert-parallel or context-parallel groups (None: the degree is 1, or no layout)."""
        self._ensure()
        if kind not in self._groups:
            self._groups[kind] = parallel_groups(self.doc.project, self.layout, kind)
        return self._groups[kind]

    def _groups_of(self, path: str, groups: Groups) -> CellColours:
        key = (path, groups.kind)
        if key not in self._group_colours:
            self._group_colours[key] = group_colours(self.cells[path], groups)
        return self._group_colours[key]

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
                self.scene.links.set_traffic(None)
                self.scene.links.set_heat(spoke_values(places, self.frame.links))
            if self.scene.frame is not None:
                self.scene.frame.set_heat(port_values(places, self.frame.links))
        elif self.traffic_active:
            self.frame = None
            self._paint_traffic()
        else:
            self.frame = None
            show = self.mode is Overlay.stages and not self.layout.problem
            kind = self.group_kind
            groups = self.groups(kind) if kind is not None else None
            for path, item in grids.items():
                if groups is not None and self.cells.get(path):
                    item.set_colours(self._groups_of(path, groups))
                    continue
                item.set_colours(self._stages_of(path) if show and self.cells.get(path) else None)
            if self.scene.links is not None:
                self.scene.links.set_heat(None)
                self.scene.links.set_traffic(None)
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

    def _paint_traffic(self) -> None:
        """Links in the colours of what they carried; devices keep their own colour, labelled with their layers."""
        assert self.result is not None
        places = self.places()
        carried = carried_by_key(self.result, self.carriage)
        for path, item in self.scene.grids.items():
            cells = self.cells.get(path)
            if not cells:
                item.set_colours(None)
                continue
            colours = traffic_colours(cells, grid_link_traffic(places, path, carried))
            colours.labels = self._stages_of(path).labels
            item.set_colours(colours)
        if self.scene.links is not None:
            self.scene.links.set_heat(None)
            self.scene.links.set_traffic(spoke_traffic(places, carried, self.scene.links.bundled))
        if self.scene.frame is not None:
            self.scene.frame.set_heat(None)
