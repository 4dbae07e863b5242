"""The workload dock: what model runs (read-only summary) and how it is split (editable parallel degrees).

Mapping edits go through ``SetMappingField`` like every other edit; the full placement editor
(drag stages onto the canvas) arrives later and will share the same command.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QFormLayout, QGroupBox, QLabel, QVBoxLayout, QWidget

from studio.commands import SetMappingField
from studio.document import ProjectDocument
from studio.tree_edit import EditRefused
from studio.ui.fields import ValueEditor
from studio.units import COUNT

MAPPING_FIELDS = [
    ("tp", "Tensor parallel (tp)"),
    ("pp", "Pipeline parallel (pp)"),
    ("dp", "Data parallel (dp)"),
    ("micro_batch", "Micro-batch (samples)"),
    ("global_batch", "Global batch (samples)"),
]

# Shown for transformer-like specs, in this order, when present.
WORKLOAD_FIELDS = [
    ("layers", "layers"), ("hidden", "hidden size"), ("heads", "attention heads"), ("kv_heads", "KV heads"),
    ("ffn", "FFN width"), ("seq_len", "sequence (tokens)"), ("vocab", "vocabulary (tokens)"),
    ("arch", "architecture"), ("image_size", "image (pixels)"), ("layer_sizes", "layer widths"),
]


def workload_rows(spec: Any) -> list[tuple[str, str]]:
    rows = [("model", f"{getattr(spec, 'name', '') or '(unnamed)'} · {spec.kind}")]
    for attr, label in WORKLOAD_FIELDS:
        value = getattr(spec, attr, None)
        if value is not None:
            rows.append((label, ", ".join(map(str, value)) if isinstance(value, list) else str(value)))
    return rows


class WorkloadPanel(QWidget):
    def __init__(self, doc: ProjectDocument, parent: QWidget | None = None):
        super().__init__(parent)
        self.doc = doc
        self.model_box = QGroupBox("Model", self)
        self.model_form = QFormLayout(self.model_box)
        self.mapping_box = QGroupBox("Mapping", self)
        mapping_form = QFormLayout(self.mapping_box)
        self.run_label = QLabel(self)
        self.run_label.setWordWrap(True)
        self.editors: dict[str, ValueEditor] = {}
        for field, label in MAPPING_FIELDS:
            editor = ValueEditor(getattr(doc.project.mapping, field), COUNT, self._checker(field), parent=self)
            editor.committed.connect(lambda v, f=field, e=editor: self._commit(f, v, e))
            mapping_form.addRow(label, editor)
            self.editors[field] = editor
        self.devices_label = QLabel(self)
        mapping_form.addRow("Devices used", self.devices_label)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.model_box)
        layout.addWidget(self.mapping_box)
        layout.addWidget(self.run_label)
        layout.addStretch(1)
        for sig in (doc.mappingChanged, doc.workloadChanged, doc.projectReplaced, doc.structureChanged,
                    doc.componentChanged):
            sig.connect(self.refresh)
        self.refresh()

    def refresh(self, *_args: Any) -> None:
        project = self.doc.project
        while self.model_form.rowCount():
            self.model_form.removeRow(0)
        for label, value in workload_rows(project.workload):
            self.model_form.addRow(label, QLabel(value))
        m = project.mapping
        for field, editor in self.editors.items():
            editor.set_value(getattr(m, field))
            editor.setEnabled(not self.doc.read_only)
        hw = project.hardware
        if any(c.growable for _, c in hw.walk()):
            self.devices_label.setText(f"tp·pp·dp = {m.devices} devices (the machine grows to fit)")
        else:
            self.devices_label.setText(f"tp·pp·dp = {m.devices} of {hw.device_count()} devices")
        run = project.run
        self.run_label.setText(
            f"<span style='color:#566573'>run: {run.mode.value} · {run.dtype.value} · "
            f"{run.engine.value} engine</span>"
        )

    def _checker(self, field: str):  # noqa: ANN202 - returns a Check
        def check(value: Any) -> str | None:
            try:
                SetMappingField(self.doc, field, value)
            except EditRefused as exc:
                return exc.reason
            return None

        return check

    def _commit(self, field: str, value: Any, editor: ValueEditor) -> None:
        try:
            self.doc.push(SetMappingField(self.doc, field, value))
        except EditRefused as exc:
            editor.show_error(exc.reason)
