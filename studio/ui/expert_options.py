"""The mapping options of a mixture-of-experts model: how tokens reach their experts, how that exchange hides
behind compute, and how unevenly the router loads the expert ranks. Four fields, each set at once as one undo
step by ``MappingOptions`` (``SetMappingOption``):

- the expert token exchange (``mapping.ep_dispatcher``): flat all-to-all or DeepEP node by node; ep > 1;
- overlapping the expert all-to-all with compute (``mapping.overlap_ep_comm``); ep > 1; turning it off also
  turns off the next;
- deferring the weight gradients to hide the backward's all-to-all too (``mapping.delay_wgrad_compute``);
  needs the overlap above;
- the expert load imbalance (``mapping.expert_imbalance``, × the mean, ≥ 1): the busiest expert rank's routed
  tokens over the mean, which paces every rank; MoE models.
"""

from __future__ import annotations

from typing import Any

from tilewright.engine.ir.project import Mode, Project
from tilewright.studio.ui.framework_options import APPLIES, TRAINING_ONLY

EXPERT_FIELDS = ("ep_dispatcher", "overlap_ep_comm", "delay_wgrad_compute", "expert_imbalance")
DISPATCHER_TEXT = "expert token exchange"
OVERLAP_EP_TEXT = "overlap the expert all-to-all with compute"
DELAY_WGRAD_TEXT = "delay weight gradients behind the all-to-all"
IMBALANCE_TEXT = "expert load (× mean)"
# shown while unset: dropless routing then takes the statistical floor of balanced routing (plan.routing_imbalance)
IMBALANCE_DEFAULT = "default: floor ≈1.01×"
DISPATCHER_LABELS = {"alltoall": "alltoall (flat)", "deepep": "deepep (node by node)"}

EXPERT_TIPS = {
    "ep_dispatcher": "MoE: how tokens reach their experts. alltoall (flat) sends each token to every rank "
                     "holding one of its experts (Megatron-Core's alltoall dispatcher); deepep (node by node) "
                     "sends it once per destination node over the network, then forwards it over the node's "
                     "fabric to the GPUs of its experts (DeepEP, Megatron-Core's flex dispatcher). "
                     f"{APPLIES}",
    "overlap_ep_comm": "MoE: hide each expert all-to-all (dispatch and combine) behind another micro-batch's "
                       "compute of the same layer, as DeepSeek-V3's DualPipe and Megatron-Core's "
                       "--overlap-moe-expert-parallel-comm; only the part longer than that compute shows. "
                       f"{APPLIES}",
    "delay_wgrad_compute": "MoE with the overlapped all-to-all: run the weight-gradient GEMMs apart from the "
                           "input gradients, beside the backward's all-to-all, so that they hide it too: the "
                           "routed experts' behind the dispatch's gradient, attention's and the shared experts' "
                           "behind the next layer's combine gradient (Megatron-Core --delay-wgrad-compute). The "
                           f"compute is the same, only more of the all-to-all hides. {APPLIES}",
    "expert_imbalance": "MoE: the busiest expert-parallel rank's routed tokens over the mean, ≥ 1 (1: a balanced "
                        "router). Its expert GEMMs take that much longer and every rank waits for it in the "
                        "combine; typed as a factor, e.g. 1.2 for 20 % above the mean, at most "
                        "min(ep, experts / top_k) (every token's slots on that rank's experts). Empty: dropless "
                        "routing's statistical floor at the run's tokens (about 1.01×), capacity-padded routing 1. "
                        f"{APPLIES}",
}
DISPATCHER_OFF_TIP = ("needs expert parallelism: with ep 1 every device holds all the experts and no token "
                      "is exchanged (set ep > 1 and press Auto-map first)")
OVERLAP_EP_OFF_TIP = ("needs expert parallelism: with ep 1 the experts are not split, so there is no all-to-all "
                      "to overlap (set ep > 1 and press Auto-map first)")
DELAY_WGRAD_OFF_TIP = ("needs the expert all-to-all overlapped with compute (tick the option above; ep > 1): "
                       "the delayed weight gradients hide that overlapped all-to-all")
IMBALANCE_OFF_TIP = "needs a mixture-of-experts model: the model has no routed experts to balance"
IMBALANCE_INFER_TIP = ("training only: an inference run splits no experts over expert-parallel ranks (every device "
                       "runs all of them), so no rank is busier than another; the CLI refuses --expert-imbalance "
                       "there too")


def expert_reason(field: str, project: Project) -> str | None:
    """Why the option ``field`` cannot matter for ``project`` as applied, or None when it can."""
    m, training = project.mapping, project.run.mode is Mode.train
    if field == "ep_dispatcher":
        return DISPATCHER_OFF_TIP if m.ep == 1 else None
    if field == "overlap_ep_comm":
        return OVERLAP_EP_OFF_TIP if m.ep == 1 else None
    if field == "delay_wgrad_compute":
        return TRAINING_ONLY if not training else None if m.overlap_ep_comm and m.ep > 1 else DELAY_WGRAD_OFF_TIP
    if field == "expert_imbalance":
        if getattr(project.workload, "moe", None) is None:
            return IMBALANCE_OFF_TIP
        return None if training else IMBALANCE_INFER_TIP
    raise KeyError(field)


def expert_undo_text(field: str, value: Any) -> str:
    """The Edit menu's name of the gesture ("Expert token exchange deepep (node by node)")."""
    if field == "ep_dispatcher":
        return f"Expert token exchange {DISPATCHER_LABELS[value]}"
    if field == "overlap_ep_comm":
        return "Overlap expert all-to-all" if value else "Stop overlapping expert all-to-all"
    if field == "delay_wgrad_compute":
        return "Delay weight gradients" if value else "Weight gradients with their input gradients"
    if field == "expert_imbalance":
        return "Expert load: dropless routing's floor" if value is None else f"Expert load {value:g}× the mean"
    raise KeyError(field)
