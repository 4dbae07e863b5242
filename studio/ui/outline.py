"""The hierarchy outline: every component with its grid shape and how many devices it holds.

Selecting a row reveals the component on the canvas (the canvas goes to its parent's level); selecting
on the canvas selects the row. The tree is rebuilt on structural change — it is a handful of rows even
for a wafer, because a tile array is one row, not 4,096.

The dock is often narrow (at 1280 × 720, once a grid chip's op chooser widens the canvas, it had 237 px
and the name column 57, which showed the icons and no name at all). The dock asks for the names' width
(up to ``MAX_MIN_WIDTH``); when everything still does not fit, the Kind column goes first (the icon and the
name's tooltip say the kind too), then long names end in "…" (the tooltip starts with the whole name) —
down to ``NAME_FLOOR`` — so the counts stay whole: a horizontal scroll bar used to cut the Devices column
(a "cerebras-wse2-waferllm" at 1280 × 720 left its "32" half off the panel).
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTreeWidget, QTreeWidgetItem, QWidget
from tilewright.engine.ir.hardware import Component
from tilewright.studio.document import ProjectDocument
from tilewright.studio.icons import kind_icon
from tilewright.studio.mapping import display_hardware
from tilewright.studio.summary import one_line
from tilewright.studio.ui.selection import Selection

PATH_ROLE = Qt.ItemDataRole.UserRole
MAX_MIN_WIDTH = 320  # px: the outline never asks for more (the canvas and the inspector need theirs)
NAME_FLOOR = 90  # px: a name column is never elided below this (the icon and a few letters); past it, scroll


def instance_text(c: Component, designed: Component | None = None) -> str:
    """"5 × 4 = 20", "1 (grows)", or "8 (grown)" for a growable component the run grows past its design
    (``designed`` is the component as drawn, ``c`` as the run sees it)."""
    text = f"{c.rows} × {c.cols} = {c.count}" if c.rows > 1 and c.cols > 1 else str(c.count)
    if designed is not None and designed.count != c.count:
        return f"{text} (grown)"
    return f"{text} (grows)" if c.growable else text


def grown_note(c: Component, designed: Component, needed: int) -> str:
    """Why a grown row's counts are not the drawn ones: "8 per node × 8 nodes = 64 devices (1 node drawn;
    the run grows it to hold the mapping's 64 devices)"."""
    per = c.device_count() // max(c.count, 1)
    return (f"{per} per {c.name} × {c.count} {c.name}s = {c.device_count()} devices ({designed.count} "
            f"{c.name} drawn; the run grows it to hold the mapping's {needed} devices)")


def grown_pair(shown: Component, designed: Component) -> tuple[Component, Component] | None:
    """The component the run grows (as shown, as drawn), or None when nothing grows."""
    if shown.count != designed.count:
        return shown, designed
    for a, b in zip(shown.children, designed.children, strict=False):
        found = grown_pair(a, b)
        if found is not None:
            return found
    return None


class Outline(QTreeWidget):
    COLUMNS = ("Component", "Kind", "Instances", "Devices")

    def __init__(self, doc: ProjectDocument, selection: Selection, parent: QWidget | None = None):
        super().__init__(parent)
        self.doc = doc
        self.selection = selection
        self.items: dict[str, QTreeWidgetItem] = {}
        self._syncing = False
        self.setColumnCount(len(self.COLUMNS))
        self.setHeaderLabels(list(self.COLUMNS))
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.setUniformRowHeights(True)
        header = self.header()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Fixed)  # sized by ``fit_columns``
        for col in range(1, len(self.COLUMNS)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(False)
        self.headerItem().setToolTip(1, "kind of component (hidden when the panel is narrow: the icon shows it)")
        self.headerItem().setToolTip(3, "devices (computing components) in all instances")
        self.itemSelectionChanged.connect(self._on_tree_selection)
        self.itemDoubleClicked.connect(self._on_double_click)
        for sig in (doc.structureChanged, doc.projectReplaced, doc.mappingChanged):  # devices grow with dp, tp…
            sig.connect(self.rebuild)
        doc.componentChanged.connect(self._on_component_changed)
        selection.changed.connect(self._apply_selection)
        self.rebuild()

    def rebuild(self) -> None:
        self._syncing = True
        collapsed = {p for p, it in self.items.items() if not it.isExpanded()}
        self.clear()
        self.items = {}
        # Counts are the run's: a growable DGX cluster drawn as one node runs on as many nodes as the
        # mapping needs (``display_hardware``, which the canvas draws too) — "Devices 8" beside a header and
        # a canvas saying 64 read as a contradiction.
        self._add(None, display_hardware(self.doc.project), "", self.doc.project.hardware)
        for path, item in self.items.items():
            item.setExpanded(path not in collapsed)
        self._syncing = False
        self._apply_selection(self.selection.paths)
        self.fit_columns()

    def _width(self, col: int) -> int:
        """What column ``col`` needs: its widest cell (with the indentation, for the names) or its title."""
        return max(self.sizeHintForColumn(col), self.header().sectionSizeHint(col))

    def fit_columns(self) -> None:
        """Kind if there is room for it beside whole names; the name column takes whatever is left over,
        eliding long names rather than pushing the counts off the panel."""
        room = self.viewport().width()
        name = self._width(0)
        others = {col: self._width(col) for col in range(1, len(self.COLUMNS))}
        kind_fits = name + sum(others.values()) <= room
        self.setColumnHidden(1, not kind_fits)
        shown = sum(w for col, w in others.items() if col != 1 or kind_fits)
        self.header().resizeSection(0, max(room - shown, min(name, NAME_FLOOR)))
        self.updateGeometry()  # the minimum width follows the names

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """Wide enough for the names, instances and devices (not Kind), so the dock keeps them visible
        when the canvas asks for more room; capped, so a very long name scrolls instead."""
        hint = super().minimumSizeHint()
        need = self._width(0) + sum(self._width(col) for col in range(2, len(self.COLUMNS)))
        frame = self.width() - self.viewport().width()
        return QSize(max(hint.width(), min(need + frame, MAX_MIN_WIDTH)), hint.height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self.fit_columns()

    def _add(self, parent: QTreeWidgetItem | None, comp: Component, prefix: str, designed: Component) -> None:
        """One row for ``comp`` (as the run sees it) and its children; ``designed`` is the same component
        as drawn, whose counts differ where the run grows it."""
        path = f"{prefix}/{comp.name}" if prefix else comp.name
        devices = comp.device_count()
        item = QTreeWidgetItem([comp.name, comp.kind.value, instance_text(comp, designed), str(devices)])
        item.setIcon(0, kind_icon(comp.kind.value))
        item.setData(0, PATH_ROLE, path)
        item.setToolTip(0, one_line(comp))
        if devices != designed.device_count():  # this row holds (or is) the component the run grows
            pair = grown_pair(comp, designed)
            if pair is not None:
                note = grown_note(*pair, self.doc.project.mapping.devices)
                for col in (2, 3):
                    item.setToolTip(col, note)
        for col in (2, 3):
            item.setTextAlignment(col, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if parent is None:
            self.addTopLevelItem(item)
        else:
            parent.addChild(item)
        self.items[path] = item
        for child, drawn in zip(comp.children, designed.children, strict=True):
            self._add(item, child, path, drawn)

    def _on_component_changed(self, _path: str) -> None:
        # A field edit can change counts all the way up (rows of a die → devices of the wafer).
        self.rebuild()

    def _apply_selection(self, paths: list[str]) -> None:
        self._syncing = True
        try:
            self.clearSelection()
            for p in paths:
                item = self.items.get(p)
                if item is not None:
                    item.setSelected(True)
                    self.scrollToItem(item)
            if paths and paths[-1] in self.items:
                self.setCurrentItem(self.items[paths[-1]], 0, self.selectionModel().SelectionFlag.NoUpdate)
        finally:
            self._syncing = False

    def _on_tree_selection(self) -> None:
        if self._syncing:
            return
        paths = [str(it.data(0, PATH_ROLE)) for it in self.selectedItems()]
        if len(paths) == 1:
            self.selection.reveal(paths[0])
        else:
            self.selection.select(paths)

    def _on_double_click(self, item: QTreeWidgetItem, _col: int) -> None:
        """Open the component on the canvas (show its children) when it has any."""
        path = str(item.data(0, PATH_ROLE))
        comp = self.doc.project.hardware.find(path)
        if comp is not None and comp.children:
            self.selection.set_level(path)
