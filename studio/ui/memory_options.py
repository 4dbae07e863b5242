"""The mapping options that keep state off the device: activation recomputation, which drops activations and
runs their forward again in the backward, and offloading state to the node's host memory. Four fields, each set
at once as one undo step by ``MappingOptions`` (``SetMappingOption``):

- activation recompute (``mapping.recompute``): none, selective or full; training only;
- with full recomputation, the layers of each model chunk it re-runs (``mapping.recompute_layers``, empty:
  all; Megatron's block method); leaving full recomputation clears it;
- with selective recomputation, the parts of each layer it re-runs (``mapping.recompute_modules``,
  "layernorm,moe_act"; empty: the attention core); leaving selective recomputation clears it;
- offloading weights, gradients, optimizer state or activations to the node's host memory
  (``mapping.memory_levels``, ``studio.ui.offload_editor``); needs a host memory with a host link. The layers
  per chunk whose activations go there (``mapping.offload_layers``) default to a framework's count, so they
  sit with the framework options (``studio.ui.framework_options``).
"""

from __future__ import annotations

from typing import Any

from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.project import Mode, Project
from tilewright.studio.ui.framework_options import APPLIES, TRAINING_ONLY
from tilewright.studio.ui.offload_editor import host_memory, offload_undo_text

MEMORY_FIELDS = ("recompute", "recompute_layers", "recompute_modules", "memory_levels")
RECOMPUTE_TEXT = "activation recompute"
RECOMPUTE_LAYERS_TEXT = "layers re-run per chunk"
MODULES_TEXT = "modules re-run"
RECOMPUTE_CHOICES = [r.value for r in Recompute]

MEMORY_TIPS = {
    "recompute": "activation recomputation, trading compute for memory: none keeps every activation for the "
                 "backward; selective drops the attention scores (QKᵀ, softmax, dropout) and recomputes them in "
                 "the backward (Korthikanti et al. 2022, Megatron --recompute-activations); full keeps only each "
                 "layer's input and runs the layer's forward again before its backward "
                 f"(--recompute-granularity full). {APPLIES}",
    "recompute_layers": "full recomputation of only the first N transformer layers of each model chunk, the "
                        "others keeping every activation (Megatron --recompute-method block "
                        f"--recompute-num-layers N); empty: every layer. {APPLIES}",
    "recompute_modules": "selective recomputation of these parts of each layer, comma-separated (Megatron-Core's "
                         "--recompute-modules): core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, "
                         "shared_experts; each drops what it stores and re-runs in the backward; empty: core_attn. "
                         f"{APPLIES}",
    "memory_levels": "keep these categories of state in the node's host memory instead of the device's: each "
                     "step streams them over the host link (weights read in the forward and backward, "
                     "gradients written, the optimizer state read and written by the step, activations "
                     "saved and read back), and the device's memory holds that much less. Categories set "
                     f"elsewhere by the project (an SRAM, auto) are kept. {APPLIES}",
}
RECOMPUTE_LAYERS_OFF_TIP = "needs full recomputation (choose 'full' above): only whole layers are re-run"
MODULES_OFF_TIP = "needs selective recomputation (choose 'selective' above): it names what that re-runs"
OFFLOAD_OFF_TIP = ("needs a host memory the devices reach over a host link: a memory of a node (or any component "
                   "that does not compute) with host_link_bandwidth_bytes_per_s set")


def memory_reason(field: str, project: Project) -> str | None:
    """Why the option ``field`` cannot matter for ``project`` as applied, or None when it can."""
    m, training = project.mapping, project.run.mode is Mode.train
    if field == "recompute":
        return None if training else TRAINING_ONLY
    if field == "recompute_layers":
        return TRAINING_ONLY if not training else None if m.recompute is Recompute.full else RECOMPUTE_LAYERS_OFF_TIP
    if field == "recompute_modules":
        return TRAINING_ONLY if not training else None if m.recompute is Recompute.selective else MODULES_OFF_TIP
    if field == "memory_levels":
        return None if host_memory(project.hardware) is not None else OFFLOAD_OFF_TIP
    raise KeyError(field)


def memory_undo_text(field: str, value: Any, project: Project | None = None) -> str:
    """The Edit menu's name of the gesture ("Activation recompute selective"); ``project``: the one edited, for
    the offload's host memory name."""
    if field == "recompute":
        return f"Activation recompute {value}"
    if field == "recompute_layers":
        return "Recompute every layer" if value is None else f"Recompute {value} layers per chunk"
    if field == "recompute_modules":
        return "Recompute the attention core" if value is None else f"Recompute {', '.join(value)}"
    if field == "memory_levels":
        host = host_memory(project.hardware) if project is not None else None
        return offload_undo_text(value, host[0] if host else None)
    raise KeyError(field)
