"""Collectives over a stage's replica groups, all groups at once: data-parallel reductions (the routed
experts' over their expert-data-parallel groups), the experts' all-to-all, the context ring, the tied
embedding's all-reduce between the first and last stage, and the seconds functions the passes use to size
what they can hide (``plan.sharding``, ``plan.context``). Split from ``plan.plan``, which builds plans from them."""

from __future__ import annotations

from collections.abc import Callable

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.collectives import Collective, Phase, collective, point_to_point
from tilewright.engine.plan.context import ContextComm
from tilewright.engine.plan.experts import (
    Routing,
    all_to_all,
    expert_dp,
    expert_tp_of,
    experts_apart,
    hierarchical_all_to_all,
)
from tilewright.engine.plan.sharding import ShardComm, dp_kind, is_edp, stage_shard_comm


def dp_group_collective(hw: HardwareGraph, groups: list[list[int]], kind: str, nbytes: float) -> Collective:
    """``kind`` of ``nbytes`` (per tensor rank) over the data-parallel group of every tensor rank at once."""
    if len(groups) <= 1:
        return Collective(kind, "none", ())  # type: ignore[arg-type]
    tp = len(groups[0])
    return merge_concurrent(
        [
            collective(hw, kind, [g[i] for g in groups], nbytes)  # type: ignore[arg-type]
            for i in range(tp)
        ]
    )


def expert_groups(groups: list[list[int]], ep: int) -> list[list[list[int]]]:
    """The replicas (tensor groups) that hold the same experts: expert rank e of every ep group
    (``plan.experts``: replicas ``k·ep … k·ep + ep − 1`` form one), so routed-expert gradients are reduced
    over len(groups) / ep replicas, one such set per expert rank. ``groups`` are the stage's dp · cp replicas
    with context parallelism: the experts fold over both."""
    if ep <= 1:
        return [groups]
    return [[groups[k * ep + e] for k in range(len(groups) // ep)] for e in range(ep)]


def folded(groups: list[list[int]], etp: int | None) -> bool:
    """Expert tensor parallelism below tp (``plan.experts``, MoE parallel folding): the expert groups are
    laid over the flattened stage, not replica by replica."""
    return etp is not None and etp != len(groups[0])


def folded_groups(groups: list[list[int]], ep: int, etp: int) -> tuple[list[list[int]], list[list[int]]]:
    """(ep groups, expert-data-parallel groups) of a stage under MoE parallel folding (Megatron-Core's
    expert rank generator, order tp-ep-dp): the stage's ranks flattened r = d · tp + t (``groups[d][t]``)
    and re-read as r = ((k · ep) + e) · etp + u — an ep group shares (k, u) (stride etp), an
    expert-data-parallel group shares (e, u) (stride ep · etp), tp · dp / (ep · etp) ranks."""
    flat = [dev for g in groups for dev in g]
    k_n = len(flat) // (ep * etp)
    eps = [[flat[(k * ep + e) * etp + u] for e in range(ep)] for k in range(k_n) for u in range(etp)]
    edps = [[flat[(k * ep + e) * etp + u] for k in range(k_n)] for e in range(ep) for u in range(etp)]
    return eps, edps


def edp_group_collective(
    hw: HardwareGraph, groups: list[list[int]], ep: int, kind: str, nbytes: float, etp: int | None = None
) -> Collective:
    """``kind`` of ``nbytes`` (per tensor rank) over every expert-data-parallel group of the stage at once
    (``expert_groups``): the routed experts' gradient reductions and weight gathers, each tensor rank with
    its peers in the replicas that hold the same experts; with ``etp`` below tp over ``folded_groups``."""
    if folded(groups, etp):
        edps = folded_groups(groups, ep, etp)[1]  # type: ignore[arg-type]
        if len(edps[0]) <= 1:
            return Collective(kind, "none", ())  # type: ignore[arg-type]
        return merge_concurrent([collective(hw, kind, g, nbytes) for g in edps])  # type: ignore[arg-type]
    return merge_concurrent([dp_group_collective(hw, g, kind, nbytes) for g in expert_groups(groups, ep)])


def etp_group_collective(hw: HardwareGraph, group: list[int], etp: int, kind: str, nbytes: float) -> Collective:
    """``kind`` of ``nbytes`` (full tensor of one expert-tensor group) on every expert-tensor group of one
    replica's tensor group at once: etp consecutive tensor ranks (``folded_groups``: same k and e, u
    varying), the gathers and reduce-scatters of the routed experts' tokens (``experts.expert_tp_comm``)."""
    parts = [group[j * etp:(j + 1) * etp] for j in range(len(group) // etp)]
    return merge_concurrent([collective(hw, kind, g, nbytes) for g in parts])  # type: ignore[arg-type]


def embedding_group_collective(
    hw: HardwareGraph, first: list[list[int]], last: list[list[int]], nbytes: float
) -> Collective:
    """An all-reduce of ``nbytes`` per device over every embedding group at once (``plan.tied``): the device
    of the first stage and the one of the last stage with the same replica and tensor rank, pairs that all
    run concurrently."""
    parts = [
        collective(hw, "all-reduce", [a, b], nbytes)
        for ga, gb in zip(first, last, strict=True)
        for a, b in zip(ga, gb, strict=True)
    ]
    return merge_concurrent(parts)


def cp_group_collective(hw: HardwareGraph, groups: list[list[int]], cp: int, kind: str, nbytes: float) -> Collective:
    """``kind`` of ``nbytes`` (per tensor rank) over every context-parallel group of the stage at once:
    replicas ``d·cp … d·cp + cp − 1`` (``plan.context``), each tensor rank on its own ring. Kind "ring": one
    step of ring attention, every rank sending ``nbytes`` to the next rank of its ring (Transformer Engine's
    ``flash_attn_p2p_communicate``), each send over its own route."""
    if cp <= 1:
        return Collective(kind, "none", ())  # type: ignore[arg-type]
    tp = len(groups[0])
    if kind == "ring":
        rings = [[groups[d * cp + c][i] for c in range(cp)] for d in range(len(groups) // cp) for i in range(tp)]
        return point_to_point(hw, [(g[c], g[(c + 1) % cp]) for g in rings for c in range(cp)], nbytes)
    parts = [
        collective(hw, kind, [groups[d * cp + c][i] for c in range(cp)], nbytes)  # type: ignore[arg-type]
        for d in range(len(groups) // cp)
        for i in range(tp)
    ]
    return merge_concurrent(parts)


def ep_group_collective(
    hw: HardwareGraph, groups: list[list[int]], ep: int, nbytes: float, routing: Routing | None = None,
    etp: int | None = None,
) -> Collective:
    """An all-to-all of ``nbytes`` per tensor rank over every expert-parallel group of the stage at once:
    replicas ``k·ep … k·ep + ep − 1`` (``plan.experts``), each tensor rank with its peers, or with ``etp``
    below tp the folded ep groups (``folded_groups``); node by node (``experts.hierarchical_all_to_all``)
    when ``routing`` is given (``Mapping.ep_dispatcher`` 'deepep')."""
    if ep <= 1:
        return Collective("exchange", "none", ())
    tp = len(groups[0])

    def exchange(group: list[int]) -> Collective:
        return all_to_all(hw, group, nbytes) if routing is None else hierarchical_all_to_all(hw, group, nbytes, routing)

    if folded(groups, etp):
        return merge_concurrent([exchange(g) for g in folded_groups(groups, ep, etp)[0]])  # type: ignore[arg-type]
    parts = [
        exchange([groups[k * ep + e][i] for e in range(ep)])
        for k in range(len(groups) // ep)
        for i in range(tp)
    ]
    return merge_concurrent(parts)


def ep_seconds(
    hw: HardwareGraph, groups: list[list[int]], ep: int, routing: Routing | None = None, etp: int | None = None
) -> Callable[[float], float]:
    """Seconds of an expert all-to-all of that many bytes per tensor rank over the stage's ep groups at once
    (``ep_group_collective``), cached by size: what an overlapped all-to-all has to hide."""
    cache: dict[float, float] = {}

    def seconds(nbytes: float) -> float:
        hit = cache.get(nbytes)
        if hit is None:
            hit = cache[nbytes] = ep_group_collective(hw, groups, ep, nbytes, routing, etp).time(hw)
        return hit

    return seconds


def tp_seconds(hw: HardwareGraph, group: list[int]) -> Callable[[str, float], float]:
    """Seconds of a tensor-parallel collective of that kind and size on one tensor group, cached: what an
    overlapped collective has to hide (``plan.tp_overlap``)."""
    cache: dict[tuple[str, float], float] = {}

    def seconds(kind: str, nbytes: float) -> float:
        hit = cache.get((kind, nbytes))
        if hit is None:
            hit = cache[(kind, nbytes)] = collective(hw, kind, group, nbytes).time(hw)  # type: ignore[arg-type]
        return hit

    return seconds


def context_comm(hw: HardwareGraph, groups: list[list[int]], cp: int, torch_ring: bool = False) -> ContextComm | None:
    """The stage's context ring (``plan.context``): Transformer Engine's, or PyTorch's (``torch_ring``: the
    plain-PyTorch frameworks, ``plan.torch_ring``)."""
    if cp <= 1:
        return None
    cache: dict[tuple[str, float], float] = {}

    def seconds(kind: str, nbytes: float) -> float:
        hit = cache.get((kind, nbytes))
        if hit is None:
            hit = cache[(kind, nbytes)] = cp_group_collective(hw, groups, cp, dp_kind(kind), nbytes).time(hw)
        return hit

    return ContextComm(cp, seconds, torch_ring)


def shard_comm(
    project: Project,
    hw: HardwareGraph,
    groups: list[list[int]],
    weight_bytes: float,
    grad_bytes: float,
    extra_params: dict[int, float] | None = None,
    layer_weight_bytes: dict[int, float] | None = None,
) -> ShardComm | None:
    """A training stage's ZeRO-2/3 collectives (``plan.sharding``); ``extra_params``: per layer index, the
    parameters it holds beyond its ops' (the tied embedding's copy, ``plan.tied``); ``layer_weight_bytes``: per
    layer index, its weights' bytes per parameter where not ``weight_bytes`` (bf16 edge layers). ``groups`` are
    the stage's dp · cp replicas: the weights are sharded, gathered and reduced over all of them (context ranks hold the
    same weights), so a stage with dp 1 and cp > 1 shards too."""
    m = project.mapping
    if project.run.mode is not Mode.train:
        return None
    replicas = m.dp * m.cp  # len(groups): cp is in force in training (``plan.context``)
    cache: dict[tuple[str, float], float] = {}

    def seconds(kind: str, nbytes: float) -> float:
        hit = cache.get((kind, nbytes))
        if hit is None:
            coll = (
                edp_group_collective(hw, groups, m.ep, dp_kind(kind), nbytes, etp)
                if is_edp(kind)
                else dp_group_collective(hw, groups, dp_kind(kind), nbytes)
            )
            hit = cache[(kind, nbytes)] = coll.time(hw)
        return hit

    etp = expert_tp_of(m)
    # cp ranks fold into the experts' dp; None: the experts are split over tp and sharded like the dense weights
    edp = expert_dp(m.tp, replicas, m.ep, etp) if experts_apart(m.ep, etp, m.tp) else None
    # FSDP reduce-scatters on a stream of its own whatever overlap_grad_reduce says (``plan.sharding``)
    return stage_shard_comm(
        m.zero, replicas, m.overlap_param_gather, m.overlap_grad_reduce or m.fsdp, weight_bytes, grad_bytes, seconds,
        m.ep, extra_params, edp, layer_weight_bytes, m.fsdp_copies,
    )


def scaled(coll: Collective, fraction: float, calls: int = 1) -> Collective:
    """The same collective carrying ``fraction`` of the bytes (same link-usage objects), issued as ``calls``
    collectives one after the other (a data-parallel wrapper's buckets, ``plan.replica_sync.ddp_bucket_calls``):
    each pays the latencies the whole one has, the bytes are shared among them."""
    phases = tuple(Phase(ph.usage, ph.bytes_per_member * fraction, ph.latency_s * max(1, calls))
                   for ph in coll.phases)
    return Collective(coll.kind, coll.algorithm, phases, coll.payload_fraction)


def merge_concurrent(parts: list[Collective]) -> Collective:
    """Collectives on disjoint groups at the same time: add their link usage phase by phase.

    Congruent groups run the same algorithm and merge exactly. On an irregular grid each group may pick a
    different algorithm (another phase count, other bytes per phase): phase i of every group that has one
    runs beside phase i of the others, each link carrying the sum of their bytes (usage scaled to the
    phase's largest bytes per member), with the slowest latency; a group's later phases run alone."""
    if not parts or not parts[0].phases:
        return parts[0] if parts else Collective("all-reduce", "none", ())
    phases = []
    for i in range(max(len(c.phases) for c in parts)):
        here = [c.phases[i] for c in parts if i < len(c.phases)]
        ref = max(ph.bytes_per_member for ph in here)
        usage: dict[int, float] = {}
        for ph in here:
            share = ph.bytes_per_member / ref if ref > 0 and ph.bytes_per_member != ref else 1.0
            for lk, u in ph.usage.items():
                usage[lk] = usage.get(lk, 0.0) + u * share
        phases.append(Phase(usage, ref, max(ph.latency_s for ph in here)))
    return Collective(parts[0].kind, parts[0].algorithm, tuple(phases), parts[0].payload_fraction)
