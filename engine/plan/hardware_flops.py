"""The FLOPs a training iteration's devices execute (HFU's numerator), as the cost model runs them, and the
model's own FLOPs (MFU's numerator).

MFU counts the model's FLOPs by the SC'21 / PaLM convention: every query-key pair of attention, forward and
twice that backward, no recomputation. The hardware does something else, and HFU should say what:

- a fused (flash) attention kernel computes only the tiles a causal mask leaves and recomputes its scores in
  its backward (``op_cost.pass_flops``: the forward's causal pairs, ``FLASH_BACKWARD`` × that backward);
- full recomputation re-runs every block op's forward (at the pass's own FLOPs, so a fused attention's
  causal pairs), or those of the layers ``mapping.recompute_layers`` picks; selective recomputation re-runs
  the ops of ``mapping.recompute_modules`` (``perf.recompute``; by default the attention core,
  ``Op.selective``) except what runs inside a fused kernel (``op_cost.flash_ops``), which has nothing to
  re-run — but under Megatron-Core, which checkpoints the core whatever its backend, the fused kernel's
  forward too (``perf.recompute.reruns_flash``);
- routed experts with a capacity factor run every padded capacity slot (the ops' ``flops`` count
  tokens · top_k · capacity_factor, ``ir.ops.ExpertInfo``). The model's FLOPs count the top_k slots each
  token is routed to, whatever the capacity, as Megatron-LM's MFU formula does
  (``megatron/training/training.py`` ``num_floating_point_operations``: ``num_experts_routed_to =
  args.moe_router_topk``, no capacity factor) and NeMo's (``nemo/utils/flops_formulas.py``: ``FLOPSConfig``
  has ``moe_router_topk`` and no capacity): padding is work the hardware does, not work the model needs, so
  a larger capacity factor may raise HFU but never MFU.
"""

from __future__ import annotations

from collections.abc import Sequence

from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.ops import MoERole, Op, OpKind
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.op_cost import flash_ops, pass_flops
from tilewright.engine.perf.recompute import reruns_flash, selection
from tilewright.engine.workloads.graph import WorkloadGraph


def hardware_flops_per_sample(
    workload: WorkloadGraph, recompute: Recompute, fused: frozenset[tuple[str, str]],
    rerun: frozenset[int] | None = None, modules: Sequence[str] | None = None, flash_rerun: bool = False,
) -> float:
    """FLOPs per sample of one training iteration: forward, backward and re-run forward of every op;
    ``rerun``: the layers full recomputation re-runs (the plan's R passes; None: every block); ``modules``:
    what selective recomputation re-runs (``mapping.recompute_modules``); ``flash_rerun``: whether it re-runs a
    fused attention kernel's forward (``perf.recompute.reruns_flash``)."""
    blocks = set(workload.block_layers) if rerun is None else rerun
    total = 0.0
    for layer in workload.layers:
        ops = workload.layer_ops(layer.index)
        flash = flash_ops(ops, fused) if fused else frozenset()
        again = selection(ops, modules) if recompute is Recompute.selective else {}
        for op in ops:
            inside = op.name in flash
            forward = pass_flops(op, False, inside)
            total += forward + pass_flops(op, True, inside)
            if recompute is Recompute.full and op.layer in blocks and op.kind is not OpKind.embedding:
                total += forward
            elif op.name in again and again[op.name].rerun and (flash_rerun or not inside):
                total += forward
    return total


def useful_share(op: Op) -> float:
    """The share of an op's FLOPs the model needs: 1 / capacity_factor for a routed expert op with padded
    capacity (its FLOPs count tokens · top_k · capacity_factor slots, the model top_k), else 1."""
    moe = op.moe
    if moe is None or moe.role is not MoERole.expert or moe.capacity_factor is None:
        return 1.0
    return 1.0 / moe.capacity_factor


def model_flops_per_sample(workload: WorkloadGraph, backward: bool = True) -> float:
    """The model's FLOPs per sample (MFU's numerator): every op's forward (and, with ``backward``, its
    backward) FLOPs, routed experts at top_k slots per token (``useful_share``)."""
    return sum(
        (op.flops + (op.backward_flops if backward else 0.0)) * useful_share(op) for op in workload.ops()
    )


def run_flops(
    workload: WorkloadGraph, project: Project, fused: frozenset[tuple[str, str]], rerun_layers: Sequence[int],
    framework: str | None = None,
) -> tuple[float, float]:
    """(model, hardware) FLOPs of one iteration (training: the global batch; inference: the batch's forward).
    Model FLOPs count routed experts at top-k (``model_flops_per_sample``), hardware FLOPs what the device runs:
    capacity padding, and in training the recomputation (``rerun_layers``: the layers a full recompute re-runs;
    ``framework``: the resolved ``host_framework``, ``plan.framework_host``)."""
    m, run = project.mapping, project.run
    if run.mode is not Mode.train:
        batch = run.inference.batch
        return model_flops_per_sample(workload, backward=False) * batch, workload.flops_per_sample * batch
    rerun_of = frozenset(rerun_layers) if m.recompute is Recompute.full else None  # what the R passes re-run
    hardware = hardware_flops_per_sample(workload, m.recompute, fused, rerun_of, m.recompute_modules,
                                         reruns_flash(framework))
    return model_flops_per_sample(workload) * m.global_batch, hardware * m.global_batch
