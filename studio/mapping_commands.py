"""Undo commands of the mapping editor: Auto-map, an option applied at once, and placing layers by
drag-and-drop.

Like every command (``studio.commands``), each computes the new project when built (a refused edit
raises ``EditRefused`` and never reaches the undo stack) and redo/undo swap immutable values.
"""

from __future__ import annotations

from typing import Any

from tilewright.engine.ir.mapping import Mapping
from tilewright.studio.commands import SnapshotCommand
from tilewright.studio.document import Change, ProjectDocument
from tilewright.studio.mapping import LayerRange, format_ranges, stage_layout
from tilewright.studio.mapping_edit import checked_auto_mapping, checked_option, place_layers


def degrees_text(m: Mapping) -> str:
    """"tp 1 · pp 4 · dp 16 · ep 8": the parallel degrees, ep and cp only when they split anything."""
    parts = [f"tp {m.tp}", f"pp {m.pp}", f"dp {m.dp}"]
    parts += [f"{name} {value}" for name, value in (("ep", m.ep), ("cp", m.cp)) if value > 1]
    if m.expert_tp is not None and m.expert_tp != m.tp:  # experts folded over tp × cp × dp (ep 1 too)
        parts.append(f"expert tp {m.expert_tp}")
    return " · ".join(parts)


class AutoMap(SnapshotCommand):
    """Set degrees (ep, cp, the ZeRO stage and FSDP among them) and the placement strategy at once,
    clearing placements made by hand; ep and cp must pass the engine's checks."""

    def __init__(self, doc: ProjectDocument, **degrees: Any):
        mapping = checked_auto_mapping(doc.project, **degrees)
        after = doc.project.model_copy(update={"mapping": mapping})
        text = f"Auto-map {degrees_text(mapping)} ({mapping.placement.value})"
        super().__init__(doc, after, text, Change.mapping)


class SetMappingOption(SnapshotCommand):
    """Set one option of the mapping (recomputation, the MoE token exchange, an overlap) and nothing else;
    refused with the engine's message when the option brings a problem (``mapping_edit.checked_option``)."""

    def __init__(self, doc: ProjectDocument, field: str, value: Any, text: str):
        mapping = checked_option(doc.project, field, value)
        super().__init__(doc, doc.project.model_copy(update={"mapping": mapping}), text, Change.mapping)


class PlaceLayers(SnapshotCommand):
    """Place workload layers [first, last) on ``devices`` (indices of the elaborated system)."""

    def __init__(self, doc: ProjectDocument, layers: LayerRange, devices: list[int], target: str = ""):
        layout = stage_layout(doc.project, chunks=1)
        mapping = place_layers(doc.project.mapping, layout, layers, devices)
        after = doc.project.model_copy(update={"mapping": mapping})
        where = f" on {target}" if target else ""
        super().__init__(doc, after, f"Place {format_ranges([layers])}{where}", Change.mapping)
        self.mapping = mapping
