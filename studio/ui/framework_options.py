"""The training options whose default is a framework's, as the workload dock shows them: each control says
what the engine does when the option is left unset, and why it is off where it cannot matter.

Eight fields of the mapping, each set at once as one undo step by ``MappingOptions`` (``SetMappingOption``):

- ``offload_layers``: of each model chunk, how many transformer layers copy their stored activations to host
  memory (Megatron-Core's ``cpu_offloading_num_layers``; ``engine.plan.activation_offload``). Unset: all but the
  last, shown as the count it resolves to. It sits under the offload check boxes: it counts the layers of the
  "activations" box, so it is off until that box puts them in host memory, and off with pp > 1 or any
  recomputation, which Megatron-Core refuses with offload (``plan.checks._offload_checks``);
- ``overlap_dgrad_comm``: a column-parallel linear's input-gradient all-reduce hidden behind its weight-gradient
  GEMM (``plan.dgrad_overlap``), beside the tensor-parallel overlap; unset it follows the framework era the run
  reads as (off for Megatron-LM v2.x's ``--checkpoint-activations``, i.e. GPU training with full recompute);
- ``pipeline_p2p``: how pipeline sends run (``plan.pipeline_p2p``), the same era default;
- ``host_framework``: whose Python issues a GPU layer's kernels (``plan.framework_host``): Megatron-LM v2.x's own
  layers, Megatron-Core's local layers, Megatron-Core with Transformer Engine's modules, or plain PyTorch modules
  (eager or under torch.compile: ``perf.eager_ops``). Unset it is v2.x's
  counts whatever the run (not an era default: a default that followed recompute would make a small job's host
  time jump when only its recompute changes), so its first item names that fixed default, not a resolved era;
- Megatron's logging and checking flags (``plan.train_logging``): ``log_params_norm``, ``log_num_zeros_in_grad``,
  ``timing_log_level`` (unset: Megatron-LM v2.x–v3.0's timers, every one synchronising) and
  ``check_for_nan_in_loss_and_grad``. The host framework and the last five sit in their own "framework" group:
  they describe the training loop the framework runs, not the parallel layout.

An unset era option's combo reads "default (era): on", the value the engine resolves it to for the project as it
stands (``era_text``), so an architect sees what was assumed before choosing otherwise; the engine's result
notes say the same after a run (the results dock's Summary shows them). The era is read through the engine's own
functions (``pipeline_p2p.p2p_mode``, ``dgrad_overlap.overlaps``), never restated here.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QGroupBox, QLabel, QVBoxLayout, QWidget
from tilewright.engine.ir.hardware import Component, Compute
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.device import issues_kernels
from tilewright.engine.plan.activation_offload import offload_count
from tilewright.engine.plan.checks import host_memories
from tilewright.engine.plan.dgrad_overlap import overlaps
from tilewright.engine.plan.pipeline_p2p import p2p_mode
from tilewright.studio.ui.fields import Check, ChoiceEditor

ERA_FIELDS = ("overlap_dgrad_comm", "pipeline_p2p", "timing_log_level")  # combos whose first item is "default"
LOGGING_FIELDS = ("log_params_norm", "log_num_zeros_in_grad", "timing_log_level", "check_for_nan_in_loss_and_grad")
FRAMEWORK_FIELDS = ("offload_layers", "overlap_dgrad_comm", "pipeline_p2p", "host_framework", *LOGGING_FIELDS)
GROUP_TITLE = "Framework · training loop (Megatron)"
DEFAULT = "default (era)"

OFFLOAD_LAYERS_TEXT = "layers offloaded per chunk"
DGRAD_TEXT = "input-gradient all-reduce"
P2P_TEXT = "pipeline sends"
TIMING_TEXT = "timers (--timing-log-level)"
HOST_FRAMEWORK_TEXT = "host framework (its layers' Python)"
PARAMS_NORM_TEXT = "log the parameters' norm every iteration"
NUM_ZEROS_TEXT = "count the gradients' zeros every step"
NAN_TEXT = "check loss and gradients for NaN"

DGRAD_LABELS: dict[Any, str] = {None: DEFAULT, True: "hidden behind wgrad", False: "blocking"}
P2P_LABELS: dict[Any, str] = {None: DEFAULT, "overlap": "overlap (compute on)", "blocking": "blocking",
                              "megatron-lm": "megatron-lm (+ gather)"}
TIMING_LABELS: dict[Any, str] = {None: DEFAULT, 2: "2: every micro-batch", 1: "1: iteration parts + barriers",
                                 0: "0: the iteration only"}
HOST_FRAMEWORK_LABELS: dict[Any, str] = {None: "default: Megatron-LM v2.x layers",
                                         "megatron-lm": "Megatron-LM v2.x layers",
                                         "mcore": "Megatron-Core, local layers",
                                         "mcore-te": "Megatron-Core + Transformer Engine",
                                         "pytorch": "PyTorch modules, eager",
                                         "pytorch-compile": "PyTorch modules, torch.compile",
                                         "megatron-deepspeed": "Megatron-DeepSpeed (v2.x layers + scalar syncs)"}
TIMING_DEFAULT = "all, no levels (v2.x–v3.0)"  # Megatron-LM v2.x–v3.0's timers; the tooltip says so
APPLIES = "Applies at once (one undo step), not through Auto-map"

FRAMEWORK_TIPS = {
    "offload_layers": "activation offload to host memory: how many transformer layers of each model chunk, the "
                      "first ones, copy their stored activations to the host in the forward and back in the "
                      "backward (Megatron-Core --cpu-offloading-num-layers, Transformer Engine's offload "
                      "context); the last layer never (its backward starts as its forward ends), nor the "
                      f"embedding or the head; empty: all but the last, the frameworks' maximum. {APPLIES}",
    "overlap_dgrad_comm": "tensor parallelism in training: each column-parallel linear's input-gradient all-reduce "
                          "(reduce-scatter with sequence parallelism) launched asynchronously and hidden behind its "
                          "own weight-gradient GEMM, only what that GEMM cannot cover showing (Megatron-LM "
                          "--async-tensor-model-parallel-allreduce from late 2021, Megatron-Core, Transformer "
                          "Engine); blocking: each waits (Megatron-LM v2.x). default (era): blocking for GPU "
                          f"training with full recompute (the --checkpoint-activations era), else hidden. {APPLIES}",
    "pipeline_p2p": "training pipelines: how a stage's sends run. overlap: the stage computes while its send flies "
                    "(Megatron-Core's interleaved schedule with --overlap-p2p-comm); blocking: it waits for each "
                    "send and the receive paired with it (Megatron-Core's non-interleaved 1F1B); megatron-lm: "
                    "blocking, and each received tensor all-gathered over the tensor group without sequence "
                    "parallelism (Megatron-LM v2.x–v3.0 --scatter-gather-tensors-in-pipeline). default (era): "
                    f"megatron-lm for GPU training with full recompute, else overlap. {APPLIES}",
    "host_framework": "GPU training: whose Python issues each layer's kernels, which sets the host's time per op "
                      "(a small job waits for it). Megatron-LM v2.x layers: its own mpu layers (2020-22); "
                      "Megatron-Core, local layers: its local tensor-parallel linears (--transformer-impl local, "
                      "Megatron-LM's legacy models from 2023 on), about 21 framework calls per linear's forward "
                      "where v2.x makes 8; Megatron-Core + Transformer Engine: TE's fused LayerNorm-linear and "
                      "linear modules (NVIDIA's Megatron-Core and NeMo recipes), about 43 (TransformerEngine pull "
                      "request #1191's CPU times); PyTorch modules, eager: plain modules run eagerly (torchtitan, "
                      "Hugging Face), each RMSNorm and gated activation a chain of kernels through device memory "
                      "on the GPU and on the host; PyTorch modules, torch.compile: the same with each chain fused. "
                      "default: Megatron-LM v2.x layers whatever the run (not the era: "
                      "the host time would jump when only recompute changes); inference always reads v2.x's. "
                      f"{APPLIES}",
    "log_params_norm": "Megatron --log-params-norm: every iteration, a multi-tensor L2 norm over the parameters, an "
                       f"all-reduce over the model-parallel group and a host sync (.item()). {APPLIES}",
    "log_num_zeros_in_grad": "Megatron --log-num-zeros-in-grad: every optimizer step, count_nonzero over each main "
                             "gradient (kernels per tensor), an all-reduce over the model-parallel group and a host "
                             f"sync. {APPLIES}",
    "timing_log_level": "Megatron --timing-log-level: which timers exist, each start and stop synchronising the "
                        "device. 2: every micro-batch's; 1: the iteration's parts, with two barriers over every "
                        "rank; 0: the iteration's only. default (era): Megatron-LM v2.x–v3.0's timers, every one "
                        f"synchronising, without levels or barriers. {APPLIES}",
    "check_for_nan_in_loss_and_grad": "Megatron-LM --check-for-nan-in-loss-and-grad (its default from late 2023; "
                                      "v2.x–v3.0 had none): each micro-batch's loss and each gradient bucket's norm "
                                      f"checked for NaN, each with a host sync. {APPLIES}",
}

TRAINING_ONLY = "training only: an inference run has no backward pass, so this option changes nothing"
OFFLOAD_LAYERS_OFF_TIP = ("needs the activations in host memory (tick 'activations' under the offload above): it "
                          "counts the layers whose stored activations are copied there")
OFFLOAD_PP_TIP = ("activation offload with pp {pp}: Megatron-Core refuses CPU offloading with pipeline parallelism "
                  "('Currently there is no support for Pipeline parallelism with CPU offloading'); set pp 1")
OFFLOAD_RECOMPUTE_TIP = ("activation offload with recompute '{recompute}': Megatron-Core refuses it ('CPU offloading "
                         "does not work when activation recomputation is enabled'); set recompute none")
DGRAD_TP_TIP = ("needs tensor parallelism: with tp 1 no input gradient is all-reduced "
                "(set tp > 1 and press Auto-map first)")
DGRAD_2D_TIP = "2-D tensor parallelism (mapping.tp_axes): its collectives are not overlapped this way"
DGRAD_UB_TIP = ("tensor-parallel communication is overlapped with the GEMMs (userbuffers, the option above): that "
                "overlap hides this reduce-scatter already")
P2P_OFF_TIP = "needs a pipeline: with pp 1 there are no pipeline sends (set pp > 1 and press Auto-map first)"
HOST_FRAMEWORK_OFF_TIP = ("GPU training only: this device runs each op as one program, with no framework issuing its "
                          "kernels one by one, so whose layers they are changes nothing")
HOST_LOOP_TIP = ("GPU training only: these are the Megatron training loop's host-side logging and checks; this "
                 "device runs each op as one program, with no framework issuing kernels")


def device_compute(hardware: Component) -> Compute | None:
    """The compute of the first device in ``hardware`` (the one the plan's first stage runs on in a
    homogeneous system), or None when nothing computes."""
    return next((c.compute for _p, c in hardware.walk() if c.compute is not None), None)


_blocks_cache: list[tuple[Any, int]] = []  # (workload, its transformer layers): one entry, the latest


def transformer_layers(project: Project) -> int | None:
    """The model's transformer layers (``WorkloadGraph.block_layers``), or None when the workload does not
    build; the last answer is kept, since the dock asks again after every edit of the mapping."""
    if _blocks_cache and _blocks_cache[0][0] == project.workload:
        return _blocks_cache[0][1]
    from tilewright.engine.workloads import build_workload

    try:
        blocks = len(build_workload(project.workload).block_layers)
    except (ValueError, TypeError, KeyError):
        return None
    _blocks_cache[:] = [(project.workload, blocks)]
    return blocks


def era_text(field: str, project: Project) -> str | None:
    """What an unset option resolves to for ``project`` ("on", "megatron-lm"), for its control's first item or
    placeholder; None when the option cannot matter there (the control is off and says why)."""
    m, train = project.mapping, project.run.mode is Mode.train
    compute = device_compute(project.hardware)
    if field == "offload_layers":
        blocks = transformer_layers(project)
        if blocks is None:
            return "all but the last"
        chunks = max(m.pp * m.interleave, 1)
        return f"{offload_count(blocks // chunks, None)} of {blocks // chunks} layers (all but the last)"
    if field == "timing_log_level":
        return TIMING_DEFAULT
    if compute is None:
        return None
    if field == "pipeline_p2p":
        return P2P_LABELS[p2p_mode(None, m.recompute, compute, train)]
    if field == "overlap_dgrad_comm":
        return DGRAD_LABELS[overlaps(None, m.recompute, compute, train)]
    raise KeyError(field)


def default_label(field: str, project: Project) -> str:
    """The first item of an era option's combo: "default (era): blocking"."""
    resolved = era_text(field, project)
    return f"{DEFAULT}: {resolved}" if resolved else DEFAULT


def framework_reason(field: str, project: Project) -> str | None:
    """Why the option ``field`` cannot matter for ``project`` as applied, or None when it can."""
    m, training = project.mapping, project.run.mode is Mode.train
    if not training:
        return TRAINING_ONLY
    if field == "offload_layers":
        level = m.memory_levels.get("activations")
        if level != "auto" and level not in host_memories(project):
            return OFFLOAD_LAYERS_OFF_TIP
        if m.pp > 1:
            return OFFLOAD_PP_TIP.format(pp=m.pp)
        if m.recompute is not Recompute.none:
            return OFFLOAD_RECOMPUTE_TIP.format(recompute=m.recompute.value)
        return None
    if field == "overlap_dgrad_comm":
        if m.tp == 1:
            return DGRAD_TP_TIP
        if m.tp_axes is not None:
            return DGRAD_2D_TIP
        return DGRAD_UB_TIP if m.overlap_tp_comm else None
    if field == "pipeline_p2p":
        return P2P_OFF_TIP if m.pp == 1 else None
    if field in LOGGING_FIELDS or field == "host_framework":
        compute = device_compute(project.hardware)
        if compute is not None and issues_kernels(compute):
            return None
        return HOST_FRAMEWORK_OFF_TIP if field == "host_framework" else HOST_LOOP_TIP
    raise KeyError(field)


def framework_undo_text(field: str, value: Any) -> str:
    """The Edit menu's name of the gesture ("Pipeline sends blocking")."""
    if field == "offload_layers":
        return ("Offload all but the last layer's activations" if value is None
                else f"Offload the activations of {value} layers per chunk")
    if field == "overlap_dgrad_comm":
        return ("Input-gradient all-reduce by era" if value is None
                else f"Input-gradient all-reduce {DGRAD_LABELS[value]}")
    if field == "pipeline_p2p":
        return "Pipeline sends by era" if value is None else f"Pipeline sends {P2P_LABELS[value]}"
    if field == "host_framework":
        return ("Host framework by default (Megatron-LM v2.x layers)" if value is None
                else f"Host framework: {HOST_FRAMEWORK_LABELS[value]}")
    if field == "timing_log_level":
        return "Timers by era" if value is None else f"Timing log level {value}"
    if field == "log_params_norm":
        return "Log the parameters' norm" if value else "Stop logging the parameters' norm"
    if field == "log_num_zeros_in_grad":
        return "Count the gradients' zeros" if value else "Stop counting the gradients' zeros"
    if field == "check_for_nan_in_loss_and_grad":
        return "Check for NaN" if value else "Stop checking for NaN"
    raise KeyError(field)


class EraChoice(ChoiceEditor):
    """A choice in words whose first item is the option left unset (None), named with what it resolves to:
    "default (era): blocking". The model holds the bare value (None, True, "overlap", 2)."""

    def __init__(self, value: Any, labels: dict[Any, str], check: Check, parent: QWidget | None = None):
        self.labels = dict(labels)
        super().__init__(self.labels[value], list(self.labels.values()), lambda text: check(self.model_value(text)),
                         parent)

    def set_default(self, text: str) -> None:
        """Rename the unset item (the project changed what the default resolves to)."""
        self.labels[None] = text
        self.combo.setItemText(0, text)

    def set_value(self, value: Any) -> None:
        super().set_value(self.labels[value])

    def model_value(self, chosen: str) -> object:
        return next(value for value, text in self.labels.items() if text == chosen)

    def choose(self, value: Any) -> None:
        """What a user does: pick the item of ``value`` (tests and scripted demos)."""
        self.combo.setCurrentText(self.labels[value])
        self._on_chosen(self.combo.currentIndex())


def framework_group(rows: list[tuple[QLabel | None, QWidget]], parent: QWidget | None = None) -> QGroupBox:
    """The framework group: each row a label above its control (an era combo needs the dock's width at 1280 × 720
    to say "default (era): megatron-lm (+ gather)" whole), or (None, a check box)."""
    group = QGroupBox(GROUP_TITLE, parent)
    group.setFlat(True)
    box = QVBoxLayout(group)
    box.setContentsMargins(0, 4, 0, 0)
    box.setSpacing(2)
    for label, control in rows:
        if label is not None:
            box.addWidget(label)
        box.addWidget(control)
    return group
