"""The workload dock: what model runs, its layers, and how it is split over the hardware.

Four parts, top to bottom: the model's figures (read-only); the mapping — parallel degrees (tp, pp, dp,
expert-parallel ep, context-parallel cp), the ZeRO stage and FSDP, micro- and global batch and a placement
strategy, applied together by **Auto-map** as ONE undo command (an ep or cp the engine cannot run is
refused with the engine's own check message, as the field is typed and again by Auto-map); under it, the
options that change no degree and apply at once, each its own undo command (activation recompute,
reducing gradients under the backward, the expert token exchange, the expert load imbalance, overlapping the
expert all-to-all, the fp8 recipe, the optimizer's precision, offloading state to host memory;
``studio.ui.mapping_options``); and the layer table (parameters, FLOPs and activations per sample, with
units, the stage holding each layer and, for chains of conv/fc layers, HyPar's data/model-parallel choice
with an Apply button; see ``studio.ui.hypar_column``). Selected layers drag onto the canvas, where a drop
on a tile, chip or selected group places them (``studio.ui.canvas.drops``). Every edit is an undo command;
the panel follows the model's signals.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QMimeData, Qt
from PySide6.QtGui import QColor, QIcon, QPixmap, QUndoCommand
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHeaderView,
    QLabel,
    QPushButton,
    QScrollArea,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)
from tilewright.engine.ir.mapping import PlacementStrategy
from tilewright.studio.document import ProjectDocument
from tilewright.studio.mapping import stage_layout
from tilewright.studio.mapping_commands import AutoMap
from tilewright.studio.mapping_edit import auto_mapping, new_parallel_problems
from tilewright.studio.mapping_layers import COLUMNS, NUMERIC_COLUMNS, STAGE_COLUMN, TIPS, layer_rows, totals
from tilewright.studio.tree_edit import EditRefused
from tilewright.studio.ui.canvas import style
from tilewright.studio.ui.canvas.drops import layers_mime
from tilewright.studio.ui.fields import ChoiceEditor, FlagEditor, ValueEditor
from tilewright.studio.ui.hypar_column import HYPAR_COLUMNS, HYPAR_TIPS, HyparSection
from tilewright.studio.ui.mapping_options import MappingOptions
from tilewright.studio.units import COUNT, plural

# (field, label, grid row, grid column); a count each. Rows 0–1 hold the parallel degrees, three a row.
# Row 1: the experts' tensor split (its label in the wide first column), ep beside it, cp; rows 2–3 the
# ZeRO stage and FSDP.
MAPPING_FIELDS = [
    ("tp", "tp", 0, 0), ("pp", "pp", 0, 2), ("dp", "dp", 0, 4), ("expert_tp", "expert tp", 1, 0), ("ep", "ep", 1, 2),
    ("cp", "cp", 1, 4),
    ("micro_batch", "micro-batch (samples)", 4, 0), ("global_batch", "global batch (samples)", 5, 0),
]
FLAG_FIELDS = ("zero", "fsdp")  # edited by a choice and a check box
MAPPING_TIPS = {
    "tp": "tensor parallel: devices sharing each layer's matrices",
    "pp": "pipeline parallel: stages the layers are split into",
    "dp": "data parallel: replicas of the whole pipeline",
    "ep": "expert parallel: the routed experts split over ep of the dp replicas, tokens sent to them and "
          "back all-to-all (mixture-of-experts models; must divide dp and the experts, or with expert tp "
          "below tp ep × expert tp must divide tp × dp)",
    "expert_tp": "expert tensor parallel: each routed expert split over this many of the tp ranks (default tp; "
                 "1: whole experts, the ep × expert tp expert ranks folded over tp × dp, Megatron-Core's ETP)",
    "cp": "context parallel: each sequence split over cp devices, keys and values passed around a ring "
          "(training; must divide the sequence; a stage takes tp × cp × dp devices)",
    "zero": "ZeRO stage: 1 shards optimizer states over the dp replicas, 2 gradients too, 3 weights too "
            "(gathered layer by layer)",
    "fsdp": "PyTorch FSDP full sharding: ZeRO stage 3 with the next layer's weights prefetched and each layer's "
            "gradient reduce-scatter behind the next layer's backward",
    "micro_batch": "samples per micro-batch",
    "global_batch": "samples per iteration, over all replicas",
}
ZERO_CHOICES = ["0 · none", "1 · optimizer", "2 · + gradients", "3 · + weights"]
ERROR_STYLE = "color: #c0392b;"
NOTE_STYLE = "color: #566573;"

# Shown for transformer-like specs, in this order, when present.
WORKLOAD_FIELDS = [
    ("layers", "layers"), ("hidden", "hidden size"), ("heads", "attention heads"), ("kv_heads", "KV heads"),
    ("ffn", "FFN width"), ("seq_len", "sequence (tokens)"), ("vocab", "vocabulary (tokens)"),
    ("arch", "architecture"), ("image_size", "image (pixels)"), ("layer_sizes", "layer widths"),
]


def _shown(m: Any, field: str) -> Any:
    """A degree as its editor shows it: expert tp None (= tp, ``Mapping.expert_tp``) as tp."""
    value = getattr(m, field)
    return m.tp if field == "expert_tp" and value is None else value


def workload_rows(spec: Any) -> list[tuple[str, str]]:
    rows = [("model", f"{getattr(spec, 'name', '') or '(unnamed)'} · {spec.kind}")]
    for attr, label in WORKLOAD_FIELDS:
        value = getattr(spec, attr, None)
        if value is not None:
            rows.append((label, ", ".join(map(str, value)) if isinstance(value, list) else str(value)))
        if attr == "layers" and getattr(spec, "mtp_layers", 0):
            # Multi-token prediction: extra depths after the head, trained only (engine/workloads/transformer_mtp).
            rows.append(("MTP depths", f"{spec.mtp_layers} (training only)"))
        if attr == "kv_heads":
            rows += _attention_rows(spec)
        if attr == "ffn" and getattr(spec, "moe", None) is not None:
            rows.append(("experts", _experts_text(spec.moe)))
        if attr == "ffn":
            rows += _block_rows(spec)
    return rows


def _block_rows(spec: Any) -> list[tuple[str, str]]:
    """How a decoder block is built, where its spec says (``GPTSpec``'s fields): the MLP's activation, the norm,
    which projections carry biases, a parallel attention + MLP block and the extra norms, and an attention window,
    all of which change its parameters, FLOPs or memory."""
    if not hasattr(spec, "qkv_bias"):
        return []
    biases = [name for name, on in (("QKV", spec.qkv_bias), ("attention output", spec.out_bias),
                                    ("MLP", spec.mlp_bias)) if on]
    parts = [f"{spec.activation} MLP", spec.norm, "biases on " + ", ".join(biases) if biases else "no biases"]
    if spec.parallel_block:
        parts.append(f"attention and MLP in parallel ({spec.parallel_norms} norm{'s' * (spec.parallel_norms > 1)})")
    parts += [text for text, on in (("sandwich norms", spec.sandwich_norm), ("QK norm", spec.qk_norm),
                                    ("attention sinks", spec.attention_sinks)) if on]
    rows = [("block", ", ".join(parts))]
    if spec.sliding_window is not None:
        layers = spec.sliding_window_layers
        where = ("every block" if layers == "all" else "even blocks, the others global" if layers == "even"
                 else f"all but every {layers}th block, which is global")
        rows.append(("attention window", f"{spec.sliding_window} tokens on {where}"))
    return rows


def _attention_rows(spec: Any) -> list[tuple[str, str]]:
    """The attention's widths when they are not hidden / heads: an explicit head width (Gemma's 256 at hidden
    3072) or multi-head latent attention's ranks, which set its FLOPs and its KV cache."""
    mla = getattr(spec, "mla", None)
    if mla is not None:
        q = mla.q_lora_rank if mla.q_lora_rank is not None else "none"
        return [("latent attention", f"KV rank {mla.kv_lora_rank}, Q rank {q}, "
                 f"head {mla.qk_nope_head_dim} + {mla.qk_rope_head_dim} rope, value {mla.v_head_dim}")]
    head_dim = getattr(spec, "head_dim", None)
    return [("head width", str(head_dim))] if head_dim is not None else []


def _experts_text(moe: Any) -> str:
    """What the ep editor splits: the routed experts, each token's share of them and the shared ones
    (``MoESpec``), e.g. "8 routed, top-2, FFN 14336 each"."""
    parts = [f"{moe.experts} routed, top-{moe.top_k}, FFN {moe.expert_ffn} each"]
    if moe.shared_experts:
        parts.append(f"{moe.shared_experts} shared")
    if moe.capacity_factor is not None:
        parts.append(f"capacity × {moe.capacity_factor:g}")
    if moe.first_dense_layers:
        parts.append(f"first {moe.first_dense_layers} blocks dense")
    if moe.layer_freq > 1:
        parts.append(f"MoE every {moe.layer_freq} blocks")
    return ", ".join(parts)


def _swatch(color: QColor) -> QIcon:
    pixmap = QPixmap(12, 12)
    pixmap.fill(color)
    return QIcon(pixmap)


class LayerTable(QTreeWidget):
    """One row per layer; a selection drags out as the range from its first to its last layer."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setColumnCount(len(COLUMNS) + len(HYPAR_COLUMNS))
        self.setHeaderLabels([*COLUMNS, *HYPAR_COLUMNS])
        for i, tip in enumerate((*TIPS, *HYPAR_TIPS)):
            self.headerItem().setToolTip(i, tip)
        self.setRootIsDecorated(False)
        self.setUniformRowHeights(True)
        self.setAlternatingRowColors(True)
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.setDragEnabled(True)
        self.setDragDropMode(QAbstractItemView.DragDropMode.DragOnly)
        self.setColumnHidden(COLUMNS.index("Kind"), True)  # in the tooltip; the name says it already
        for k in range(len(HYPAR_COLUMNS)):  # next to the layer names, not behind the figures
            self.header().moveSection(len(COLUMNS) + k, COLUMNS.index("Layer") + 1 + k)
        self.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.setMinimumHeight(160)

    def selected_range(self) -> tuple[int, int] | None:
        """[first, last) covering the selected layers (a gap in a selection is filled: stages are ranges)."""
        rows = [int(item.text(0)) for item in self.selectedItems()]
        return (min(rows), max(rows) + 1) if rows else None

    def mimeData(self, items: list[QTreeWidgetItem]) -> QMimeData:  # noqa: N802 - Qt override
        rows = [int(item.text(0)) for item in items]
        return layers_mime(min(rows), max(rows) + 1) if rows else QMimeData()

    def mimeTypes(self) -> list[str]:  # noqa: N802 - Qt override
        return [layers_mime(0, 1).formats()[0]]


class WorkloadPanel(QScrollArea):
    def __init__(self, doc: ProjectDocument, parent: QWidget | None = None):
        super().__init__(parent)
        self.doc = doc
        self.pending: dict[str, Any] = {}
        body = QWidget(self)
        self.setWidget(body)
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.model_box = QGroupBox("Model", body)
        self.model_form = QFormLayout(self.model_box)
        self.mapping_box = QGroupBox("Mapping", body)
        self._build_mapping()
        self.options = MappingOptions(doc, self._push_keeping_staged, body)
        self.overlap_ep = self.options.overlap_ep
        self.layers_box = QGroupBox("Layers", body)
        self.table = LayerTable(self.layers_box)
        self.totals_label = QLabel(self.layers_box)
        self.totals_label.setWordWrap(True)
        self.totals_label.setStyleSheet(NOTE_STYLE)
        hint = QLabel("Select layers and drag them onto a tile, chip or selected group on the canvas to "
                      "place them as a pipeline stage.", self.layers_box)
        hint.setWordWrap(True)
        hint.setStyleSheet(NOTE_STYLE)
        self.hypar = HyparSection(doc, self.layers_box)
        box = QVBoxLayout(self.layers_box)
        box.addWidget(self.totals_label)
        box.addWidget(self.hypar)
        box.addWidget(self.table, 1)
        box.addWidget(hint)
        self.run_label = QLabel(body)
        self.run_label.setWordWrap(True)
        layout = QVBoxLayout(body)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.model_box)
        layout.addWidget(self.mapping_box)
        layout.addWidget(self.options)
        layout.addWidget(self.layers_box, 1)
        layout.addWidget(self.run_label)
        for sig in (doc.mappingChanged, doc.workloadChanged, doc.projectReplaced, doc.structureChanged,
                    doc.componentChanged):
            sig.connect(self.refresh)
        self.refresh()

    # -- mapping form -------------------------------------------------------------------------------
    def _build_mapping(self) -> None:
        grid = QGridLayout(self.mapping_box)
        self.editors: dict[str, ValueEditor] = {}
        m = self.doc.project.mapping
        for field, label, row, col in MAPPING_FIELDS:
            check = self._degree_check(field) if field in ("ep", "expert_tp", "cp") else self._positive
            editor = ValueEditor(_shown(m, field), COUNT, check, parent=self)
            editor.setToolTip(MAPPING_TIPS[field])
            editor.committed.connect(lambda v, f=field: self._stage(f, v))
            text = QLabel(label, self.mapping_box)
            text.setToolTip(MAPPING_TIPS[field])
            grid.addWidget(text, row, col)
            grid.addWidget(editor, row, col + 1, 1, 1 if row < 2 else 5)
            self.editors[field] = editor
        self.zero = ChoiceEditor(ZERO_CHOICES[m.zero], ZERO_CHOICES, self._zero_check, parent=self)
        self.zero.setToolTip(MAPPING_TIPS["zero"])
        self.zero.committed.connect(lambda text: self._stage("zero", ZERO_CHOICES.index(text)))
        zero_label = QLabel("ZeRO", self.mapping_box)
        zero_label.setToolTip(MAPPING_TIPS["zero"])
        grid.addWidget(zero_label, 2, 0)
        grid.addWidget(self.zero, 2, 1, 1, 5)
        self.fsdp = FlagEditor(m.fsdp, "FSDP", lambda _v: None, parent=self)
        self.fsdp.setToolTip(MAPPING_TIPS["fsdp"])
        self.fsdp.committed.connect(self._stage_fsdp)
        grid.addWidget(self.fsdp, 3, 1, 1, 5)  # under the ZeRO choice it sets
        self.strategy = QComboBox(self.mapping_box)
        self.strategy.addItems([s.value for s in PlacementStrategy])
        self.strategy.setToolTip("order in which stages take devices: row-major, snake (neighbouring stages "
                                 "stay neighbours) or block (each stage a compact rectangle)")
        self.strategy.activated.connect(lambda _i: self._stage("placement", self.strategy.currentText()))
        grid.addWidget(QLabel("placement", self.mapping_box), 6, 0)
        grid.addWidget(self.strategy, 6, 1, 1, 5)
        self.auto_map = QPushButton("Auto-map", self.mapping_box)
        self.auto_map.setToolTip("apply these degrees and strategy; placements made by hand are replaced")
        self.auto_map.clicked.connect(self.apply_auto_map)
        grid.addWidget(self.auto_map, 7, 0, 1, 6)
        self.devices_label = QLabel(self.mapping_box)
        self.devices_label.setWordWrap(True)
        self.placement_label = QLabel(self.mapping_box)
        self.placement_label.setWordWrap(True)
        self.placement_label.setStyleSheet(NOTE_STYLE)
        self.error_label = QLabel(self.mapping_box)
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet(ERROR_STYLE)
        grid.addWidget(self.devices_label, 8, 0, 1, 6)
        grid.addWidget(self.placement_label, 9, 0, 1, 6)
        grid.addWidget(self.error_label, 10, 0, 1, 6)

    @staticmethod
    def _positive(value: Any) -> str | None:
        return None if isinstance(value, int) and value >= 1 else "must be ≥ 1"

    def _would_refuse(self, **change: Any) -> str | None:
        """The engine's own message if Auto-map with ``change`` on top of the degrees shown would run an
        ep or cp it cannot (``mapping_edit.new_parallel_problems``); other refusals wait for Auto-map."""
        try:
            mapping = auto_mapping(self.doc.project.mapping, **(self.degrees() | change))
        except EditRefused:
            return None
        return "; ".join(new_parallel_problems(self.doc.project, mapping)) or None

    def _degree_check(self, field: str) -> Any:
        def check(value: Any) -> str | None:
            return self._positive(value) or self._would_refuse(**{field: value})

        return check

    def _zero_check(self, text: str) -> str | None:
        return self._would_refuse(zero=ZERO_CHOICES.index(text))

    def _stage_fsdp(self, on: bool) -> None:
        self._stage("fsdp", on)
        if on:  # FSDP is ZeRO stage 3 with prefetch
            self._stage("zero", 3)
        self.zero.setEnabled(not on and not self.doc.read_only)

    def _stage(self, field: str, value: Any) -> None:
        """Remember a degree until Auto-map; nothing changes in the model yet."""
        self.pending[field] = value
        if field in self.editors:
            self.editors[field].set_value(value)
        elif field == "zero":
            self.zero.set_value(ZERO_CHOICES[value])
        elif field == "fsdp":
            self.fsdp.set_value(value)
        elif field == "placement":
            self.strategy.setCurrentText(value)
        self._show_devices()
        self.error_label.setText("")

    def degrees(self) -> dict[str, Any]:
        m = self.doc.project.mapping
        fields = [f for f, *_ in MAPPING_FIELDS] + list(FLAG_FIELDS)
        current = {f: getattr(m, f) for f in fields} | {"placement": m.placement.value}
        return current | self.pending

    def apply_auto_map(self) -> bool:
        """Push ONE ``AutoMap`` with every degree shown; a refusal is shown under the button."""
        try:
            self.doc.push(AutoMap(self.doc, **self.degrees()))
        except EditRefused as exc:
            self.error_label.setText(f"not applied: {exc.reason}")
            return False
        return True

    def set_overlap_ep(self, on: bool) -> bool:
        """Push ONE command setting ``mapping.overlap_ep_comm`` (``MappingOptions.set_option``)."""
        return self.options.set_option("overlap_ep_comm", on)

    def _push_keeping_staged(self, command: QUndoCommand) -> None:
        """Push an option's command; degrees typed but not yet applied stay staged (the model's change
        refreshes the panel, which would drop them)."""
        pending = dict(self.pending)
        self.doc.push(command)
        for field, value in pending.items():
            self._stage(field, value)
        self.zero.setEnabled(not self.degrees()["fsdp"] and not self.doc.read_only)

    # -- following the model ------------------------------------------------------------------------
    def refresh(self, *_args: Any) -> None:
        project = self.doc.project
        self.pending = {}
        self.error_label.setText("")
        while self.model_form.rowCount():
            self.model_form.removeRow(0)
        for label, value in workload_rows(project.workload):
            text = QLabel(value)
            text.setWordWrap(True)  # an MoE's experts or MLA's ranks run longer than the dock is wide
            self.model_form.addRow(label, text)
        m = project.mapping
        editable = not self.doc.read_only
        for field, editor in self.editors.items():
            editor.set_value(_shown(m, field))
            editor.setEnabled(editable)
        moe = getattr(project.workload, "moe", None) is not None
        self.editors["expert_tp"].setEnabled(editable and moe)
        self.editors["expert_tp"].setToolTip(MAPPING_TIPS["expert_tp"] if moe else
                                             "expert tensor parallel: the model has no mixture-of-experts layers")
        self.zero.set_value(ZERO_CHOICES[m.zero])
        self.zero.setEnabled(editable and not m.fsdp)
        self.fsdp.set_value(m.fsdp)
        self.fsdp.setEnabled(editable)
        self.strategy.setCurrentText(m.placement.value)
        self.strategy.setEnabled(editable)
        self.options.refresh()
        self.auto_map.setEnabled(editable)
        self.table.setDragEnabled(editable)
        self._show_devices()
        self._fill_layers()
        run = project.run
        self.run_label.setText(
            f"<span style='color:#566573'>run: {run.mode.value} · {run.dtype.value} · "
            f"{run.engine.value} engine</span>"
        )

    def _show_devices(self) -> None:
        d = self.degrees()
        n = d["tp"] * d["pp"] * d["dp"] * d["cp"]
        product = "tp·pp·dp·cp" if d["cp"] > 1 else "tp·pp·dp"
        hw = self.doc.project.hardware
        if any(c.growable for _, c in hw.walk()):
            self.devices_label.setText(f"{product} = {n} {plural('device', n)} (the machine grows to fit)")
        else:
            have = hw.device_count()
            self.devices_label.setText(f"{product} = {n} of {have} {plural('device', have)}")
        if d["ep"] > 1:
            self.devices_label.setText(f"{self.devices_label.text()} · ep {d['ep']}: each device holds "
                                       f"1/{d['ep']} of the routed experts")
        if self.pending:
            self.placement_label.setText("changed: press Auto-map to apply")

    def _fill_layers(self) -> None:
        project = self.doc.project
        try:
            rows = layer_rows(project)
        except (ValueError, TypeError) as exc:
            self.table.clear()
            self.totals_label.setText(f"no layers: {exc}")
            self.hypar.setVisible(False)
            return
        layout = stage_layout(project)
        self.hypar.refresh()
        self.table.clear()
        items = []
        for row in rows:
            stage = layout.layer_stage.get(row.index)
            item = QTreeWidgetItem(row.cells("" if stage is None else str(stage)))
            item.setToolTip(COLUMNS.index("Layer"), f"{row.name} · {row.kind}")
            for col in NUMERIC_COLUMNS:
                item.setTextAlignment(col, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if stage is not None:
                item.setIcon(STAGE_COLUMN, _swatch(style.stage_color(stage)))
            items.append(item)
        self.hypar.fill({row.index: item for row, item in zip(rows, items, strict=True)}, len(COLUMNS))
        self.table.setColumnHidden(len(COLUMNS), not self.hypar.choice.applies)
        self.table.setColumnHidden(len(COLUMNS) + 1, not self.hypar.shows_mapped)
        self.table.addTopLevelItems(items)
        self.totals_label.setText(totals(rows))
        m = project.mapping
        if layout.problem:
            self.placement_label.setText(f"no placement: {layout.problem}")
        elif layout.explicit:
            self.placement_label.setText(f"{layout.stages} {plural('stage', layout.stages)} placed by hand "
                                         "(Auto-map replaces them)")
        else:
            self.placement_label.setText(f"{layout.stages} {plural('stage', layout.stages)} placed by the "
                                         f"{m.placement.value} strategy")
