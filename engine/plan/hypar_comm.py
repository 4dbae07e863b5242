"""What a HyPar partition moves, per device, and when: the plan's side of ``engine.search.hypar``'s accounting.

The search only needs one number per level; a simulation needs to know *which* tensor crosses the cut,
*after which pass* and *how much each device sends*. Per level h of an array of N = 2^H devices (groups
of N/2^(h-1) devices split in halves of g = N/2^h), the two halves of one group exchange, per direction
(Song et al., HPCA 2019, §3; the same tensors and shrink rules as ``engine.search.hypar``):

- layer l in dp: its weight gradient ΔW_l (at the weight share the levels above left it) — once per step,
  after its weight gradient is computed (``W``);
- layer l in mp: its output partial sums F_{l+1} — after its forward pass (``F``);
- l → l+1, dp→mp: ¼ A(F_{l+1}) after l's forward (``F``) and ¼ A(E_{l+1}) after l+1's backward (``B``);
  mp→mp and mp→dp: ½ A(E_{l+1}) after l+1's backward (``B``); dp→dp: nothing.

Each device of a half sends 1/g of that to its partner (i XOR g in the array order), so a level moves
2^h times the per-pair amount in total — Σ_h 2^(h-1) pairs × 2 directions, exactly the search's count.
F_{l+1} shrinks with layer l's batch share, E_{l+1} with layer l+1's, as in the search. Activation tensors
are per micro-batch of ``samples`` (micro_batch × dp) samples; over a step's micro-batches they add up to
the global batch the search counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tilewright.engine.ir.mapping import HyparChoice, Mapping
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.workloads.graph import WorkloadGraph

When = Literal["F", "B", "W"]  # after the layer's forward, after its backward, its weight gradient (per step)


@dataclass(frozen=True)
class HyparLayerTensors:
    """One weighted layer as HyPar sees it: weights (= ΔW) and output elements per sample."""

    index: int
    name: str
    weights: float
    out_elems: float  # F_{l+1} per sample: after activation and pooling; the logits for the last layer


@dataclass(frozen=True)
class Exchange:
    """Every device sends ``bytes_per_device`` to its partner at ``level``, after ``layer``'s pass ``when``
    (per micro-batch for F and B, once per step for W)."""

    level: int
    layer: int
    when: When
    what: str
    bytes_per_device: float


@dataclass
class HyparComm:
    devices: int
    layers: list[HyparLayerTensors]
    choices: list[list[HyparChoice]]  # per layer, per level (top first)
    batch_share: list[float]  # per layer: Π over levels of ½ where dp
    weight_share: list[float]  # per layer: Π over levels of ½ where mp
    exchanges: list[Exchange]

    @property
    def levels(self) -> int:
        return self.devices.bit_length() - 1

    def stride(self, level: int) -> int:
        """Array distance between partners at ``level`` (= devices per half of a level group)."""
        return self.devices >> level

    def bytes_per_step(self, micro_batches: int) -> float:
        """Everything every device sends in one step, summed over devices."""
        return sum(
            self.devices * x.bytes_per_device * (1 if x.when == "W" else micro_batches) for x in self.exchanges
        )


def layer_tensors(workload: WorkloadGraph) -> list[HyparLayerTensors]:
    """The workload's layers in order, with the sizes HyPar counts (``engine.plan.checks`` made sure they are
    all conv or fc)."""
    out = []
    for info in workload.layers:
        ops = workload.layer_ops(info.index)
        fmap = [op for op in ops if op.kind is not OpKind.loss]
        out.append(
            HyparLayerTensors(
                info.index, info.name, sum(op.params for op in ops), fmap[-1].out_elems if fmap else 0.0
            )
        )
    return out


def layer_choices(mapping: Mapping, layers: list[HyparLayerTensors]) -> list[list[HyparChoice]]:
    """Per layer, its choice at each level; layers the mapping does not list are dp everywhere."""
    levels = mapping.dp.bit_length() - 1
    listed = {lp.layer: lp.choices(levels) for lp in mapping.layer_parallelism}
    return [listed.get(lay.index, ["dp"] * levels) for lay in layers]


def hypar_comm(
    layers: list[HyparLayerTensors], choices: list[list[HyparChoice]], devices: int, samples: float, elem_bytes: int
) -> HyparComm:
    """The exchanges of one partition over ``devices`` (a power of two) for micro-batches of ``samples``."""
    n = len(layers)
    b = [1.0] * n
    w = [1.0] * n
    out: list[Exchange] = []
    levels = devices.bit_length() - 1
    for h in range(1, levels + 1):
        per = elem_bytes / (devices >> h)  # bytes per element of the pair's tensor, per sending device

        def add(layer: int, when: When, what: str, elems: float, h: int = h, per: float = per) -> None:
            if elems > 0:
                out.append(Exchange(h, layer, when, what, elems * per))

        for i, lay in enumerate(layers):
            if choices[i][h - 1] == "dp":
                add(lay.index, "W", "ΔW", lay.weights * w[i])
            else:
                add(lay.index, "F", "partial sums", lay.out_elems * samples * b[i])
        for i in range(n - 1):
            a, c = choices[i][h - 1], choices[i + 1][h - 1]
            f = layers[i].out_elems * samples * b[i]  # F_{i+1}, produced by layer i
            e = layers[i].out_elems * samples * b[i + 1]  # E_{i+1}, produced by layer i+1's backward
            if a == "dp" and c == "mp":
                add(layers[i].index, "F", "dp→mp F", 0.25 * f)
                add(layers[i + 1].index, "B", "dp→mp E", 0.25 * e)
            elif a == "mp":
                add(layers[i + 1].index, "B", f"mp→{c} E", 0.5 * e)
        for i in range(n):
            if choices[i][h - 1] == "dp":
                b[i] /= 2
            else:
                w[i] /= 2
    return HyparComm(devices, layers, choices, b, w, out)
