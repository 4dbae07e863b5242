"""Expert parallelism for mixture-of-experts layers (``mapping.ep``; Lepikhin et al. 2020, Megatron-LM's
``--expert-model-parallel-size``), from the metadata the workload puts on MoE ops (``ir.ops.ExpertInfo``).

The ep ranks are carved out of the data-parallel replicas (ep divides dp): replicas ``k·ep … k·ep + ep − 1``
of a stage share their experts, each holding experts / ep of them, while every other weight stays whole on
every replica. Per device:

- routed-expert weights (``role == expert``): ``params / ep``;
- routed-expert work: unchanged on a balanced router — the device runs the token-slots the ep ranks route
  to its experts, as many as its own tokens have — times ``mapping.expert_imbalance`` (≥ 1), the busiest
  device's load over the mean, which sets the pace of every rank that waits for it in the combine;
- an all-to-all over the ep group before the first routed-expert op (dispatch: each token's hidden vector to
  each of its expert slots) and after the last (combine: the outputs back); the backward moves the same
  amounts in reverse. Of a device's buffer, (ep − 1)/ep leaves it. With tensor parallelism each tensor rank
  sends 1/tp of it (tokens split by sequence, Megatron's all-to-all dispatcher). All pairs exchange at once:
  one phase whose per-link use counts the routes crossing it (``all_to_all``).

Gradients of the routed experts are reduced (and, with ZeRO-1/2, their updated weights gathered) over the
dp / ep replicas that hold the same experts (Megatron-Core's expert-data-parallel group), the other weights'
over all replicas (``Plan.dp_collective``); ZeRO shards the experts' optimizer state (and gradients, weights
at stages 2, 3) over that group too (``perf.memory.expert_model_state``), and ZeRO-2/3's per-layer gathers
and reduce-scatters of the experts run over it (``plan.sharding``, kind ``edp:``). Not modelled: token
dropping at a capacity factor beyond the FLOPs the workload already pads.
"""

from __future__ import annotations

from collections import Counter

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.ops import MoERole, Op
from tilewright.engine.perf.collective_phase import Collective, Phase, route_latency

EP_PREFIX = "ep:"  # expert parallelism's all-to-all, a segment collective (``plan.sharding``)


def shard_experts(ops: list[Op], ep: int, imbalance: float) -> list[Op]:
    """A layer's ops as one ep rank holds and runs them (module docstring)."""
    if ep <= 1 and imbalance == 1.0:
        return ops
    out = []
    for op in ops:
        if op.moe is not None and op.moe.role is MoERole.expert:
            op = op.model_copy(
                update={
                    "params": op.params / ep,
                    "flops": op.flops * imbalance,
                    "bwd_flops": op.backward_flops * imbalance,
                }
            )
        out.append(op)
    return out


def routed_experts(ops: list[Op]) -> list[Op]:
    """The routed-expert ops of a layer: their weights are sharded over ep, their gradients reduced over the
    dp / ep replicas that hold the same experts (``plan.group_comm.expert_groups``)."""
    return [op for op in ops if op.moe is not None and op.moe.role is MoERole.expert]


def exchange(op: Op, backward: bool, tokens_scale: float, tp: int, elem_bytes: float) -> tuple[float, float]:
    """(before, after) all-to-all bytes per tensor rank around one op of a pass; ``tokens_scale`` is the
    pass's samples per device (the micro-batch). The backward runs the ops in reverse: the combine's
    gradient goes out before the op, the dispatch's after."""
    info = op.moe
    if info is None:
        return 0.0, 0.0
    per = info.tokens * tokens_scale * elem_bytes / tp
    dispatch, combine = info.dispatch_elems_per_token * per, info.combine_elems_per_token * per
    return (combine, dispatch) if backward else (dispatch, combine)


def all_to_all(hw: HardwareGraph, group: list[int], nbytes: float) -> Collective:
    """Every member sends nbytes / p to each other member at once: one phase, each member (p − 1)/p · nbytes,
    ``usage[link]`` = routes crossing the link / (p − 1) (a member's bytes split evenly over its routes)."""
    p = len(group)
    if p <= 1 or nbytes <= 0:
        return Collective("exchange", "none", ())
    usage: Counter = Counter()
    latency = 0.0
    for a in group:
        for b in group:
            if a != b:
                route = hw.device_route(a, b)
                usage.update(route)
                latency = max(latency, route_latency(hw, route))
    share = {lk: n / (p - 1) for lk, n in usage.items()}
    return Collective("exchange", "all-to-all", (Phase(share, (p - 1) / p * nbytes, latency),))


def is_ep(kind: str) -> bool:
    return kind.startswith(EP_PREFIX)
