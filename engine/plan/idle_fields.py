"""Mapping fields the simulation would read as nothing: refused by ``plan.checks`` with the field and why.

``cli.idle_flags`` refuses an idle *flag* by name; a field set through ``--set`` or a project file used to run
as if it had not been given — the same time and memory and no word — so a user comparing two runs saw no
difference and no reason. These are the fields that can only be idle for the project as given, whatever the
degrees a search or an Auto-map would pick next (a field a degree change could make meaningful is not refused
here, so a search keeps its latitude; and training-only fields in an inference run stay allowed, as
``cli.idle_flags`` explains — a project flips between modes and keeps its mapping, so the inference-only
``memory_levels.kv_cache`` stays allowed in training for the same reason):

- ``recompute_layers`` above the layers of the largest model chunk: Megatron's block method re-runs the first
  N layers of each chunk (``TransformerBlock._checkpointed_forward``: ``l_no < recompute_num_layers``), so
  any N past the chunk's layers is every layer — recompute 'full' without the count;
- ``interleave`` > 1 on one pipeline stage: interleaving splits a stage's layers into chunks so the pipeline
  fills sooner; with pp 1 there is no pipeline, and Megatron-Core refuses it ("pipeline-model-parallel size
  should be greater than 1 with interleaved schedule", ``parallel_state.initialize_model_parallel``);
- ``offload_layers`` in training without ``memory_levels.activations`` naming a host memory (or ``auto``):
  it counts the layers whose activations are copied to the host, and none are (``plan.activation_offload``);
- the mixture-of-experts fields (``expert_imbalance``, ``overlap_ep_comm``, ``delay_wgrad_compute``,
  ``ep_dispatcher``) on a model without mixture-of-experts layers: no router, no expert all-to-all;
- the GPU training-loop fields (``host_framework``, Megatron's logging and NaN checks, ``cuda_graph_scope``,
  ``gradient_accumulation_fusion`` off, ``moe_router_fusion``) on hardware none of whose devices a host
  framework drives kernel by kernel (``perf.device.issues_kernels``): a TPU, a grid or a wafer has none of the
  host work they price, and the device kind is not a degree a search changes.

Beside them, one field that would not be idle but impossible: ``expert_imbalance`` past what the run's ep allows
(``_imbalance_bound``).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

from tilewright.engine.errors import Problem
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.plan.checks import host_memories
from tilewright.engine.plan.routing_imbalance import imbalance_bound

if TYPE_CHECKING:
    from tilewright.engine.workloads.graph import WorkloadGraph

# mixture-of-experts fields of the mapping → what they act on, and the value that asks for nothing
_MOE_FIELDS = {
    "expert_imbalance": ("weighs the busiest expert rank's routed tokens", None),
    "overlap_ep_comm": ("hides the expert all-to-all", False),
    "delay_wgrad_compute": ("hides the backward's expert all-to-all", False),
    "ep_dispatcher": ("picks how tokens reach their experts", "alltoall"),
}


def idle_field_problems(project: Project, graph: WorkloadGraph) -> list[Problem]:
    """Every mapping field of ``project`` that can only be idle (module docstring)."""
    m = project.mapping
    out: list[Problem] = []
    train = project.run.mode is Mode.train
    blocks = len(graph.block_layers)
    if train and m.recompute_layers is not None and not m.stages:
        largest = max(m.pipeline_layers) if m.pipeline_layers is not None else math.ceil(blocks / (m.pp * m.interleave))
        if m.recompute_layers > largest:
            out.append(Problem("mapping.recompute_layers", f"{m.recompute_layers}: a model chunk holds at most "
                               f"{largest} transformer layers ({blocks} over pp × interleave = "
                               f"{m.pp} × {m.interleave}), so every layer is re-run — recompute 'full' without "
                               f"recompute_layers does that; give at most {largest}"))
    if train and m.interleave > 1 and m.pp == 1:
        out.append(Problem("mapping.interleave", f"{m.interleave}: interleaving splits pipeline stages into model "
                           "chunks, and pp is 1 (Megatron-Core: 'pipeline-model-parallel size should be greater "
                           "than 1 with interleaved schedule'); set pp ≥ 2 or interleave 1"))
    level = m.memory_levels.get("activations")
    if train and m.offload_layers is not None and level != "auto" and level not in host_memories(project):
        where = f"'{level}' is not host memory" if level else "memory_levels.activations is not set"
        out.append(Problem("mapping.offload_layers", f"{m.offload_layers}: counts the transformer layers whose "
                           f"activations are copied to host memory, and {where}; put the activations in the "
                           "node's host memory or leave offload_layers unset"))
    out += _gpu_loop_problems(project) if train else []
    asked = [name for name, (_, none) in _MOE_FIELDS.items() if getattr(m, name) != none]
    if asked and not any(op.moe is not None for op in graph.ops()):
        for name in asked:
            out.append(Problem(f"mapping.{name}", f"{getattr(m, name)}: {_MOE_FIELDS[name][0]}, and the model has "
                               "no mixture-of-experts layers"))
    out += _imbalance_bound(m.expert_imbalance, m.ep, graph)
    return out


def _imbalance_bound(imbalance: float | None, ep: int, graph: WorkloadGraph) -> list[Problem]:
    """``expert_imbalance`` past what the run's expert parallelism allows (``routing_imbalance.imbalance_bound``:
    min(ep, experts / top_k), the same cap the unset default's floor keeps), for the layer whose bound is least.
    Not an idle field but an impossible one: the plan would price a busiest rank carrying more token-slots than
    its experts can receive (``experts.shard_experts``). A search whose candidates keep the project's value
    (``Candidate.mapping`` takes what it does not choose from the project's mapping; the command line's search
    keeps only ``cli.search.KEPT_MAPPING_FIELDS``, not this one) drops a smaller ep's mappings, as it drops an
    ep that does not divide the experts. At ep 1 the field is idle for this ep only — one rank runs every expert
    and the plan runs 1 — so, like ``overlap_ep_comm`` there, it is kept for a degree change."""
    if imbalance is None or ep <= 1:
        return []
    bounds = [(imbalance_bound(op.moe.experts, op.moe.top_k, ep), op.moe.experts, op.moe.top_k)
              for op in graph.ops() if op.moe is not None]
    if not bounds:
        return []
    bound, experts, top_k = min(bounds)
    if imbalance <= bound * (1 + 1e-12):
        return []
    held = experts / ep
    return [Problem("mapping.expert_imbalance", f"{imbalance:g}: with ep {ep} an expert rank holds {held:g} of the "
                    f"{experts} routed experts, so it receives at most min(top_k, {held:g}) = {min(top_k, held):g} "
                    f"of a token's top_k = {top_k} slots against a mean of {top_k}/{ep}: at most min(ep, experts / "
                    f"top_k) = {bound:g} times the mean load; give at most {bound:g}, or a larger ep")]


# GPU training-loop fields → the value that asks for nothing; read only where a host framework issues each kernel
# (``perf.device.issues_kernels``: plan.framework_host, plan.train_logging, plan.cuda_graphs, plan.grad_hooks,
# plan.moe_host)
_GPU_LOOP_FIELDS = {
    "host_framework": None,
    "log_params_norm": False,
    "log_num_zeros_in_grad": False,
    "timing_log_level": None,
    "check_for_nan_in_loss_and_grad": False,
    "cuda_graph_scope": None,
    "gradient_accumulation_fusion": True,
    "moe_router_fusion": False,
}


def _gpu_loop_problems(project: Project) -> list[Problem]:
    """GPU training-loop fields on hardware none of whose devices a host framework drives kernel by kernel (a
    TPU, a grid, a wafer): the device kind is not a degree a search changes, so the field can only be idle, and
    ran as if unset (``cli.idle_flags`` refuses the flags; a project file went through without a word)."""
    from tilewright.engine.perf.device import issues_kernels

    m = project.mapping
    asked = [name for name, none in _GPU_LOOP_FIELDS.items() if getattr(m, name) != none]
    if not asked or any(c.compute is not None and issues_kernels(c.compute) for _p, c in project.hardware.walk()):
        return []
    return [Problem(f"mapping.{name}", f"{json.dumps(getattr(m, name))}: a GPU framework's host work (kernels "
                    "issued one by one), and this hardware's devices run each op as one program; leave it unset")
            for name in asked]
