"""The mapping options that hide dense communication behind compute: the data-parallel gradient reduction, the
tensor-parallel collectives and the post-step weight gather. Four fields, each set at once as one undo step by
``MappingOptions`` (``SetMappingOption``):

- reducing gradients under the last backward (``mapping.overlap_grad_reduce``); needs dp > 1, training, and is
  idle under FSDP, which always reduce-scatters behind the backward (``plan.sharding``);
- overlapping tensor-parallel communication with the GEMMs (``mapping.overlap_tp_comm``); needs tp > 1 and
  sequence parallelism;
- how that overlap hides the forward's reduce-scatters (``mapping.tp_overlap_reduce_scatter``): pipelined or
  ring exchange; needs the overlap above;
- gathering the first model chunk's weights during the optimizer step
  (``mapping.overlap_param_gather_with_optimizer_step``); needs the param-gather overlap, ZeRO-1/2 and interleaving.

The input-gradient all-reduce's overlap (``mapping.overlap_dgrad_comm``) sits beside the tensor-parallel overlap
in the panel, but its default is a framework era's, so it is a framework option (``studio.ui.framework_options``);
the expert all-to-all's overlap is an expert option (``studio.ui.expert_options``).
"""

from __future__ import annotations

from typing import Any

from tilewright.engine.ir.project import Mode, Project
from tilewright.studio.ui.framework_options import APPLIES, TRAINING_ONLY

OVERLAP_FIELDS = ("overlap_grad_reduce", "overlap_tp_comm", "tp_overlap_reduce_scatter",
                  "overlap_param_gather_with_optimizer_step")
OVERLAP_GRAD_TEXT = "reduce gradients under the last backward"
OVERLAP_TP_TEXT = "overlap tp communication with GEMMs"
TP_RS_TEXT = "reduce-scatter overlap"  # the forward's; the tooltip says so
TP_RS_LABELS = {"pipeline": "pipelined", "ring_exchange": "ring exchange"}
GATHER_STEP_TEXT = "gather the first chunk during the step"

OVERLAP_TIPS = {
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
    "overlap_param_gather_with_optimizer_step": "interleaved 1F1B with the distributed optimizer and the "
                                                "param-gather overlap: step the first model chunk's parameters "
                                                "first and gather that chunk's weights while the other chunks' are "
                                                "stepped, so the next forward waits only for what that step cannot "
                                                "hide (Megatron-Core --overlap-param-gather-with-optimizer-step). "
                                                f"{APPLIES}",
}
OVERLAP_GRAD_OFF_TIP = ("needs data parallelism: with dp 1 there are no gradients to reduce across replicas "
                        "(set dp > 1 and press Auto-map first)")
OVERLAP_GRAD_FSDP_TIP = ("FSDP reduce-scatters each layer's gradients on a stream of its own behind the next layer's "
                         "backward whatever this says: PyTorch FSDP has no serial mode, so the run overlaps them "
                         "with the option off too")
OVERLAP_TP_OFF_TIP = ("needs tensor parallelism with sequence parallelism: the all-gathers and reduce-scatters it "
                      "pipelines exist only then (set tp > 1 and sequence parallelism, then press Auto-map)")
TP_RS_OFF_TIP = "needs the tensor-parallel communication overlapped with the GEMMs (the option above)"
GATHER_STEP_OFF_TIP = ("needs the post-step weight gather overlapped (overlap_param_gather), ZeRO-1/2 and interleaved "
                       "1F1B (interleave ≥ 2): it steps the first model chunk apart from the others")


def overlap_reason(field: str, project: Project) -> str | None:
    """Why the option ``field`` cannot matter for ``project`` as applied, or None when it can."""
    m, training = project.mapping, project.run.mode is Mode.train
    if field == "overlap_grad_reduce":
        return (TRAINING_ONLY if not training else OVERLAP_GRAD_OFF_TIP if m.dp == 1
                else OVERLAP_GRAD_FSDP_TIP if m.fsdp else None)
    if field == "overlap_tp_comm":
        return OVERLAP_TP_OFF_TIP if m.tp == 1 or not m.sequence_parallel else None
    if field == "tp_overlap_reduce_scatter":
        return None if m.overlap_tp_comm and m.tp > 1 and m.sequence_parallel else TP_RS_OFF_TIP
    if field == "overlap_param_gather_with_optimizer_step":
        ready = m.overlap_param_gather and m.zero in (1, 2) and m.interleave > 1
        return TRAINING_ONLY if not training else None if ready or m.overlap_param_gather_with_optimizer_step \
            else GATHER_STEP_OFF_TIP
    raise KeyError(field)


def overlap_undo_text(field: str, value: Any) -> str:
    """The Edit menu's name of the gesture ("Overlap tensor-parallel communication")."""
    if field == "overlap_grad_reduce":
        return "Reduce gradients under the last backward" if value else "Reduce gradients after the backward"
    if field == "overlap_tp_comm":
        return "Overlap tensor-parallel communication" if value else "Stop overlapping tensor-parallel communication"
    if field == "tp_overlap_reduce_scatter":
        return f"Forward reduce-scatter overlap {TP_RS_LABELS[value]}"
    if field == "overlap_param_gather_with_optimizer_step":
        return "Gather the first chunk during the step" if value else "Gather the first chunk at the next forward"
    raise KeyError(field)
