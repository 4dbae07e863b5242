"""The cost tables the multi-level MILP is built from: everything that depends on one decision only.

- per tensor degree t: a micro-batch's forward + backward time over all layers on one chip, with the
  intra-chip level optimised (``fusion``) or as the engine's unfused op model; stored activations and
  workspace per device; tensor-parallel collective bytes per micro-batch;
- per network dimension and member count f: ring collective time along that dimension (Thakur et al.
  2005: all-reduce 2(f−1)/f·n/B + 2(f−1)·α, reduce-scatter and all-gather half that). A group spanning
  several dimensions is charged each dimension's ring on the whole message — the bucket algorithm
  without the shrinking of later phases: exact on the innermost dimension, an upper bound beyond it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.ops import Op
from tilewright.engine.jobs import Reporter
from tilewright.engine.perf.device import DeviceModel
from tilewright.engine.perf.memory import activation_bytes, params_on_device, workspace_bytes
from tilewright.engine.plan.passes import backward_pass, forward_pass
from tilewright.engine.search.multilevel.fusion import FusedLayer, optimize_layer
from tilewright.engine.search.multilevel.netdims import Dim
from tilewright.engine.search.op_settings import OpSettings


@dataclass
class Part:
    """One micro-batch on one chip of a t-way tensor group, over a set of layers."""

    fused_s: float = 0.0
    default_s: float = 0.0
    comm: list[tuple[str, float]] = field(default_factory=list)  # (collective, full-tensor bytes)
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
) -> TensorCosts:
    """Tables for every tensor degree in ``degrees``; identical layers are optimised once. ``report`` gets
    a fraction (and is checked for a cancel) per degree: each solves a fusion programme per layer kind."""
    report = report or Reporter()
    elem = settings.elem_bytes
    out = TensorCosts()
    extra = 1.0 + (1 / 3 if recompute is Recompute.full else 0.0)  # a recomputed forward ≈ ⅓ of F+B
    block_set = set(blocks)
    for k, t in enumerate(degrees):
        report(k / len(degrees))
        sp_t = sp and t > 1
        cache: dict[tuple, FusedLayer] = {}
        parts = {"first": Part(), "block": Part(), "last": Part()}
        acts = ws = 0.0
        ctx = settings.context(dev, mb, t, sp_t)
        for i, ops in enumerate(layers):
            key = _signature(ops)
            layer = cache.get(key)
            if layer is None:
                layer = cache[key] = optimize_layer(ops, fusion_dev, mb, t, sp_t, elem, settings)
            part = parts["block" if i in block_set else ("first" if i < blocks[0] else "last")]
            part.fused_s += layer.optimized_s * extra
            part.default_s += layer.default_s * extra
            acts += activation_bytes([ops], mb, t, sp_t, recompute, elem)
            ws = max(ws, workspace_bytes(ops, mb, t, sp_t, elem))
            passes = [forward_pass([ops], ctx), backward_pass([ops], ctx)]
            if recompute is Recompute.full:
                passes.append(passes[0])  # the recomputed forward repeats its collectives
            for ps in passes:
                part.comm += [seg.comm for seg in ps.segments if seg.comm]
        n = max(len(blocks), 1)
        blk = parts["block"]
        parts["block"] = Part(blk.fused_s / n, blk.default_s / n, blk.comm, 1.0 / n)
        out.first[t], out.block[t], out.last[t] = parts["first"], parts["block"], parts["last"]
        out.activations[t], out.workspace[t] = acts, ws
        out.fused[t] = list(cache.values())
    return out


def params_per_tensor_rank(layers: list[list[Op]], t: int) -> float:
    return sum(params_on_device(ops, t) for ops in layers)
