"""Undo commands: one class per gesture, each changing only the model (never a view).

A command computes the new project when it is built, through the pure edits of ``studio.tree_edit``; a
refused edit raises ``EditRefused`` there and nothing reaches the undo stack. Redo and undo then just
swap two immutable project values, which makes them exact and cheap (unchanged subtrees are shared).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from PySide6.QtGui import QUndoCommand
from tilewright.engine.ir.hardware import Component, Memory
from tilewright.engine.ir.project import CanvasLayout, Project
from tilewright.studio.document import Change, ProjectDocument
from tilewright.studio.tree_edit import (
    EditRefused,
    FieldPath,
    add_child,
    add_memory,
    drop_keys,
    friendly,
    remove_children,
    rename_keys,
    set_field,
    split_path,
)

Position = tuple[float, float]


class SnapshotCommand(QUndoCommand):
    """Replace the project by ``after`` on redo and by ``before`` on undo."""

    def __init__(
        self,
        doc: ProjectDocument,
        after: Project,
        text: str,
        change: Change,
        path: str = "",
        renamed: tuple[str, str] | None = None,
    ):
        super().__init__(text)
        self.doc = doc
        self.before = doc.project
        self.after = after
        self.change = change
        self.path = path
        self.renamed = renamed

    def redo(self) -> None:
        self.doc.apply(self.after, self.change, self.path, self.renamed)

    def undo(self) -> None:
        back = (self.renamed[1], self.renamed[0]) if self.renamed else None
        path = self.renamed[0] if self.renamed and self.path == self.renamed[1] else self.path
        self.doc.apply(self.before, self.change, path, back)


def _with_hardware(project: Project, hardware: Component, positions: dict[str, Position] | None = None) -> Project:
    update: dict[str, Any] = {"hardware": hardware}
    if positions is not None:
        update["canvas"] = CanvasLayout(positions=positions, notes=project.canvas.notes)
    return project.model_copy(update=update)


_UNIT_SUFFIXES = ("_bytes_per_s", "_bytes", "_s", "_w", "_mm2", "_usd", "_flops")


def _label(component: Component | None, field: FieldPath) -> str:
    """"hbm capacity" for ("memories", 0, "capacity_bytes"): the Edit menu says "Undo Set gpu hbm capacity"."""
    parts: list[str] = []
    for i, key in enumerate(field):
        if isinstance(key, int):
            mems = component.memories if component is not None and field[i - 1] == "memories" else []
            parts[-1] = mems[key].name if key < len(mems) else f"{parts[-1]} {key}"
            continue
        text = str(key)
        for suffix in _UNIT_SUFFIXES:
            if text.endswith(suffix) and text != suffix:
                text = text[: -len(suffix)]
                break
        parts.append(text.replace("_", " "))
    return " ".join(p for p in parts if p not in ("interconnect", "compute")) or " ".join(parts)


class SetComponentField(SnapshotCommand):
    """Set one field of the component at ``path`` (``field`` may reach into compute, memories, …)."""

    def __init__(self, doc: ProjectDocument, path: str, field: FieldPath, value: Any):
        project = doc.project
        hardware = set_field(project.hardware, path, field, value)
        renamed = None
        positions = None
        new_path = path
        if field == ("name",):
            new_path = "/".join([*split_path(path)[:-1], str(value)])
            if new_path != path:
                renamed = (path, new_path)
                positions = rename_keys(project.canvas.positions, path, new_path)
        after = _with_hardware(project, hardware, positions)
        change = Change.structure if renamed else Change.component
        name = split_path(path)[-1]
        text = f"Set {name} {_label(project.hardware.find(path), field)}"
        super().__init__(doc, after, text, change, new_path, renamed)


class AddChild(SnapshotCommand):
    """Add ``child`` under ``parent`` (renamed if taken; an interconnect is added if now needed)."""

    def __init__(self, doc: ProjectDocument, parent: str, child: Component):
        hardware, self.child_path = add_child(doc.project.hardware, parent, child)
        after = _with_hardware(doc.project, hardware)
        super().__init__(doc, after, f"Add {split_path(self.child_path)[-1]}", Change.structure)


class RemoveChildren(SnapshotCommand):
    """Remove components (and their canvas positions) — one command for a multi-selection delete."""

    def __init__(self, doc: ProjectDocument, paths: list[str]):
        if not paths:
            raise EditRefused("nothing selected")
        hardware = remove_children(doc.project.hardware, paths)
        positions = drop_keys(doc.project.canvas.positions, paths)
        after = _with_hardware(doc.project, hardware, positions)
        names = ", ".join(split_path(p)[-1] for p in paths)
        super().__init__(doc, after, f"Remove {names}", Change.structure)


class AddMemory(SnapshotCommand):
    def __init__(self, doc: ProjectDocument, path: str, memory: Memory):
        hardware = add_memory(doc.project.hardware, path, memory)
        after = _with_hardware(doc.project, hardware)
        super().__init__(doc, after, f"Add {memory.name} to {split_path(path)[-1]}", Change.component, path)


class MoveOnCanvas(SnapshotCommand):
    """Where items were dropped: one command per drag gesture, pushed on mouse release."""

    def __init__(self, doc: ProjectDocument, moves: dict[str, Position]):
        positions = dict(doc.project.canvas.positions)
        positions.update({k: (float(x), float(y)) for k, (x, y) in moves.items()})
        after = doc.project.model_copy(
            update={"canvas": CanvasLayout(positions=positions, notes=doc.project.canvas.notes)}
        )
        names = ", ".join(split_path(p)[-1] for p in moves)
        super().__init__(doc, after, f"Move {names}", Change.canvas)


class SetMappingField(SnapshotCommand):
    """Set one mapping field (validated with the whole mapping); ``text`` names the gesture in the Edit menu
    ("Overlap expert all-to-all") where "Set mapping <field>" would read as code."""

    def __init__(self, doc: ProjectDocument, field: str, value: Any, text: str | None = None):
        data = doc.project.mapping.model_dump(mode="json")
        data[field] = value
        try:
            mapping = type(doc.project.mapping).model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err.get("loc", ()))
            text = friendly(str(err.get("msg", "invalid")))
            raise EditRefused(f"{loc}: {text}" if loc else text) from None
        after = doc.project.model_copy(update={"mapping": mapping})
        super().__init__(doc, after, text or f"Set mapping {field}", Change.mapping)


class ReplaceWorkload(SnapshotCommand):
    """Import a model config: the workload changes, hardware and mapping stay."""

    def __init__(self, doc: ProjectDocument, workload: Any, text: str = "Import model"):
        after = doc.project.model_copy(update={"workload": workload})
        super().__init__(doc, after, text, Change.workload)


class AddChildAt(SnapshotCommand):
    """A component dropped from the library: added under ``parent`` and placed where it was dropped,
    in one step (undo removes it and its position together)."""

    def __init__(self, doc: ProjectDocument, parent: str, child: Component, position: Position):
        hardware, self.child_path = add_child(doc.project.hardware, parent, child)
        positions = dict(doc.project.canvas.positions)
        positions[self.child_path] = (float(position[0]), float(position[1]))
        after = _with_hardware(doc.project, hardware, positions)
        super().__init__(doc, after, f"Add {split_path(self.child_path)[-1]}", Change.structure)


GRID_TOPOLOGIES = ("mesh", "torus", "ring")


class AddLink(SnapshotCommand):
    """A link drawn between child instances ``a`` and ``b`` of the component at ``path`` (row-major
    instance indices over all its children). An ``edges`` interconnect gains the pair; a level with no
    interconnect, or a switch-like one, becomes ``edges`` with its bandwidth and latency kept (``converted``
    says from what). Grids (mesh, torus, ring) already join neighbours, so drawing there is refused."""

    def __init__(self, doc: ProjectDocument, path: str, a: int, b: int):
        from tilewright.studio.tree_edit import component_at, default_interconnect

        level = component_at(doc.project.hardware, path)
        if a == b:
            raise EditRefused("a link needs two different instances")
        pair = (min(a, b), max(a, b))
        ic = level.interconnect
        self.converted = ic.topology.value if ic is not None and ic.topology.value != "edges" else None
        if ic is not None and ic.topology.value in GRID_TOPOLOGIES:
            raise EditRefused(f"the {ic.topology.value} here already links neighbours; links are drawn by hand "
                              "only between components joined by 'edges', a switch or nothing")
        if ic is not None and ic.topology.value == "fully-connected":
            raise EditRefused("every pair here is already linked (fully connected)")
        base = (ic or default_interconnect(level.kind)).model_dump(mode="json")
        pairs = [tuple(p) for p in (base.get("edge_list") or [])] if ic is not None and not self.converted else []
        if pair in pairs or pair[::-1] in pairs:
            raise EditRefused(f"instances {pair[0]} and {pair[1]} are already linked")
        base.update(topology="edges", edge_list=[*pairs, pair], dims=None, group_size=None)
        hardware = set_field(doc.project.hardware, path, ("interconnect",), base)
        after = _with_hardware(doc.project, hardware)
        super().__init__(doc, after, f"Link {pair[0]} – {pair[1]} in {split_path(path)[-1]}", Change.component, path)
