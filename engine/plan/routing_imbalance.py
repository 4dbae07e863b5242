"""The busiest expert-parallel rank's routed load over the mean when ``mapping.expert_imbalance`` is left unset:
the statistical floor of dropless token-choice routing.

A dropless MoE layer's grouped GEMMs and its all-to-all finish when the rank with the most token-slots has them
(``plan.experts.busiest``). Even a router whose probabilities are exactly balanced — Megatron-Core's
``moe_router_force_load_balancing`` (``router.py``: ``RandomSTE`` replaces the logits by fresh normal samples, so
each token's top-k is a uniformly random k-subset of the experts; every NeMo/Megatron-Bridge MoE performance
script sets it) — leaves the ranks unevenly loaded in any one micro-batch: rank r's load is a sum over the
tokens the ep group routes, each putting a hypergeometric number of its top_k slots on r's experts / ep experts.
With T tokens over the group, E experts, k slots per token and p = 1/ep:

- per token: mean k·p, variance k·p·(1 − p)·(E − k)/(E − 1) (hypergeometric: k draws without replacement);
- per rank: mean T·k·p, standard deviation sqrt(T · that variance) (tokens route independently);
- the loads sum to T·k exactly, so they are exchangeable with correlation −1/(ep − 1): in the normal limit
  the busiest is E[max of ep iid standard normals] · sqrt(ep / (ep − 1)) standard deviations above the mean.

Each layer of each micro-batch draws afresh and every rank waits for that draw's busiest, so the expected step
time carries the expected maximum. The figure is a floor, not a trained router's skew: routers trained with an
auxiliary loss or bias-based balancing carry more. One published per-layer log (shawntan/scattermoe issue #10,
2024: a model trained with a load-balancing loss, iteration 38,350, 8 experts, 5,120 token-slots per layer, top-k
not stated) has max/mean 1.02-1.22 over 16 layers, mean 1.084, against this floor's 1.052-1.056 (top-2 or
top-1) at its token count: the floor is most of the excess there, the trained skew a few percent more. That skew
depends on the model, the data, the balancing method and the training step, and no source gives it for a
given run: set ``expert_imbalance`` to a measured figure.

Not modelled: group-limited routing (DeepSeek-V3's node-limited top-k, ``MoESpec.max_nodes_per_token``)
concentrates a token's slots on fewer ranks and raises the per-token variance a little (DeepSeek-V3, 256 experts
in 8 groups, top-4 groups, top-8, ep 64: 0.130 against 0.120 slots², so the floor's excess ~4 % larger: 1.019
against 1.018); the floor here is that of unlimited routing.

Drop-and-pad routing (a capacity factor) pads every expert to its capacity: balanced by construction (1).
The tokens over the ep group per micro-batch: ep ranks, each dispatching its sequence shard's tokens —
micro_batch / cp samples of seq_len split by tp with sequence parallelism — and with expert tensor parallelism
``etp`` each expert rank gathers etp of those shards: ep · etp · micro_batch · seq_len / (cp · tp).
"""

from __future__ import annotations

import math
from functools import lru_cache

from tilewright.engine.ir.project import Project


@lru_cache(maxsize=256)
def expected_max_normal(n: int) -> float:
    """E[max of n iid standard normals] = ∫ x · n · φ(x) · Φ(x)^(n−1) dx, by the trapezoid rule on [−9, 9]
    (0 for n = 1; 1/√π for n = 2)."""
    if n <= 1:
        return 0.0
    h = 1e-3
    total = 0.0
    for i in range(18001):
        x = -9.0 + i * h
        phi = math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1.0 + math.erf(x / math.sqrt(2)))
        w = 0.5 if i in (0, 18000) else 1.0
        total += w * x * n * phi * cdf ** (n - 1)
    return total * h


def imbalance_bound(experts: int, top_k: int, ep: int) -> float:
    """The largest busiest-rank load over the mean that ``ep`` expert-parallel ranks allow, whatever the router:
    a rank holds experts / ep experts, so it receives at most min(top_k, experts / ep) of a token's top_k
    distinct expert slots, against a mean of top_k / ep — ep · min(top_k, experts / ep) / top_k =
    min(ep, experts / top_k) (every token's slots on the busiest rank's experts). 1 at ep 1, where one rank
    holds every expert (``plan.experts.shard_experts`` runs 1 there). Expert tensor parallelism does not move
    it: the etp ranks of an expert-tensor group gather the same token-slots (``plan.experts``)."""
    if ep <= 1:
        return 1.0
    return ep * min(top_k, experts / ep) / top_k


def routing_floor(experts: int, top_k: int, ep: int, tokens: float) -> float:
    """Busiest ep rank's expected token-slots over the mean under balanced routing probabilities, ``tokens``
    routed over the ep group (module docstring); 1 without expert parallelism or tokens."""
    if ep <= 1 or tokens <= 0 or top_k >= experts:
        return 1.0
    p = 1.0 / ep
    mean = top_k * p
    var = top_k * p * (1 - p) * (experts - top_k) / (experts - 1)
    rel_sd = math.sqrt(var / tokens) / mean
    normal = 1.0 + expected_max_normal(ep) * math.sqrt(ep / (ep - 1)) * rel_sd
    # a rank can hold at most min(top_k, its experts) of a token's slots: the normal limit may not pass that
    # (only reached at a handful of tokens, where the normal limit no longer holds anyway)
    return min(normal, imbalance_bound(experts, top_k, ep))


def resolved_imbalance(project: Project, mb: float, ep: int, etp: int) -> float:
    """``mapping.expert_imbalance`` when the project gives it (it wins, 1 included); else the routing floor of a
    dropless MoE workload (``routing_floor`` at its tokens per micro-batch over the ep group; ``mb``: samples'
    worth of tokens one device runs, micro_batch / cp), 1 for capacity-padded routing, a workload without a
    ``MoESpec`` or no expert parallelism."""
    m = project.mapping
    if m.expert_imbalance is not None:
        return m.expert_imbalance
    moe = getattr(project.workload, "moe", None)
    seq = getattr(project.workload, "seq_len", None)
    if moe is None or seq is None or ep <= 1 or moe.capacity_factor is not None:
        return 1.0
    tokens = ep * etp * mb * seq / m.tp
    return routing_floor(moe.experts, moe.top_k, ep, tokens)
