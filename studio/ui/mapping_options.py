"""The mapping's options: choices that change no parallel degree and no placement, so each applies at once
as its own undo step instead of waiting for Auto-map like the degrees above them.

Twenty-nine of them, in a group under the Mapping box of the workload dock. This module lays them out and
pushes their edits; what each one means, when it cannot matter and what its undo step is called live with its
kind, one module each:

- ``studio.ui.sharding_options``: whose FSDP runs the ZeRO-3 gathers (PyTorch FSDP2's copies), first in the group,
  right under the FSDP and ZeRO degrees;
- ``studio.ui.memory_options``: activation recompute (its layers, its modules) and offloading state to the
  node's host memory (``studio.ui.offload_editor``);
- ``studio.ui.overlap_options``: the data-parallel gradient reduction, the tensor-parallel collectives (and how
  the forward's reduce-scatters hide) and the first chunk's weight gather hidden behind compute;
- ``studio.ui.schedule_options``: the layers per virtual stage, the fused loss kernel and the CUDA graphs;
- ``studio.ui.expert_options``: the expert token exchange, its overlap, the delayed weight gradients and the
  expert load imbalance;
- ``studio.ui.precision_options``: the fp8 recipe and the bf16 layers at each end, the gradient buffer's dtype
  and Adam's moments and master weights;
- ``studio.ui.framework_options``: the options whose default is a framework era's, each showing what it
  resolves to: the layers offloaded per chunk (under the offload), the input-gradient all-reduce's overlap
  (beside the tensor-parallel overlap), and in a framework group of their own the host framework, the pipeline
  sends and Megatron's logging and checks.

A control whose option cannot matter for the mapping as applied is disabled, and its tooltip says why
(``disabled_reason``): the state follows the model, not degrees typed but not yet applied. A choice the
engine would refuse (recomputation under a HyPar partition, say) snaps back with the engine's own message
(``mapping_edit.checked_option``). The widget pushes commands through a callback of its panel, which keeps
the degrees the user has typed but not applied (the model's change refreshes the panel, which would drop
them). The editors beyond ``studio.ui.fields`` are in ``studio.ui.option_editors``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtGui import QUndoCommand
from PySide6.QtWidgets import QGridLayout, QGroupBox, QLabel, QWidget
from tilewright.engine.ir.mapping import Fp8Scaling, Recompute
from tilewright.engine.ir.project import Project
from tilewright.studio.document import ProjectDocument
from tilewright.studio.mapping_commands import SetMappingOption
from tilewright.studio.mapping_edit import checked_option, option_value
from tilewright.studio.tree_edit import EditRefused
from tilewright.studio.ui.expert_options import (
    DELAY_WGRAD_TEXT,
    DISPATCHER_LABELS,
    DISPATCHER_TEXT,
    EXPERT_FIELDS,
    EXPERT_TIPS,
    IMBALANCE_DEFAULT,
    IMBALANCE_TEXT,
    OVERLAP_EP_TEXT,
    expert_reason,
    expert_undo_text,
)
from tilewright.studio.ui.fields import Check, ChoiceEditor, FlagEditor, ValueEditor
from tilewright.studio.ui.framework_options import (
    DGRAD_LABELS,
    DGRAD_TEXT,
    ERA_FIELDS,
    FRAMEWORK_FIELDS,
    FRAMEWORK_TIPS,
    HOST_FRAMEWORK_LABELS,
    HOST_FRAMEWORK_TEXT,
    NAN_TEXT,
    NUM_ZEROS_TEXT,
    OFFLOAD_LAYERS_TEXT,
    P2P_LABELS,
    P2P_TEXT,
    PARAMS_NORM_TEXT,
    TIMING_LABELS,
    TIMING_TEXT,
    EraChoice,
    default_label,
    era_text,
    framework_group,
    framework_reason,
    framework_undo_text,
)
from tilewright.studio.ui.memory_options import (
    MEMORY_FIELDS,
    MEMORY_TIPS,
    MODULES_TEXT,
    RECOMPUTE_CHOICES,
    RECOMPUTE_LAYERS_TEXT,
    RECOMPUTE_TEXT,
    memory_reason,
    memory_undo_text,
)
from tilewright.studio.ui.offload_editor import OffloadEditor, host_memory, offload_text
from tilewright.studio.ui.option_editors import LabelledChoice, LayerPairEditor, LayoutEditor, NamesEditor, compact
from tilewright.studio.ui.overlap_options import (
    GATHER_STEP_TEXT,
    OVERLAP_FIELDS,
    OVERLAP_GRAD_TEXT,
    OVERLAP_TIPS,
    OVERLAP_TP_TEXT,
    TP_RS_LABELS,
    TP_RS_TEXT,
    overlap_reason,
    overlap_undo_text,
)
from tilewright.studio.ui.precision_options import (
    EDGE_TEXT,
    FP8_LABELS,
    FP8_TEXT,
    GRAD_FP32_TEXT,
    MASTER_LABELS,
    MASTER_TEXT,
    MOMENT_LABELS,
    MOMENTS_TEXT,
    PRECISION_FIELDS,
    PRECISION_TIPS,
    precision_reason,
    precision_undo_text,
)
from tilewright.studio.ui.schedule_options import (
    FUSED_LOSS_TEXT,
    GRAPHS_TEXT,
    LAYOUT_TEXT,
    SCHEDULE_FIELDS,
    SCHEDULE_TIPS,
    schedule_reason,
    schedule_undo_text,
)
from tilewright.studio.ui.sharding_options import (
    FSDP_COPIES_TEXT,
    SHARDING_FIELDS,
    SHARDING_TIPS,
    sharding_reason,
    sharding_undo_text,
)
from tilewright.studio.units import COUNT, FACTOR

TITLE = "Options · each applies at once"
WIDE = ("memory_levels", "offload_layers", "overlap_dgrad_comm")  # controls under their label, across both columns
OPTION_TIPS = (MEMORY_TIPS | OVERLAP_TIPS | SCHEDULE_TIPS | EXPERT_TIPS | PRECISION_TIPS | FRAMEWORK_TIPS
               | SHARDING_TIPS)
# each kind's fields with its reasons and its undo texts (the memory kind's also reads the project's host memory)
REASONS: tuple[tuple[tuple[str, ...], Callable[[str, Project], str | None]], ...] = (
    (FRAMEWORK_FIELDS, framework_reason), (MEMORY_FIELDS, memory_reason), (OVERLAP_FIELDS, overlap_reason),
    (SCHEDULE_FIELDS, schedule_reason), (EXPERT_FIELDS, expert_reason), (PRECISION_FIELDS, precision_reason),
    (SHARDING_FIELDS, sharding_reason))
UNDO_TEXTS: tuple[tuple[tuple[str, ...], Callable[[str, Any], str]], ...] = (
    (FRAMEWORK_FIELDS, framework_undo_text), (OVERLAP_FIELDS, overlap_undo_text),
    (SCHEDULE_FIELDS, schedule_undo_text), (EXPERT_FIELDS, expert_undo_text), (PRECISION_FIELDS, precision_undo_text),
    (SHARDING_FIELDS, sharding_undo_text))


def disabled_reason(field: str, project: Project) -> str | None:
    """Why the option ``field`` cannot matter for ``project`` as applied, or None when it can."""
    for fields, reason in REASONS:
        if field in fields:
            return reason(field, project)
    raise KeyError(field)


def undo_text(field: str, value: Any, project: Project | None = None) -> str:
    """The Edit menu's name of the gesture ("Activation recompute selective", not "Set mapping recompute");
    ``project``: the one edited, for the offload's host memory name."""
    if field in MEMORY_FIELDS:
        return memory_undo_text(field, value, project)
    for fields, text in UNDO_TEXTS:
        if field in fields:
            return text(field, value)
    raise KeyError(field)


class MappingOptions(QGroupBox):
    """The option controls; ``push`` is the panel's way of pushing a command (it keeps staged degrees)."""

    def __init__(self, doc: ProjectDocument, push: Callable[[QUndoCommand], None], parent: QWidget | None = None):
        super().__init__(TITLE, parent)
        self.doc = doc
        self.push = push
        m = doc.project.mapping
        self.fsdp_copies = FlagEditor(m.fsdp_copies, FSDP_COPIES_TEXT, self._check("fsdp_copies"), parent=self)
        self.recompute = ChoiceEditor(m.recompute.value, RECOMPUTE_CHOICES, self._check("recompute"), parent=self)
        self.recompute_layers = ValueEditor(m.recompute_layers, COUNT, self._check("recompute_layers"),
                                            optional=True, parent=self)
        self.overlap_grad = FlagEditor(m.overlap_grad_reduce, OVERLAP_GRAD_TEXT, self._check("overlap_grad_reduce"),
                                       parent=self)
        self.overlap_tp = FlagEditor(m.overlap_tp_comm, OVERLAP_TP_TEXT, self._check("overlap_tp_comm"), parent=self)
        self.tp_rs = LabelledChoice(m.tp_overlap_reduce_scatter, TP_RS_LABELS, self._check("tp_overlap_reduce_scatter"),
                                    parent=self)
        self.fused_loss = FlagEditor(m.fused_cross_entropy, FUSED_LOSS_TEXT, self._check("fused_cross_entropy"),
                                     parent=self)
        self.layout = LayoutEditor(m.pipeline_layers, self._check("pipeline_layers"), parent=self)
        self.modules = NamesEditor(m.recompute_modules, "core_attn", self._check("recompute_modules"), parent=self)
        self.graphs = NamesEditor(m.cuda_graph_scope, "eager", self._check("cuda_graph_scope"), parent=self)
        self.ep_dispatcher = LabelledChoice(m.ep_dispatcher, DISPATCHER_LABELS, self._check("ep_dispatcher"),
                                            parent=self)
        self.overlap_ep = FlagEditor(m.overlap_ep_comm, OVERLAP_EP_TEXT, self._check("overlap_ep_comm"), parent=self)
        self.delay_wgrad = FlagEditor(m.delay_wgrad_compute, DELAY_WGRAD_TEXT, self._check("delay_wgrad_compute"),
                                      parent=self)
        self.fp8_scaling = LabelledChoice(self.current("fp8_scaling"), FP8_LABELS, self._check("fp8_scaling"),
                                          parent=self)
        self.grad_fp32 = FlagEditor(m.grad_reduce_in_fp32, GRAD_FP32_TEXT, self._check("grad_reduce_in_fp32"),
                                    parent=self)
        self.edge_layers = LayerPairEditor(self.current("fp8_bf16_layers"), self._check("fp8_bf16_layers"),
                                           parent=self)
        self.moments = LabelledChoice(m.optimizer_moments, MOMENT_LABELS, self._check("optimizer_moments"), parent=self)
        self.master = LabelledChoice(m.optimizer_master, MASTER_LABELS, self._check("optimizer_master"), parent=self)
        self.gather_step = FlagEditor(m.overlap_param_gather_with_optimizer_step, GATHER_STEP_TEXT,
                                      self._check("overlap_param_gather_with_optimizer_step"), parent=self)
        self.imbalance = ValueEditor(m.expert_imbalance, FACTOR, self._check("expert_imbalance"), optional=True,
                                     parent=self)
        self.imbalance.line_edit.setPlaceholderText(IMBALANCE_DEFAULT)
        host = host_memory(doc.project.hardware)
        self.offload = OffloadEditor(m.memory_levels, host[0] if host else None, self._check("memory_levels"),
                                     parent=self)
        self.offload_layers = ValueEditor(m.offload_layers, COUNT, self._check("offload_layers"), optional=True,
                                          parent=self)
        self.dgrad = EraChoice(m.overlap_dgrad_comm, DGRAD_LABELS, self._check("overlap_dgrad_comm"), parent=self)
        self.p2p = EraChoice(m.pipeline_p2p, P2P_LABELS, self._check("pipeline_p2p"), parent=self)
        self.host_framework = EraChoice(m.host_framework, HOST_FRAMEWORK_LABELS, self._check("host_framework"),
                                        parent=self)
        self.timing = EraChoice(m.timing_log_level, TIMING_LABELS, self._check("timing_log_level"), parent=self)
        self.params_norm = FlagEditor(m.log_params_norm, PARAMS_NORM_TEXT, self._check("log_params_norm"), parent=self)
        self.num_zeros = FlagEditor(m.log_num_zeros_in_grad, NUM_ZEROS_TEXT, self._check("log_num_zeros_in_grad"),
                                    parent=self)
        self.nan_check = FlagEditor(m.check_for_nan_in_loss_and_grad, NAN_TEXT,
                                    self._check("check_for_nan_in_loss_and_grad"), parent=self)
        self.editors: dict[str, ChoiceEditor | FlagEditor | ValueEditor | OffloadEditor] = {
            "recompute": self.recompute, "recompute_layers": self.recompute_layers,
            "overlap_grad_reduce": self.overlap_grad, "overlap_tp_comm": self.overlap_tp,
            "tp_overlap_reduce_scatter": self.tp_rs,
            "fused_cross_entropy": self.fused_loss, "pipeline_layers": self.layout,
            "ep_dispatcher": self.ep_dispatcher, "overlap_ep_comm": self.overlap_ep,
            "delay_wgrad_compute": self.delay_wgrad, "fp8_bf16_layers": self.edge_layers,
            "grad_reduce_in_fp32": self.grad_fp32, "optimizer_moments": self.moments, "optimizer_master": self.master,
            "overlap_param_gather_with_optimizer_step": self.gather_step,
            "recompute_modules": self.modules, "cuda_graph_scope": self.graphs, "fp8_scaling": self.fp8_scaling,
            "expert_imbalance": self.imbalance, "memory_levels": self.offload,
            "offload_layers": self.offload_layers, "overlap_dgrad_comm": self.dgrad, "pipeline_p2p": self.p2p,
            "log_params_norm": self.params_norm, "log_num_zeros_in_grad": self.num_zeros,
            "timing_log_level": self.timing, "check_for_nan_in_loss_and_grad": self.nan_check,
            "host_framework": self.host_framework, "fsdp_copies": self.fsdp_copies,
        }
        for field, editor in self.editors.items():
            editor.committed.connect(lambda value, f=field: self.set_option(f, value))
        for combo in (self.recompute.combo, self.ep_dispatcher.combo, self.fp8_scaling.combo, self.moments.combo,
                      self.master.combo, self.tp_rs.combo, self.dgrad.combo, self.p2p.combo, self.timing.combo,
                      self.host_framework.combo):
            compact(combo)
        self.labels = {"recompute": QLabel(RECOMPUTE_TEXT, self),
                       "recompute_layers": QLabel(RECOMPUTE_LAYERS_TEXT, self),
                       "pipeline_layers": QLabel(LAYOUT_TEXT, self),
                       "ep_dispatcher": QLabel(DISPATCHER_TEXT, self),
                       "recompute_modules": QLabel(MODULES_TEXT, self),
                       "cuda_graph_scope": QLabel(GRAPHS_TEXT, self),
                       "fp8_scaling": QLabel(FP8_TEXT, self),
                       "fp8_bf16_layers": QLabel(EDGE_TEXT, self),
                       "optimizer_moments": QLabel(MOMENTS_TEXT, self),
                       "optimizer_master": QLabel(MASTER_TEXT, self),
                       "tp_overlap_reduce_scatter": QLabel(TP_RS_TEXT, self),
                       "expert_imbalance": QLabel(IMBALANCE_TEXT, self),
                       "memory_levels": QLabel(offload_text(host), self),
                       "offload_layers": QLabel(OFFLOAD_LAYERS_TEXT, self),
                       "overlap_dgrad_comm": QLabel(DGRAD_TEXT, self),
                       "pipeline_p2p": QLabel(P2P_TEXT, self),
                       "host_framework": QLabel(HOST_FRAMEWORK_TEXT, self),
                       "timing_log_level": QLabel(TIMING_TEXT, self)}
        grid = QGridLayout(self)
        rows: list[str | QWidget] = [
            self.fsdp_copies,  # first: right under the FSDP and ZeRO degrees of the Mapping box
            "recompute", "recompute_layers", self.overlap_grad, self.grad_fp32, self.overlap_tp,
            "tp_overlap_reduce_scatter", "overlap_dgrad_comm", self.fused_loss,
            "pipeline_layers", "ep_dispatcher", "expert_imbalance", self.overlap_ep, self.delay_wgrad,
            "recompute_modules",
            "cuda_graph_scope", "fp8_scaling", "fp8_bf16_layers", "optimizer_moments", "optimizer_master",
            self.gather_step, "memory_levels", "offload_layers",
        ]
        row = 0
        for item in rows:  # a labelled control, or a check box across both columns
            if item in WIDE:  # its label above it: the control needs the dock's width
                grid.addWidget(self.labels[item], row, 0, 1, 2)
                grid.addWidget(self.editors[item], row + 1, 0, 1, 2)
                row += 2
                continue
            if isinstance(item, str):
                grid.addWidget(self.labels[item], row, 0)
                grid.addWidget(self.editors[item], row, 1)
            else:
                grid.addWidget(item, row, 0, 1, 2)
            row += 1
        framework = [(self.labels["host_framework"], self.host_framework),
                     (self.labels["pipeline_p2p"], self.p2p), (self.labels["timing_log_level"], self.timing),
                     (None, self.params_norm), (None, self.num_zeros), (None, self.nan_check)]
        self.framework = framework_group(framework, self)
        grid.addWidget(self.framework, row, 0, 1, 2)
        grid.setColumnStretch(1, 1)

    def _check(self, field: str) -> Check:
        def check(value: Any) -> str | None:
            try:
                checked_option(self.doc.project, field, value)
            except EditRefused as exc:
                return exc.reason
            return None

        return check

    def current(self, field: str) -> Any:
        value = option_value(self.doc.project.mapping, field)
        if field == "fp8_scaling":  # unset is current scaling, what the engine runs then
            return (value or Fp8Scaling.tensor).value
        return value.value if isinstance(value, Recompute) else value

    def set_option(self, field: str, value: Any) -> bool:
        """Push ONE ``SetMappingOption``; a refusal puts the control back to the model's value and says why."""
        editor = self.editors[field]
        try:
            command = SetMappingOption(self.doc, field, value, undo_text(field, value, self.doc.project))
        except EditRefused as exc:
            editor.set_value(self.current(field))
            editor.show_error(exc.reason)
            return False
        self.push(command)
        return True

    def refresh(self) -> None:
        """Follow the model: values, enabled states and the tooltips that say what a control does or why it is off."""
        editable = not self.doc.read_only
        host = host_memory(self.doc.project.hardware)  # the hardware may have changed under the panel
        self.offload.host = host[0] if host else None
        self.labels["memory_levels"].setText(offload_text(host))
        for field in ERA_FIELDS:  # the unset item names what the engine resolves it to for this project
            self.editors[field].set_default(default_label(field, self.doc.project))  # type: ignore[union-attr]
        self.offload_layers.line_edit.setPlaceholderText(f"default: {era_text('offload_layers', self.doc.project)}")
        for field, editor in self.editors.items():
            editor.set_value(self.current(field))
            editor.show_error(None)
            reason = disabled_reason(field, self.doc.project)
            editor.setEnabled(editable and reason is None)
            tip = reason or OPTION_TIPS[field]
            editor.setToolTip(tip)
            if field in self.labels:
                self.labels[field].setToolTip(tip)
                self.labels[field].setEnabled(editable and reason is None)
