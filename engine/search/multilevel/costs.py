"""The cost tables the multi-level MILP is built from: everything that depends on one decision only.

- per tensor degree t: a micro-batch's forward + backward (+ recompute) time over all layers on one chip
  as the engine has it — the plan's own passes (``plan.passes``, with the mapping's ``PassContext``), so
  the mapper and ``tilewright run`` cannot drift apart — and, with the intra-chip level optimised
  (``fusion``), the same passes with the chains the programme fuses (``mapping.fusion`` as the engine
  models it: the DRAM round trips removed; the programme's tiles and weight re-reads only choose);
  stored activations and workspace per device; tensor-parallel collective bytes per micro-batch, from the same passes;
- per network dimension and member count f: the engine's collective on a group of f devices along that
  dimension (``dimcomm``). A group spanning several dimensions is charged each dimension's collective
  on the whole message — the bucket algorithm without the shrinking of later phases: exact on one
  dimension, an upper bound beyond it. ``ring_time`` (Thakur et al. 2005: all-reduce 2(f−1)/f·n/B +
  2(f−1)·α, reduce-scatter and all-gather half that) is the stand-in when no system is at hand.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.ops import Op
from tilewright.engine.jobs import Reporter
from tilewright.engine.perf.device import DeviceModel
from tilewright.engine.perf.memory import activation_bytes, params_on_device, recomputed_layers, workspace_bytes
from tilewright.engine.plan.context import flash_fused
from tilewright.engine.plan.passes import ChunkPass, PassContext, backward_pass, forward_pass, fused_edges
from tilewright.engine.search.multilevel.fusion import FusedLayer, optimize_layer
from tilewright.engine.search.multilevel.netdims import Dim
from tilewright.engine.search.op_settings import OpSettings


@dataclass
class Part:
    """One micro-batch on one chip of a t-way tensor group, over a set of layers."""

    fused_s: float = 0.0
    default_s: float = 0.0
    # (collective, full-tensor bytes, the seconds of weight gradients an async one runs beside or None:
    # ``plan.dgrad_overlap``, timed per placement by ``Problem.collective``)
    comm: list[tuple[str, float, float | None]] = field(default_factory=list)
    scale: float = 1.0  # the blocks' part is an average: its collectives count 1/L each


@dataclass
class TensorCosts:
    """Per tensor degree t: the layers before the pipelined blocks (embedding), the blocks (per block,
    averaged), the layers after them (head); activations and workspace over all layers."""

    first: dict[int, Part] = field(default_factory=dict)
    block: dict[int, Part] = field(default_factory=dict)
    last: dict[int, Part] = field(default_factory=dict)
    activations: dict[int, float] = field(default_factory=dict)
    workspace: dict[int, float] = field(default_factory=dict)
    fused: dict[int, list[FusedLayer]] = field(default_factory=dict)  # one per distinct layer

    def compute(self, t: int, fused: bool) -> tuple[float, float, float]:
        pick = (lambda p: p.fused_s) if fused else (lambda p: p.default_s)
        return pick(self.first[t]), pick(self.block[t]), pick(self.last[t])


def ring_time(kind: str, f: int, nbytes: float, dim: Dim) -> float:
    if f <= 1 or nbytes <= 0:
        return 0.0
    share = (f - 1) / f
    if kind == "all-reduce":
        return 2 * share * nbytes / dim.bandwidth + 2 * (f - 1) * dim.hop_latency
    return share * nbytes / dim.bandwidth + (f - 1) * dim.hop_latency


def _signature(ops: list[Op]) -> tuple:
    return tuple(repr(op.model_dump(exclude={"name", "layer", "inputs"})) for op in ops)


def tensor_costs(
    layers: list[list[Op]],
    blocks: list[int],
    dev: DeviceModel,
    fusion_dev: DeviceModel,
    degrees: list[int],
    mb: int,
    sp: bool,
    recompute: Recompute,
    settings: OpSettings,
    report: Reporter | None = None,
    modules: list[str] | None = None,
    stream_s_per_byte: Callable[[int], float] | None = None,
) -> TensorCosts:
    """Tables for every tensor degree in ``degrees``; identical layers are optimised once. ``report`` gets
    a fraction (and is checked for a cancel) per degree: each solves a fusion programme per layer kind.
    ``modules``: what selective recomputation re-runs (``mapping.recompute_modules``);
    ``stream_s_per_byte(t)``: on a device streaming from remote DRAM (an SRAM-only tile), the seconds per
    byte of a t-way group's tightest stream link (``LayerCosts.dram_seconds_per_byte``), 0 for none.

    The unfused time is the busy time of the engine's passes of the layer (forward, backward and the
    recompute pass ``build_plan`` adds), the tensor-parallel collectives their segments carry; the fused
    time the same passes with the chains ``fusion`` picks for this degree (``fusion_chains``) on chip."""
    report = report or Reporter()
    elem = settings.elem_bytes
    out = TensorCosts()
    block_set = set(blocks)
    spb_of = stream_s_per_byte or (lambda t: 0.0)
    for k, t in enumerate(degrees):
        report(k / len(degrees))
        sp_t = sp and t > 1
        cache: dict[tuple, FusedLayer] = {}
        for ops in layers:  # the fusion programme, once per layer kind
            key = _signature(ops)
            if key not in cache:
                cache[key] = optimize_layer(ops, fusion_dev, mb, t, sp_t, elem, settings)
        ctx = settings.context(dev, mb, t, sp_t)
        ctx.dgrad_overlap = settings.dgrad(recompute, dev.compute, t)  # timed per placement (plan.dgrad_overlap)
        # the chains the programme fuses, as ``with_fusion`` writes them into the mapping for the engine
        chains = fusion_chains([g for lay in cache.values() for g in lay.groups])
        edges = fused_edges(chains)  # a fused attention core is a flash kernel, its dropout inside
        fused_ctx = dataclasses.replace(ctx, fused=edges | flash_fused(layers, 1, edges))
        spb = spb_of(t)
        timed: dict[tuple, tuple[float, float, list[tuple[str, float, float | None]]]] = {}
        parts = {"first": Part(), "block": Part(), "last": Part()}
        acts = ws = 0.0
        for i, ops in enumerate(layers):
            key = _signature(ops)
            if key not in timed:
                passes = _passes(ops, ctx, recompute, modules)
                fused = _passes(ops, fused_ctx, recompute, modules)
                timed[key] = (sum(_busy(ps, spb) for ps in passes), sum(_busy(ps, spb) for ps in fused),
                              [(*seg.comm, seg.deferred_cover_s) for ps in passes for seg in ps.segments if seg.comm])
            busy, busy_fused, comm = timed[key]
            part = parts["block" if i in block_set else ("first" if i < blocks[0] else "last")]
            acts += activation_bytes([ops], mb, t, sp_t, recompute, elem)
            ws = max(ws, workspace_bytes(ops, mb, t, sp_t, elem))
            part.default_s += busy
            part.fused_s += busy_fused
            part.comm += comm
        n = max(len(blocks), 1)
        blk = parts["block"]
        parts["block"] = Part(blk.fused_s / n, blk.default_s / n, blk.comm, 1.0 / n)
        out.first[t], out.block[t], out.last[t] = parts["first"], parts["block"], parts["last"]
        out.activations[t], out.workspace[t] = acts, ws
        out.fused[t] = list(cache.values())
    return out


def fusion_chains(groups: list[list[str]]) -> list[list[str]]:
    """The programme's fused groups (full op names) as ``mapping.fusion`` chains, by op name within the
    layer, once each: the engine fuses a chain in every layer that has it."""
    chains: list[list[str]] = []
    for g in groups:
        chain = [name.split(".", 1)[-1] for name in g]  # as ``passes.local_name``
        if len(chain) > 1 and chain not in chains:
            chains.append(chain)
    return chains


def _passes(ops: list[Op], ctx: PassContext, recompute: Recompute, modules: list[str] | None) -> list[ChunkPass]:
    """The passes ``build_plan`` makes of one layer: forward, backward and, as ``LayerCosts._layer_passes``,
    the recompute pass (the whole forward again under full recomputation, ``modules`` under selective)."""
    passes = [forward_pass([ops], ctx), backward_pass([ops], ctx)]
    if recomputed_layers([ops], recompute):
        passes.append(forward_pass([ops], ctx, "R"))
    elif recompute is Recompute.selective:
        passes.append(forward_pass([ops], ctx, "R", only_selective=True,
                                   modules=tuple(modules) if modules is not None else None))
    return passes


def _busy(ps: ChunkPass, spb: float) -> float:
    """A pass's device time as ``LayerCosts._duration`` has it, without its collectives: each segment no
    shorter than its remote-DRAM bytes over the tightest stream link."""
    if spb <= 0 or not ps.has_dram:
        return ps.busy_s
    return sum(max(seg.busy_s, seg.dram_bytes * spb) if seg.dram_bytes > 0 else seg.busy_s for seg in ps.segments)


def params_per_tensor_rank(layers: list[list[Op]], t: int) -> float:
    return sum(params_on_device(ops, t) for ops in layers)
