"""The mapping options of how a step's work is laid out and launched, changing neither what is stored nor what
is sent: the layers of each virtual pipeline stage, the loss kernel and the CUDA graphs. Three fields, each set
at once as one undo step by ``MappingOptions`` (``SetMappingOption``):

- the layers of each virtual stage (``mapping.pipeline_layers``, "1,2*30,0"; empty: an even split); needs
  pp × interleave > 1, and Auto-map with another pp or interleave clears it;
- the loss as one fused kernel (``mapping.fused_cross_entropy``); training;
- the parts of each layer replayed from CUDA graphs (``mapping.cuda_graph_scope``, "attn,mlp"; empty: eager
  kernels); training.
"""

from __future__ import annotations

from typing import Any

from tilewright.engine.ir.mapping import format_pipeline_layout
from tilewright.engine.ir.project import Mode, Project
from tilewright.studio.ui.framework_options import APPLIES, TRAINING_ONLY

SCHEDULE_FIELDS = ("pipeline_layers", "fused_cross_entropy", "cuda_graph_scope")
LAYOUT_TEXT = "layers per virtual stage"
FUSED_LOSS_TEXT = "fused cross-entropy kernel"
GRAPHS_TEXT = "CUDA graphs"

SCHEDULE_TIPS = {
    "fused_cross_entropy": "the loss as one fused kernel over the logits (Megatron-Core --cross-entropy-loss-fusion, "
                           "NVIDIA's recipes) instead of Megatron-LM's eager vocab-parallel kernels, each streaming "
                           f"the fp32 logits. {APPLIES}",
    "pipeline_layers": "transformer layers of each virtual stage, in order (pp × interleave of them; N*K repeats: "
                       "1,2*30,0), the embedding on the first and the head on the last (Megatron-Core's pipeline "
                       f"layout); empty: an even split. {APPLIES}",
    "cuda_graph_scope": "the parts of each layer captured in CUDA graphs and replayed with one launch, "
                        "comma-separated (Megatron-Core's --cuda-graph-scope): attn, mlp, moe, moe_router, "
                        "moe_preprocess, full_iteration; their kernels cost the host no dispatch; empty: every "
                        f"kernel launched eagerly. {APPLIES}",
}
LAYOUT_OFF_TIP = "needs a pipeline: with pp × interleave = 1 every layer is on one stage (set pp > 1 first)"


def schedule_reason(field: str, project: Project) -> str | None:
    """Why the option ``field`` cannot matter for ``project`` as applied, or None when it can."""
    m, training = project.mapping, project.run.mode is Mode.train
    if field in ("fused_cross_entropy", "cuda_graph_scope"):
        return None if training else TRAINING_ONLY
    if field == "pipeline_layers":
        return LAYOUT_OFF_TIP if m.pp * m.interleave == 1 or m.stages else None
    raise KeyError(field)


def schedule_undo_text(field: str, value: Any) -> str:
    """The Edit menu's name of the gesture ("Pipeline layout 1,2*30,0")."""
    if field == "cuda_graph_scope":
        return "Launch kernels eagerly" if value is None else f"CUDA graphs {', '.join(value)}"
    if field == "fused_cross_entropy":
        return "Fused cross-entropy" if value else "Eager cross-entropy"
    if field == "pipeline_layers":
        return "Even pipeline split" if value is None else f"Pipeline layout {format_pipeline_layout(value)}"
    raise KeyError(field)
