"""The mapping options of how a mixed-precision run holds and scales its numbers: the fp8 recipe, the layers kept
out of fp8, the gradient buffer's dtype and Adam's state. Five fields, each set at once as one undo step by
``MappingOptions`` (``SetMappingOption``):

- the fp8 scaling recipe (``mapping.formats.fp8_scaling``): tensor (current scaling, stored unset), delayed,
  block or mxfp8; needs fp8 GEMMs (the run's data type or the weights' format fp8). The run's data type itself
  is not edited in the studio, so the recipe sits here, with the other options of how the mapping runs;
- the transformer layers an fp8 training run keeps in bf16 at each end (``mapping.formats.bf16_first_layers``,
  ``bf16_last_layers``, typed "1,1"; empty: none), Megatron-Bridge's current-scaling recipe keeping one each;
- the gradient buffer in fp32 (``mapping.grad_reduce_in_fp32``, on by default as in Megatron-LM); off keeps it in
  bf16 as NVIDIA's Megatron-Bridge recipes do; bf16 or fp8 training;
- Adam's moments' dtype (``mapping.optimizer_moments``) and how it holds its master copy
  (``mapping.optimizer_master``: fp32, bf16 parameters + remainders, fp16), Megatron-Core's precision-aware
  optimizer; mixed-precision training (the engine refuses them without the distributed optimizer, ZeRO ≥ 1).
"""

from __future__ import annotations

from typing import Any

from tilewright.engine.ir.common import dtype_bytes
from tilewright.engine.ir.mapping import Fp8Scaling
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.formats import has_fp8_gemms
from tilewright.studio.ui.framework_options import APPLIES, TRAINING_ONLY

PRECISION_FIELDS = ("fp8_scaling", "fp8_bf16_layers", "grad_reduce_in_fp32", "optimizer_moments", "optimizer_master")
FP8_TEXT = "fp8 scaling"
EDGE_TEXT = "bf16 layers first,last"
GRAD_FP32_TEXT = "accumulate and reduce gradients in fp32"
MOMENTS_TEXT = "Adam moments"
MASTER_TEXT = "master weights"
MOMENT_LABELS = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16 (scaled)", "fp8": "fp8 (scaled)"}
MASTER_LABELS = {"fp32": "fp32", "remainders": "bf16 + remainders", "fp16": "fp16 (scaled)"}
FP8_LABELS = {"tensor": "tensor (current)", "delayed": "delayed (amax history)", "block": "block (1×128)",
              "mxfp8": "mxfp8 (Blackwell)"}

PRECISION_TIPS = {
    "fp8_scaling": "how the fp8 GEMMs' tensors are scaled, Transformer Engine's recipes: tensor (current "
                   "scaling: an amax pass, a scale kernel and the cast per tensor), delayed (the scale from an "
                   "amax history, the amax taken inside the cast: one pass), block (DeepSeek-V3's 1×128 and "
                   "128×128 blocks, each scale found inside the one cast), mxfp8 (1×32 blocks the tensor cores "
                   f"scale: Blackwell only). {APPLIES}",
    "grad_reduce_in_fp32": "bf16 or fp8 mixed precision: the gradient buffer the backward accumulates into, and the "
                           "data-parallel reduction moves, in fp32 (4 B per parameter, Megatron-LM's default); "
                           "off keeps it in bf16 (2 B), as Megatron-Core's grad_reduce_in_fp32=False in NVIDIA's "
                           f"Megatron-Bridge recipes. {APPLIES}",
    "optimizer_moments": "mixed-precision Adam: the dtype its two moments are held in (Megatron-Core "
                         "--use-precision-aware-optimizer --exp-avg-dtype/--exp-avg-sq-dtype): bf16 or fp16 hold 2 + 2 "
                         "B per parameter instead of 4 + 4, fp8 1 + 1. Transformer Engine's FusedAdam casts them to "
                         "fp32 copies around its fp32 kernel, so the step streams more, not less. Needs the "
                         f"distributed optimizer (ZeRO ≥ 1). {APPLIES}",
    "optimizer_master": "mixed-precision Adam: its master copy of the weights. fp32: 4 B per parameter; bf16 + "
                        "16-bit remainders: the bf16 parameters complete each fp32 value, 2 B (Transformer "
                        "Engine's store_param_remainders, Megatron-Core's default under its precision-aware "
                        "optimizer; bf16 parameters only); fp16 (--main-params-dtype fp16): 2 B. Needs the "
                        f"distributed optimizer (ZeRO ≥ 1). {APPLIES}",
    "fp8_bf16_layers": (
        "fp8 training: how many transformer layers at the start and at the end of the model run outside fp8, in "
        "bf16, typed first,last (\"1,1\"; empty: none) — Megatron-Core's --first-last-layers-bf16 with "
        "--num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16, which Megatron-Bridge's current-scaling "
        "recipe sets to 1 and 1. Their GEMMs run at the bf16 rate without quantization passes and their weights "
        f"are plain bf16 parameters. Not with delayed scaling. {APPLIES}"
    ),
}
GRAD_FP32_OFF_TIP = ("needs bf16 or fp8 mixed-precision training: fp16 keeps an fp16 buffer and fp32 training an "
                     "fp32 one whatever this says")
FP8_OFF_TIP = ("needs fp8 GEMMs: the run's data type (run.dtype, --dtype fp8) or the weights' format "
               "(mapping.formats.weights) must be fp8 for a scaling recipe to matter")
MIXED_OFF_TIP = ("needs mixed-precision training: low-precision weights (bf16, fp16 or fp8) with fp32 master "
                 "weights; fp32 training keeps Adam's state in fp32")


def precision_reason(field: str, project: Project) -> str | None:
    """Why the option ``field`` cannot matter for ``project`` as applied, or None when it can."""
    m, training = project.mapping, project.run.mode is Mode.train
    if field == "fp8_scaling":
        return None if has_fp8_gemms(project.run.dtype, m.formats) else FP8_OFF_TIP
    if field == "grad_reduce_in_fp32":
        mixed = project.run.dtype.value in ("bf16", "fp8") and project.run.master_weights_fp32
        return TRAINING_ONLY if not training else None if mixed else GRAD_FP32_OFF_TIP
    if field == "fp8_bf16_layers":
        return TRAINING_ONLY if not training else None if has_fp8_gemms(project.run.dtype, m.formats) else FP8_OFF_TIP
    if field in ("optimizer_moments", "optimizer_master"):  # as plan.checks: the weights' format, else the run's
        weights = m.formats.weights or project.run.dtype
        mixed = dtype_bytes(weights) < 4 and project.run.master_weights_fp32
        return TRAINING_ONLY if not training else None if mixed else MIXED_OFF_TIP
    raise KeyError(field)


def precision_undo_text(field: str, value: Any) -> str:
    """The Edit menu's name of the gesture ("Adam moments bf16")."""
    if field == "fp8_scaling":
        return f"fp8 scaling {FP8_LABELS[value or Fp8Scaling.tensor.value]}"
    if field == "grad_reduce_in_fp32":
        return "Gradients in fp32" if value else "Gradients in bf16"
    if field == "optimizer_moments":
        return f"Adam moments {MOMENT_LABELS[value]}"
    if field == "optimizer_master":
        return f"Master weights {MASTER_LABELS[value]}"
    if field == "fp8_bf16_layers":
        return "Every layer in fp8" if not value or not any(value) else f"bf16 layers {value[0]} first, {value[1]} last"
    raise KeyError(field)
