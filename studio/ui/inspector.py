"""The inspector: the selected component's properties, with units, validated as you type.

Each field asks the real model whether it would accept a value (``tree_edit.set_field`` re-validates
the whole tree with pydantic), shows the reason when it would not, and commits accepted values through
an undo command. When the selection stays on a component of the same shape, the editors are updated in
place, so Tab moves on normally after a commit.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any, Literal

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFormLayout,
    QGroupBox,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)
from tilewright.engine.ir.hardware import Component, ComponentKind, MemoryKind, Topology
from tilewright.studio.commands import SetComponentField
from tilewright.studio.document import ProjectDocument
from tilewright.studio.mapping import display_hardware
from tilewright.studio.summary import key_figures
from tilewright.studio.tree_edit import EditRefused, FieldPath, get_field, set_field
from tilewright.studio.ui.fields import ChoiceEditor, EdgesEditor, FlagEditor, ValueEditor, _Editor
from tilewright.studio.ui.outline import grown_note, grown_pair
from tilewright.studio.ui.selection import Selection
from tilewright.studio.units import (
    AREA,
    BYTES,
    BYTES_PER_S,
    COUNT,
    DOLLARS,
    FLOPS,
    FRACTION,
    SECONDS,
    WATTS,
    Unit,
)


@dataclass(frozen=True)
class Prop:
    section: str
    label: str
    field: FieldPath
    unit: Unit | None = None
    editor: Literal["value", "choice", "flag", "edges"] = "value"
    choices: tuple[str, ...] = ()
    optional: bool = False
    tip: str = ""


def props_for(comp: Component) -> list[Prop]:
    """The editable properties of ``comp``, grouped in sections, in display order."""
    props = [
        Prop("Component", "Name", ("name",), tip="letters, digits, '_', '.', '-'"),
        Prop("Component", "Kind", ("kind",), editor="choice", choices=tuple(k.value for k in ComponentKind)),
        Prop("Component", "Rows", ("rows",), COUNT, tip="instances of this component: rows × cols"),
        Prop("Component", "Columns", ("cols",), COUNT),
        Prop("Component", "Growable", ("growable",), editor="flag", tip="rows grow to fit the devices a run needs"),
    ]
    if comp.compute is not None:
        for dt in comp.compute.peak_flops:
            props.append(Prop("Compute", f"Peak {dt.value}", ("compute", "peak_flops", dt.value), FLOPS))
        props.append(
            Prop("Compute", "Vector", ("compute", "vector_flops"), FLOPS, optional=True,
                 tip="FLOP/s of the vector units; empty = peak / 16")
        )
        props.append(Prop("Compute", "Tensor cores", ("compute", "tensor_cores"), COUNT))
    for i, m in enumerate(comp.memories):
        where = f"ports on {', '.join(e.value for e in m.attach)}" if m.attach else "local"
        section = f"Memory · {m.name} ({m.kind.value.upper()}, {where})"
        props += [
            Prop(section, "Kind", ("memories", i, "kind"), editor="choice", choices=tuple(k.value for k in MemoryKind)),
            Prop(section, "Ports on", ("memories", i, "attach"), editor="edges",
                 tip="edges of the child grid carrying this memory's ports (DRAM beside a wafer's dies); "
                     "local: a private memory in every instance"),
            Prop(section, "Ports per edge", ("memories", i, "ports_per_edge"), COUNT),
            Prop(section, "Capacity", ("memories", i, "capacity_bytes"), BYTES),
            Prop(section, "Bandwidth", ("memories", i, "bandwidth_bytes_per_s"), BYTES_PER_S, tip="per port"),
            Prop(section, "Latency", ("memories", i, "latency_s"), SECONDS),
            Prop(section, "Efficiency", ("memories", i, "efficiency"), FRACTION, tip="achievable fraction, (0, 1]"),
        ]
    if comp.interconnect is not None:
        sec = "Interconnect (joins the children)"
        props += [
            Prop(sec, "Topology", ("interconnect", "topology"), editor="choice",
                 choices=tuple(t.value for t in Topology)),
            Prop(sec, "Link bandwidth", ("interconnect", "link_bandwidth_bytes_per_s"), BYTES_PER_S,
                 tip="per link, per direction"),
            Prop(sec, "Link latency", ("interconnect", "link_latency_s"), SECONDS),
            Prop(sec, "Parallel links", ("interconnect", "links"), COUNT),
            Prop(sec, "Efficiency", ("interconnect", "efficiency"), FRACTION),
        ]
    props += [
        Prop("Physical (per instance)", "Area", ("area_mm2",), AREA, optional=True),
        Prop("Physical (per instance)", "Power", ("power_w",), WATTS, optional=True),
        Prop("Physical (per instance)", "Cost", ("cost_usd",), DOLLARS, optional=True),
    ]
    return props


class Inspector(QWidget):
    def __init__(self, doc: ProjectDocument, selection: Selection, parent: QWidget | None = None):
        super().__init__(parent)
        self.doc = doc
        self.selection = selection
        self.path: str | None = None
        self.editors: dict[FieldPath, _Editor] = {}
        self._props: list[Prop] = []
        self.header = QLabel(self)
        self.header.setWordWrap(True)
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.scroll = QScrollArea(self)
        self.scroll.setWidgetResizable(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.header)
        layout.addWidget(self.scroll, 1)
        selection.changed.connect(self.refresh)
        selection.levelChanged.connect(self.refresh)
        doc.componentChanged.connect(self.refresh)
        doc.structureChanged.connect(self.refresh)
        doc.projectReplaced.connect(self.refresh)
        self.refresh()

    def editor(self, *field: str | int) -> _Editor:
        return self.editors[tuple(field)]

    def component(self) -> Component | None:
        return self.doc.project.hardware.find(self.path) if self.path else None

    def refresh(self, *_args: Any) -> None:
        self.path = self.selection.current
        comp = self.component()
        if comp is None:
            self.header.setText("<i>nothing selected</i>")
            self.scroll.takeWidget()
            self.editors, self._props = {}, []
            return
        figures = " · ".join(key_figures(comp)) or "no compute or memory"
        grown = self._grown_text(comp)
        self.header.setText(
            f"<b>{html.escape(comp.name)}</b> · {comp.kind.value}"
            f"{f' · {comp.rows} × {comp.cols}' if comp.count > 1 else ''}"
            f"<br><span style='color:#566573'>{html.escape(figures)} (per instance, as drawn)</span>"
            + (f"<br><span style='color:#566573'>{html.escape(grown)}</span>" if grown else "")
            + f"<br><span style='color:#7f8c8d'>{html.escape(self.path or '')}</span>"
        )
        props = props_for(comp)
        if props == self._props:
            for prop in props:
                self.editors[prop.field].set_value(get_field(comp, prop.field))
        else:
            self._build(comp, props)
        self.scroll.widget().setEnabled(not self.doc.read_only)

    def _grown_text(self, comp: Component) -> str:
        """How the run grows the selected component past its drawing (``outline.grown_note``: the counts the
        Hierarchy shows), or "" when it runs as drawn."""
        project = self.doc.project
        shown = display_hardware(project).find(self.path) if self.path else None
        if shown is None or shown.device_count() == comp.device_count():
            return ""
        pair = grown_pair(shown, comp)
        return grown_note(*pair, project.mapping.devices) if pair is not None else ""

    def _build(self, comp: Component, props: list[Prop]) -> None:
        content = QWidget()
        column = QVBoxLayout(content)
        column.setContentsMargins(0, 0, 0, 0)
        self.editors = {}
        forms: dict[str, QFormLayout] = {}
        for prop in props:
            if prop.section not in forms:
                box = QGroupBox(prop.section, content)
                forms[prop.section] = QFormLayout(box)
                forms[prop.section].setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
                column.addWidget(box)
            editor = self._make_editor(comp, prop, content)
            label = QLabel(prop.label)
            if prop.tip:
                label.setToolTip(prop.tip)
                editor.setToolTip(prop.tip)
            forms[prop.section].addRow(label, editor)
            self.editors[prop.field] = editor
        column.addStretch(1)
        self.scroll.setWidget(content)
        self._props = props

    def _make_editor(self, comp: Component, prop: Prop, parent: QWidget) -> _Editor:
        value = get_field(comp, prop.field)
        check = self._checker(prop.field)
        editor: _Editor
        if prop.editor == "choice":
            editor = ChoiceEditor(str(value), list(prop.choices), check, parent)
        elif prop.editor == "flag":
            editor = FlagEditor(bool(value), "", check, parent)
        elif prop.editor == "edges":
            editor = EdgesEditor(list(value or []), check, parent)
        else:
            editor = ValueEditor(value, prop.unit, check, optional=prop.optional, parent=parent)
        editor.committed.connect(lambda v, f=prop.field, e=editor: self._commit(f, v, e))
        return editor

    def _checker(self, field: FieldPath):  # noqa: ANN202 - returns a Check
        def check(value: Any) -> str | None:
            if self.path is None:
                return "nothing selected"
            try:
                set_field(self.doc.project.hardware, self.path, field, value)
            except EditRefused as exc:
                return exc.reason
            return None

        return check

    def _commit(self, field: FieldPath, value: Any, editor: _Editor) -> None:
        if self.path is None or self.doc.read_only:
            return
        try:
            self.doc.push(SetComponentField(self.doc, self.path, field, value))
        except EditRefused as exc:
            editor.show_error(exc.reason)
