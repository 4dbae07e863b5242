"""HyPar: layer-wise choice between data and model parallelism for an array of accelerators.

Song et al., "HyPar: Towards Hybrid Parallelism for Deep Learning Accelerator Array", HPCA 2019, §3–4.
Each weighted layer ``l`` of a chain picks

- ``dp``: split the batch; the two halves exchange the weight gradient ΔW_l;
- ``mp``: split the weights (input channels / weight rows); the halves exchange output partial sums F_{l+1}.

Communication of one training step between two halves, in elements A(·):

- intra-layer: dp → A(ΔW_l); mp → A(F_{l+1});
- inter-layer l → l+1: dp→dp 0; dp→mp ¼A(F_{l+1}) + ¼A(E_{l+1}); mp→mp ½A(E_{l+1}); mp→dp ½A(E_{l+1}).

A two-state dynamic programme over the layers (best cost ending in dp / in mp) finds the optimum in
linear time. For 2^H accelerators the array is halved level by level (level 1 = top); a level's choices
shrink the tensors the next level sees — dp halves the layer's batch, mp halves its weights — and the
total is Σ_h 2^(h-1)·com_h, because level h has 2^(h-1) pairs of groups exchanging.

Conventions (they reproduce the paper's Fig. 8 figure: pure data parallelism for VGG-A on 16
accelerators at batch 128, fp32, moves 15.9 GB per step — 132,863,336 parameters × 4 B × 2 × 15):

- every conv and fc layer counts, biases included; F_{l+1} is the layer's output after its activation
  and pooling (the last fc layer: its logits, not the scalar loss); E_{l+1} has F_{l+1}'s shape;
- each exchange is counted in both directions (×2), at the data type's size;
- F_{l+1} shrinks with the batch split of layer l (its producer), E_{l+1} with that of layer l+1 (the
  backward pass of l+1 produces it). The paper does not spell this out; it only matters when adjacent
  layers chose differently at an upper level.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tilewright.engine.errors import InputError, Problem
from tilewright.engine.ir.common import dtype_bytes
from tilewright.engine.ir.ops import LayerKind, OpKind
from tilewright.engine.workloads.graph import WorkloadGraph

Choice = Literal["dp", "mp"]
CHOICES: tuple[Choice, Choice] = ("dp", "mp")
DIRECTIONS = 2  # both halves send: each exchange crosses the cut once each way


@dataclass(frozen=True)
class HyparLayer:
    """What HyPar needs of one weighted layer: per-sample output elements and weight elements."""

    index: int  # the workload's layer index
    name: str
    weights: float  # A(W_l) = A(ΔW_l)
    out_elems: float  # A(F_{l+1}) per sample, after activation and pooling


@dataclass
class Level:
    level: int  # 1 = top (the cut between the two halves of the whole array)
    comm_elems: float  # one pair of groups, before the 2^(level-1) multiplier
    choices: list[Choice]


@dataclass
class Partition:
    layers: list[HyparLayer]
    batch: int
    accelerators: int
    elem_bytes: int
    levels: list[Level] = field(default_factory=list)

    def level_bytes(self, lv: Level) -> float:
        """All bytes moved at one level: every pair of groups, both directions."""
        return 2 ** (lv.level - 1) * lv.comm_elems * DIRECTIONS * self.elem_bytes

    @property
    def total_bytes(self) -> float:
        return sum(self.level_bytes(lv) for lv in self.levels)


def hypar_layers(workload: WorkloadGraph) -> list[HyparLayer]:
    """The chain of weighted layers (conv/fc) of a CNN or MLP; anything else is not a HyPar workload."""
    out: list[HyparLayer] = []
    for info in workload.layers:
        ops = workload.layer_ops(info.index)
        if info.kind not in (LayerKind.conv, LayerKind.fc):
            raise InputError(
                workload.name,
                f"layer {info.name} is of kind '{info.kind.value}'; HyPar partitions chains of conv and fc layers",
            )
        fmap = [op for op in ops if op.kind is not OpKind.loss]
        out.append(
            HyparLayer(info.index, info.name, sum(op.params for op in ops), fmap[-1].out_elems if fmap else 0.0)
        )
    if not out:
        raise InputError(workload.name, "no weighted layers to partition")
    return out


def _intra(layer: HyparLayer, choice: Choice, batch: float, b_scale: float, w_scale: float) -> float:
    if choice == "dp":
        return layer.weights * w_scale
    return layer.out_elems * batch * b_scale


def _inter(
    layer: HyparLayer, a: Choice, b: Choice, batch: float, b_producer: float, b_consumer: float
) -> float:
    """Transition cost from layer l (choice a) to l+1 (choice b) over the tensors between them."""
    f = layer.out_elems * batch * b_producer  # F_{l+1}, produced by layer l
    e = layer.out_elems * batch * b_consumer  # E_{l+1}, produced by layer l+1's backward pass
    if a == "dp":
        return 0.0 if b == "dp" else 0.25 * f + 0.25 * e
    return 0.5 * e


def level_cost(
    layers: list[HyparLayer], choices: list[Choice], batch: float, b_scale: list[float], w_scale: list[float]
) -> float:
    """Communication (elements, one direction, one pair of groups) of one assignment at one level."""
    total = sum(_intra(lay, c, batch, b, w) for lay, c, b, w in zip(layers, choices, b_scale, w_scale, strict=True))
    for i in range(len(layers) - 1):
        total += _inter(layers[i], choices[i], choices[i + 1], batch, b_scale[i], b_scale[i + 1])
    return total


def best_level(
    layers: list[HyparLayer], batch: float, b_scale: list[float], w_scale: list[float]
) -> tuple[float, list[Choice]]:
    """The DP of HyPar §4.2: best cost of layers 0..l with layer l in dp or mp; linear in layers."""
    n = len(layers)
    cost = {c: _intra(layers[0], c, batch, b_scale[0], w_scale[0]) for c in CHOICES}
    back: list[dict[Choice, Choice]] = []
    for i in range(1, n):
        new: dict[Choice, float] = {}
        arg: dict[Choice, Choice] = {}
        for c in CHOICES:
            options = [
                (cost[p] + _inter(layers[i - 1], p, c, batch, b_scale[i - 1], b_scale[i]), p) for p in CHOICES
            ]
            best, prev = min(options, key=lambda t: t[0])  # ties: dp first, so pure dp wins a tie
            new[c] = best + _intra(layers[i], c, batch, b_scale[i], w_scale[i])
            arg[c] = prev
        cost = new
        back.append(arg)
    last: Choice = min(CHOICES, key=lambda c: cost[c])
    path = [last]
    for arg in reversed(back):
        path.append(arg[path[-1]])
    return cost[last], path[::-1]


def levels_for(accelerators: int) -> int:
    if accelerators < 1 or accelerators & (accelerators - 1):
        raise InputError(
            "command line", Problem("--accelerators", f"{accelerators} is not a power of two (HyPar halves the array)")
        )
    return accelerators.bit_length() - 1


def _partition(
    layers: list[HyparLayer],
    accelerators: int,
    batch: int,
    elem_bytes: int,
    fixed: Choice | None,
    given: list[list[Choice]] | None = None,
) -> Partition:
    part = Partition(layers, batch, accelerators, elem_bytes)
    b_scale = [1.0] * len(layers)
    w_scale = [1.0] * len(layers)
    for h in range(1, levels_for(accelerators) + 1):
        if given is not None:
            choices = list(given[h - 1])
            cost = level_cost(layers, choices, batch, b_scale, w_scale)
        elif fixed is None:
            cost, choices = best_level(layers, batch, b_scale, w_scale)
        else:
            choices = [fixed] * len(layers)
            cost = level_cost(layers, choices, batch, b_scale, w_scale)
        part.levels.append(Level(h, cost, choices))
        for i, c in enumerate(choices):
            if c == "dp":
                b_scale[i] /= 2
            else:
                w_scale[i] /= 2
    return part


def hypar(layers: list[HyparLayer], accelerators: int, batch: int, dtype: str = "fp32") -> Partition:
    """HyPar's hierarchical partition of ``layers`` over ``accelerators`` (a power of two)."""
    if batch < 1:
        raise InputError("command line", Problem("--batch", f"{batch} must be at least 1"))
    return _partition(layers, accelerators, batch, dtype_bytes(dtype), None)


def uniform(layers: list[HyparLayer], accelerators: int, batch: int, dtype: str, choice: Choice) -> Partition:
    """Every layer at every level the same choice: the pure data- or model-parallel baselines."""
    return _partition(layers, accelerators, batch, dtype_bytes(dtype), choice)


def evaluate(
    layers: list[HyparLayer], levels: list[list[Choice]], accelerators: int, batch: int, dtype: str = "fp32"
) -> Partition:
    """The communication of a given partition — ``levels[h - 1]`` holds every layer's choice at level h —
    e.g. one read back from a project's ``mapping.layer_parallelism`` or edited by hand."""
    if len(levels) != levels_for(accelerators) or any(len(c) != len(layers) for c in levels):
        raise InputError(
            "HyPar partition",
            f"expected {levels_for(accelerators)} levels of {len(layers)} choices for {accelerators} accelerators",
        )
    return _partition(layers, accelerators, batch, dtype_bytes(dtype), None, levels)
