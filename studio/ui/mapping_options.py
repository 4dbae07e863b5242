"""The mapping's options: choices that change no parallel degree and no placement, so each applies at once
as its own undo step instead of waiting for Auto-map like the degrees above them.

Twenty-eight of them, in a group under the Mapping box of the workload dock:

- activation recompute (``mapping.recompute``): none, selective or full; training only;
- with full recomputation, the layers of each model chunk it re-runs (``mapping.recompute_layers``, empty:
  all; Megatron's block method); leaving full recomputation clears it;
- with selective recomputation, the parts of each layer it re-runs (``mapping.recompute_modules``,
  "layernorm,moe_act"; empty: the attention core); leaving selective recomputation clears it;
- reducing gradients under the last backward (``mapping.overlap_grad_reduce``); needs dp > 1, training;
- overlapping tensor-parallel communication with the GEMMs (``mapping.overlap_tp_comm``); needs tp > 1 and
  sequence parallelism;
- how that overlap hides the forward's reduce-scatters (``mapping.tp_overlap_reduce_scatter``): pipelined or
  ring exchange; needs the overlap above;
- the loss as one fused kernel (``mapping.fused_cross_entropy``); training;
- the layers of each virtual stage (``mapping.pipeline_layers``, "1,2*30,0"; empty: an even split); needs
  pp × interleave > 1, and Auto-map with another pp or interleave clears it;
- the expert token exchange (``mapping.ep_dispatcher``): flat all-to-all or DeepEP node by node; ep > 1;
- overlapping the expert all-to-all with compute (``mapping.overlap_ep_comm``); ep > 1; turning it off also
  turns off the next;
- deferring the weight gradients to hide the backward's all-to-all too (``mapping.delay_wgrad_compute``);
  needs the overlap above;
- the parts of each layer replayed from CUDA graphs (``mapping.cuda_graph_scope``, "attn,mlp"; empty: eager
  kernels); training;
- the fp8 scaling recipe (``mapping.formats.fp8_scaling``): tensor (current scaling, stored unset), delayed,
  block or mxfp8; needs fp8 GEMMs (the run's data type or the weights' format fp8). The run's data type itself
  is not edited in the studio, so the recipe sits here, with the other options of how the mapping runs;
- the transformer layers an fp8 training run keeps in bf16 at each end (``mapping.formats.bf16_first_layers``,
  ``bf16_last_layers``, typed "1,1"; empty: none), Megatron-Bridge's current-scaling recipe keeping one each;
- the gradient buffer in fp32 (``mapping.grad_reduce_in_fp32``, on by default as in Megatron-LM); off keeps it in
  bf16 as NVIDIA's Megatron-Bridge recipes do; bf16 or fp8 training;
- Adam's moments' dtype (``mapping.optimizer_moments``) and how it holds its master copy
  (``mapping.optimizer_master``: fp32, bf16 parameters + remainders, fp16), Megatron-Core's precision-aware
  optimizer; mixed-precision training (the engine refuses them without the distributed optimizer, ZeRO ≥ 1);
- gathering the first model chunk's weights during the optimizer step
  (``mapping.overlap_param_gather_with_optimizer_step``); needs the param-gather overlap, ZeRO-1/2 and interleaving;
- the expert load imbalance (``mapping.expert_imbalance``, × the mean, ≥ 1): the busiest expert rank's routed
  tokens over the mean, which paces every rank; MoE models;
- offloading weights, gradients, optimizer state or activations to the node's host memory
  (``mapping.memory_levels``, ``studio.ui.offload_editor``); needs a host memory with a host link;
- under it, the transformer layers per chunk whose activations go there (``mapping.offload_layers``), beside the
  tensor-parallel overlap the input-gradient all-reduce's (``mapping.overlap_dgrad_comm``), and in a framework
  group of their own whose layers' host code issues the kernels (``mapping.host_framework``), the pipeline sends
  (``mapping.pipeline_p2p``) and Megatron's logging and checks: the options
  whose default is a framework era's, each showing what it resolves to (``studio.ui.framework_options``).

A control whose option cannot matter for the mapping as applied is disabled, and its tooltip says why
(``disabled_reason``): the state follows the model, not degrees typed but not yet applied. A choice the
engine would refuse (recomputation under a HyPar partition, say) snaps back with the engine's own message
(``mapping_edit.checked_option``). The widget pushes commands through a callback of its panel, which keeps
the degrees the user has typed but not applied (the model's change refreshes the panel, which would drop
them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtGui import QUndoCommand
from PySide6.QtWidgets import QComboBox, QGridLayout, QGroupBox, QLabel, QWidget
from tilewright.engine.ir.common import dtype_bytes
from tilewright.engine.ir.mapping import Fp8Scaling, Recompute, format_pipeline_layout, parse_pipeline_layout
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.formats import has_fp8_gemms
from tilewright.studio.document import ProjectDocument
from tilewright.studio.mapping_commands import SetMappingOption
from tilewright.studio.mapping_edit import checked_option, option_value
from tilewright.studio.tree_edit import EditRefused
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
from tilewright.studio.ui.offload_editor import OffloadEditor, host_memory, offload_text, offload_undo_text
from tilewright.studio.units import COUNT, FACTOR

TITLE = "Options · each applies at once"
RECOMPUTE_TEXT = "activation recompute"
RECOMPUTE_LAYERS_TEXT = "layers re-run per chunk"
DISPATCHER_TEXT = "expert token exchange"
OVERLAP_GRAD_TEXT = "reduce gradients under the last backward"
OVERLAP_EP_TEXT = "overlap the expert all-to-all with compute"
DELAY_WGRAD_TEXT = "delay weight gradients behind the all-to-all"
OVERLAP_TP_TEXT = "overlap tp communication with GEMMs"
TP_RS_TEXT = "reduce-scatter overlap"  # the forward's; the tooltip says so
TP_RS_LABELS = {"pipeline": "pipelined", "ring_exchange": "ring exchange"}
FUSED_LOSS_TEXT = "fused cross-entropy kernel"
LAYOUT_TEXT = "layers per virtual stage"
MODULES_TEXT = "modules re-run"
GRAPHS_TEXT = "CUDA graphs"
FP8_TEXT = "fp8 scaling"
EDGE_TEXT = "bf16 layers first,last"
GRAD_FP32_TEXT = "accumulate and reduce gradients in fp32"
MOMENTS_TEXT = "Adam moments"
MASTER_TEXT = "master weights"
GATHER_STEP_TEXT = "gather the first chunk during the step"
IMBALANCE_TEXT = "expert load (× mean)"
# shown while unset: dropless routing then takes the statistical floor of balanced routing (plan.routing_imbalance)
IMBALANCE_DEFAULT = "default: floor ≈1.01×"
WIDE = ("memory_levels", "offload_layers", "overlap_dgrad_comm")  # controls under their label, across both columns
MOMENT_LABELS = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16 (scaled)", "fp8": "fp8 (scaled)"}
MASTER_LABELS = {"fp32": "fp32", "remainders": "bf16 + remainders", "fp16": "fp16 (scaled)"}
FP8_LABELS = {"tensor": "tensor (current)", "delayed": "delayed (amax history)", "block": "block (1×128)",
              "mxfp8": "mxfp8 (Blackwell)"}
RECOMPUTE_CHOICES = [r.value for r in Recompute]
DISPATCHER_LABELS = {"alltoall": "alltoall (flat)", "deepep": "deepep (node by node)"}
APPLIES = "Applies at once (one undo step), not through Auto-map"

OPTION_TIPS = {
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
    "overlap_grad_reduce": "data parallel: reduce the gradients in buckets while the last micro-batch's backward "
                           "still runs, so only the reduction of the first layers shows (Megatron "
                           f"--overlap-grad-reduce); off, the whole reduction waits for the backward. {APPLIES}",
    "overlap_tp_comm": "tensor parallelism with sequence parallelism: pipeline each all-gather and reduce-scatter "
                       "with the GEMM beside it in chunks (Transformer Engine userbuffers, Megatron-Core "
                       "--tp-comm-overlap); only what the GEMM cannot cover and one chunk show, and the pipelined "
                       f"reduce-scatters take a few of the GEMM's SMs. {APPLIES}",
    "tp_overlap_reduce_scatter": "with tp communication overlapped: how the forward's reduce-scatters after the "
                                 "attention projection and the second MLP GEMM hide. pipelined runs the GEMM in 4 "
                                 "chunks, each chunk's reduce-scatter on 16 SMs taken from it (NVIDIA's bf16 "
                                 "userbuffers recipes); ring exchange runs it in tp chunks whose partial sums the "
                                 "copy engines pass around the ring, 1 SM set aside (their fp8 recipes). Either way "
                                 f"each chunk is a GEMM of its own. {APPLIES}",
    "fused_cross_entropy": "the loss as one fused kernel over the logits (Megatron-Core --cross-entropy-loss-fusion, "
                           "NVIDIA's recipes) instead of Megatron-LM's eager vocab-parallel kernels, each streaming "
                           f"the fp32 logits. {APPLIES}",
    "pipeline_layers": "transformer layers of each virtual stage, in order (pp × interleave of them; N*K repeats: "
                       "1,2*30,0), the embedding on the first and the head on the last (Megatron-Core's pipeline "
                       f"layout); empty: an even split. {APPLIES}",
    "ep_dispatcher": "MoE: how tokens reach their experts. alltoall (flat) sends each token to every rank "
                     "holding one of its experts (Megatron-Core's alltoall dispatcher); deepep (node by node) "
                     "sends it once per destination node over the network, then forwards it over the node's "
                     "fabric to the GPUs of its experts (DeepEP, Megatron-Core's flex dispatcher). "
                     f"{APPLIES}",
    "cuda_graph_scope": "the parts of each layer captured in CUDA graphs and replayed with one launch, "
                        "comma-separated (Megatron-Core's --cuda-graph-scope): attn, mlp, moe, moe_router, "
                        "moe_preprocess, full_iteration; their kernels cost the host no dispatch; empty: every "
                        f"kernel launched eagerly. {APPLIES}",
    "overlap_ep_comm": "MoE: hide each expert all-to-all (dispatch and combine) behind another micro-batch's "
                       "compute of the same layer, as DeepSeek-V3's DualPipe and Megatron-Core's "
                       "--overlap-moe-expert-parallel-comm; only the part longer than that compute shows. "
                       f"{APPLIES}",
    "delay_wgrad_compute": "MoE with the overlapped all-to-all: run the weight-gradient GEMMs apart from the "
                           "input gradients, beside the backward's all-to-all, so that they hide it too: the "
                           "routed experts' behind the dispatch's gradient, attention's and the shared experts' "
                           "behind the next layer's combine gradient (Megatron-Core --delay-wgrad-compute). The "
                           f"compute is the same, only more of the all-to-all hides. {APPLIES}",
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
    "overlap_param_gather_with_optimizer_step": "interleaved 1F1B with the distributed optimizer and the "
                                                "param-gather overlap: step the first model chunk's parameters "
                                                "first and gather that chunk's weights while the other chunks' are "
                                                "stepped, so the next forward waits only for what that step cannot "
                                                "hide (Megatron-Core --overlap-param-gather-with-optimizer-step). "
                                                f"{APPLIES}",
    "expert_imbalance": "MoE: the busiest expert-parallel rank's routed tokens over the mean, ≥ 1 (1: a balanced "
                        "router). Its expert GEMMs take that much longer and every rank waits for it in the "
                        "combine; typed as a factor, e.g. 1.2 for 20 % above the mean. Empty: dropless routing's "
                        "statistical floor at the run's tokens (about 1.01×), capacity-padded routing 1. "
                        f"{APPLIES}",
    "memory_levels": "keep these categories of state in the node's host memory instead of the device's: each "
                     "step streams them over the host link (weights read in the forward and backward, "
                     "gradients written, the optimizer state read and written by the step, activations "
                     "saved and read back), and the device's memory holds that much less. Categories set "
                     f"elsewhere by the project (an SRAM, auto) are kept. {APPLIES}",
    "fp8_bf16_layers": (
        "fp8 training: how many transformer layers at the start and at the end of the model run outside fp8, in "
        "bf16, typed first,last (\"1,1\"; empty: none) — Megatron-Core's --first-last-layers-bf16 with "
        "--num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16, which Megatron-Bridge's current-scaling "
        "recipe sets to 1 and 1. Their GEMMs run at the bf16 rate without quantization passes and their weights "
        f"are plain bf16 parameters. Not with delayed scaling. {APPLIES}"
    ),
} | FRAMEWORK_TIPS
TRAINING_ONLY = "training only: an inference run has no backward pass, so this option changes nothing"
OVERLAP_GRAD_OFF_TIP = ("needs data parallelism: with dp 1 there are no gradients to reduce across replicas "
                        "(set dp > 1 and press Auto-map first)")
OVERLAP_EP_OFF_TIP = ("needs expert parallelism: with ep 1 the experts are not split, so there is no all-to-all "
                      "to overlap (set ep > 1 and press Auto-map first)")
RECOMPUTE_LAYERS_OFF_TIP = "needs full recomputation (choose 'full' above): only whole layers are re-run"
MODULES_OFF_TIP = "needs selective recomputation (choose 'selective' above): it names what that re-runs"
LAYOUT_OFF_TIP = "needs a pipeline: with pp × interleave = 1 every layer is on one stage (set pp > 1 first)"
OVERLAP_TP_OFF_TIP = ("needs tensor parallelism with sequence parallelism: the all-gathers and reduce-scatters it "
                      "pipelines exist only then (set tp > 1 and sequence parallelism, then press Auto-map)")
GRAD_FP32_OFF_TIP = ("needs bf16 or fp8 mixed-precision training: fp16 keeps an fp16 buffer and fp32 training an "
                     "fp32 one whatever this says")
FP8_OFF_TIP = ("needs fp8 GEMMs: the run's data type (run.dtype, --dtype fp8) or the weights' format "
               "(mapping.formats.weights) must be fp8 for a scaling recipe to matter")
DELAY_WGRAD_OFF_TIP = ("needs the expert all-to-all overlapped with compute (tick the option above; ep > 1): "
                       "the delayed weight gradients hide that overlapped all-to-all")
MIXED_OFF_TIP = ("needs mixed-precision training: low-precision weights (bf16, fp16 or fp8) with fp32 master "
                 "weights; fp32 training keeps Adam's state in fp32")
TP_RS_OFF_TIP = "needs the tensor-parallel communication overlapped with the GEMMs (the option above)"
GATHER_STEP_OFF_TIP = ("needs the post-step weight gather overlapped (overlap_param_gather), ZeRO-1/2 and interleaved "
                       "1F1B (interleave ≥ 2): it steps the first model chunk apart from the others")
IMBALANCE_OFF_TIP = "needs a mixture-of-experts model: the model has no routed experts to balance"
IMBALANCE_INFER_TIP = ("training only: an inference run splits no experts over expert-parallel ranks (every device "
                       "runs all of them), so no rank is busier than another; the CLI refuses --expert-imbalance "
                       "there too")
OFFLOAD_OFF_TIP = ("needs a host memory the devices reach over a host link: a memory of a node (or any component "
                   "that does not compute) with host_link_bandwidth_bytes_per_s set")
DISPATCHER_OFF_TIP = ("needs expert parallelism: with ep 1 every device holds all the experts and no token "
                      "is exchanged (set ep > 1 and press Auto-map first)")


def disabled_reason(field: str, project: Project) -> str | None:
    """Why the option ``field`` cannot matter for ``project`` as applied, or None when it can."""
    m, training = project.mapping, project.run.mode is Mode.train
    if field in FRAMEWORK_FIELDS:
        return framework_reason(field, project)
    if field == "recompute":
        return None if training else TRAINING_ONLY
    if field == "recompute_layers":
        return TRAINING_ONLY if not training else None if m.recompute is Recompute.full else RECOMPUTE_LAYERS_OFF_TIP
    if field == "recompute_modules":
        return TRAINING_ONLY if not training else None if m.recompute is Recompute.selective else MODULES_OFF_TIP
    if field == "overlap_grad_reduce":
        return TRAINING_ONLY if not training else OVERLAP_GRAD_OFF_TIP if m.dp == 1 else None
    if field == "overlap_tp_comm":
        return OVERLAP_TP_OFF_TIP if m.tp == 1 or not m.sequence_parallel else None
    if field == "tp_overlap_reduce_scatter":
        return None if m.overlap_tp_comm and m.tp > 1 and m.sequence_parallel else TP_RS_OFF_TIP
    if field == "fused_cross_entropy":
        return None if training else TRAINING_ONLY
    if field == "pipeline_layers":
        return LAYOUT_OFF_TIP if m.pp * m.interleave == 1 or m.stages else None
    if field == "ep_dispatcher":
        return DISPATCHER_OFF_TIP if m.ep == 1 else None
    if field == "overlap_ep_comm":
        return OVERLAP_EP_OFF_TIP if m.ep == 1 else None
    if field == "delay_wgrad_compute":
        return TRAINING_ONLY if not training else None if m.overlap_ep_comm and m.ep > 1 else DELAY_WGRAD_OFF_TIP
    if field == "cuda_graph_scope":
        return None if training else TRAINING_ONLY
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
    if field == "expert_imbalance":
        if getattr(project.workload, "moe", None) is None:
            return IMBALANCE_OFF_TIP
        return None if training else IMBALANCE_INFER_TIP
    if field == "memory_levels":
        return None if host_memory(project.hardware) is not None else OFFLOAD_OFF_TIP
    if field == "overlap_param_gather_with_optimizer_step":
        ready = m.overlap_param_gather and m.zero in (1, 2) and m.interleave > 1
        return TRAINING_ONLY if not training else None if ready or m.overlap_param_gather_with_optimizer_step \
            else GATHER_STEP_OFF_TIP
    raise KeyError(field)


def undo_text(field: str, value: Any, project: Project | None = None) -> str:
    """The Edit menu's name of the gesture ("Activation recompute selective", not "Set mapping recompute");
    ``project``: the one edited, for the offload's host memory name."""
    if field in FRAMEWORK_FIELDS:
        return framework_undo_text(field, value)
    if field == "expert_imbalance":
        return "Expert load: dropless routing's floor" if value is None else f"Expert load {value:g}× the mean"
    if field == "memory_levels":
        host = host_memory(project.hardware) if project is not None else None
        return offload_undo_text(value, host[0] if host else None)
    if field == "recompute":
        return f"Activation recompute {value}"
    if field == "recompute_layers":
        return "Recompute every layer" if value is None else f"Recompute {value} layers per chunk"
    if field == "recompute_modules":
        return "Recompute the attention core" if value is None else f"Recompute {', '.join(value)}"
    if field == "cuda_graph_scope":
        return "Launch kernels eagerly" if value is None else f"CUDA graphs {', '.join(value)}"
    if field == "ep_dispatcher":
        return f"Expert token exchange {DISPATCHER_LABELS[value]}"
    if field == "overlap_grad_reduce":
        return "Reduce gradients under the last backward" if value else "Reduce gradients after the backward"
    if field == "overlap_ep_comm":
        return "Overlap expert all-to-all" if value else "Stop overlapping expert all-to-all"
    if field == "delay_wgrad_compute":
        return "Delay weight gradients" if value else "Weight gradients with their input gradients"
    if field == "overlap_tp_comm":
        return "Overlap tensor-parallel communication" if value else "Stop overlapping tensor-parallel communication"
    if field == "tp_overlap_reduce_scatter":
        return f"Forward reduce-scatter overlap {TP_RS_LABELS[value]}"
    if field == "fused_cross_entropy":
        return "Fused cross-entropy" if value else "Eager cross-entropy"
    if field == "pipeline_layers":
        return "Even pipeline split" if value is None else f"Pipeline layout {format_pipeline_layout(value)}"
    if field == "fp8_scaling":
        return f"fp8 scaling {FP8_LABELS[value or Fp8Scaling.tensor.value]}"
    if field == "grad_reduce_in_fp32":
        return "Gradients in fp32" if value else "Gradients in bf16"
    if field == "optimizer_moments":
        return f"Adam moments {MOMENT_LABELS[value]}"
    if field == "optimizer_master":
        return f"Master weights {MASTER_LABELS[value]}"
    if field == "overlap_param_gather_with_optimizer_step":
        return "Gather the first chunk during the step" if value else "Gather the first chunk at the next forward"
    if field == "fp8_bf16_layers":
        return "Every layer in fp8" if not value or not any(value) else f"bf16 layers {value[0]} first, {value[1]} last"
    raise KeyError(field)


class LayoutEditor(ValueEditor):
    """``mapping.pipeline_layers`` typed in its short form ("1,2*30,0"); empty means an even split."""

    def __init__(self, value: list[int] | None, check: Check, parent: QWidget | None = None):
        super().__init__(value, None, check, optional=True, parent=parent)
        self.line_edit.setPlaceholderText("even split")

    def display(self, value: Any) -> str:
        return format_pipeline_layout(value) if value else ""

    def evaluate(self, text: str) -> tuple[Any, str | None]:
        if not text.strip():
            return None, self.check(None)
        try:
            value = parse_pipeline_layout(text)
        except ValueError as exc:
            return None, str(exc)
        return value, self.check(value)


class NamesEditor(ValueEditor):
    """A list of names typed comma-separated ("layernorm,moe_act": ``mapping.recompute_modules``,
    ``mapping.cuda_graph_scope``); empty: None, the default the placeholder names."""

    def __init__(self, value: list[str] | None, placeholder: str, check: Check, parent: QWidget | None = None):
        super().__init__(value, None, check, optional=True, parent=parent)
        self.line_edit.setPlaceholderText(placeholder)

    def display(self, value: Any) -> str:
        return ",".join(value) if value else ""

    def evaluate(self, text: str) -> tuple[Any, str | None]:
        value = [part.strip() for part in text.split(",") if part.strip()] or None
        return value, self.check(value)


class LayerPairEditor(ValueEditor):
    """Two layer counts typed "first,last" (``mapping.formats.bf16_first_layers`` / ``bf16_last_layers``); empty:
    none, the default."""

    def __init__(self, value: list[int] | None, check: Check, parent: QWidget | None = None):
        super().__init__(value, None, check, optional=True, parent=parent)
        self.line_edit.setPlaceholderText("none")

    def display(self, value: Any) -> str:
        return f"{value[0]},{value[1]}" if value else ""

    def evaluate(self, text: str) -> tuple[Any, str | None]:
        if not text.strip():
            return None, self.check(None)
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            return None, "type two layer counts, first,last (\"1,1\"), or leave it empty"
        value = [int(p) for p in parts]
        return value, self.check(value)


class LabelledChoice(ChoiceEditor):
    """A choice shown in words ("deepep (node by node)") while the model holds the bare value ("deepep")."""

    def __init__(self, value: str, labels: dict[str, str], check: Check, parent: QWidget | None = None):
        self.labels = labels
        super().__init__(labels[value], list(labels.values()), lambda text: check(self.model_value(text)), parent)

    def set_value(self, value: str) -> None:
        super().set_value(self.labels[value])

    def model_value(self, chosen: str) -> object:
        return next(value for value, text in self.labels.items() if text == chosen)


def _compact(combo: QComboBox) -> None:
    """Let the combo shrink to the dock's width (1280 × 720) instead of widening the panel to its longest item."""
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(8)


class MappingOptions(QGroupBox):
    """The option controls; ``push`` is the panel's way of pushing a command (it keeps staged degrees)."""

    def __init__(self, doc: ProjectDocument, push: Callable[[QUndoCommand], None], parent: QWidget | None = None):
        super().__init__(TITLE, parent)
        self.doc = doc
        self.push = push
        m = doc.project.mapping
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
            "host_framework": self.host_framework,
        }
        for field, editor in self.editors.items():
            editor.committed.connect(lambda value, f=field: self.set_option(f, value))
        for combo in (self.recompute.combo, self.ep_dispatcher.combo, self.fp8_scaling.combo, self.moments.combo,
                      self.master.combo, self.tp_rs.combo, self.dgrad.combo, self.p2p.combo, self.timing.combo,
                      self.host_framework.combo):
            _compact(combo)
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
