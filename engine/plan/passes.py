"""One pass (forward, backward or recompute) of one model chunk for one micro-batch, as segments.

A segment is the compute between two tensor-parallel collectives. Megatron's placement of those
collectives (Shoeybi et al. 2019; Korthikanti et al. 2023 for sequence parallelism):
- forward: all-reduce after each row-parallel op and after the vocab-parallel embedding; with
  sequence parallelism a reduce-scatter there instead, and an all-gather before each column-parallel op;
- backward: all-reduce of the input gradient of each column-parallel op; with sequence parallelism a
  reduce-scatter there and an all-gather before each row-parallel op's backward.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property

from tilewright.engine.ir.mapping import SpatialSplit
from tilewright.engine.ir.ops import Op, OpKind, TensorSplit
from tilewright.engine.perf.device import DeviceModel
from tilewright.engine.perf.formats import OpFormats
from tilewright.engine.perf.op_cost import OpTime, op_time, shard
from tilewright.engine.perf.residency import Residency

PassKind = str  # "F" | "B" | "R"


@dataclass
class Segment:
    label: str
    layer: int
    busy_s: float  # roofline time on the device (compute and local memory overlapped)
    compute_s: float  # arithmetic-only part, the rest of busy_s is memory stall
    flops: float
    dram_bytes: float
    comm: tuple[str, float] | None = None  # (collective kind, full-tensor bytes) after this segment
    local_bytes: float = 0.0  # moved to/from the device's own memory (its DRAM, else its SRAM): energy

    def add(self, t: OpTime, dataflows: Counter) -> None:
        """Accumulate one op's time; count the SRAM dataflow its tiling chose, or the split of a grid
        device, if any."""
        self.busy_s += t.busy_s
        self.compute_s += t.compute_s
        self.flops += t.flops
        self.dram_bytes += t.dram_bytes
        self.local_bytes += t.local_bytes
        if t.dataflow:
            dataflows[t.dataflow] += 1
        if t.split:
            dataflows[t.split] += 1


@dataclass
class ChunkPass:
    kind: PassKind
    segments: list[Segment] = field(default_factory=list)
    dataflows: Counter = field(default_factory=Counter)  # SRAM tiling choices / grid splits of its ops

    @property
    def busy_s(self) -> float:
        return sum(s.busy_s for s in self.segments)

    @property
    def flops(self) -> float:
        return sum(s.flops for s in self.segments)

    @property
    def compute_s(self) -> float:
        return sum(s.compute_s for s in self.segments)

    @cached_property
    def has_dram(self) -> bool:
        return any(s.dram_bytes > 0 for s in self.segments)


@dataclass
class PassContext:
    dev: DeviceModel
    micro_batch: int
    tp: int
    sequence_parallel: bool
    elem_bytes: float  # of activations (and every tensor when ``formats`` is None)
    fused: frozenset[tuple[str, str]] = frozenset()  # (producer, consumer) names within a layer, on chip
    formats: OpFormats | None = None  # per tensor kind (mapping.formats) and math fidelity
    spatial: SpatialSplit | None = None  # split policy over a grid device's cores (mapping.spatial)
    residency: Residency | None = None  # memory level of each category (mapping.memory_levels)
    rows_per_sample: int = 1  # token rows per sample: a fused chain streams its intermediate row block by block


def fused_edges(chains: list[list[str]]) -> frozenset[tuple[str, str]]:
    """``mapping.fusion`` chains as the producer → consumer edges they keep on chip."""
    return frozenset((a, b) for chain in chains for a, b in zip(chain, chain[1:], strict=False))


def local_name(op: Op) -> str:
    """An op's name within its layer ("block3.mlp_up" → "mlp_up"), what ``mapping.fusion`` names."""
    return op.name.split(".", 1)[-1]


def collective_between(a: Op, b: Op, tp: int) -> bool:
    """Megatron puts a tensor-parallel collective after a row-split op (forward) and before a
    column-split op's backward: the tensor leaves the chip there, so that edge cannot be fused."""
    if tp <= 1:
        return False
    return (_weighted(a) and a.split is TensorSplit.row) or (_weighted(b) and b.split is TensorSplit.column)


def _fusion_flags(ops: list[Op], fused: frozenset[tuple[str, str]]) -> list[tuple[bool, bool]]:
    """(input fused, output fused) per op of one layer, in order."""
    if not fused:
        return [(False, False)] * len(ops)
    names = [local_name(op) for op in ops]
    flags = []
    for i, n in enumerate(names):
        fin = i > 0 and (names[i - 1], n) in fused
        fout = i + 1 < len(names) and (n, names[i + 1]) in fused
        flags.append((fin, fout))
    return flags


def _on_chip(op: Op, fused: tuple[bool, bool], c: PassContext) -> tuple[bool, bool]:
    """A fused chain streams its intermediate through SRAM one block of token rows at a time (as fused
    kernels and FlashAttention do), so it stays on chip when one row of it, double-buffered, fits half the
    device's SRAM; on an SRAM-only tile that is checked, on a device whose SRAM is not modelled (a GPU's
    HBM-only preset) it is taken for granted, as it always was."""
    dev = c.dev
    if dev.local_dram is not None or dev.sram_bytes <= 0:
        return fused
    k = shard(op, c.tp, c.sequence_parallel)
    budget = dev.sram_bytes / 2

    def fits(elems: float) -> bool:
        return 2.0 * elems / k / max(c.rows_per_sample, 1) * c.elem_bytes <= budget

    return fused[0] and fits(op.in_elems), fused[1] and fits(op.out_elems)


class _Builder:
    def __init__(self, ctx: PassContext, kind: PassKind):
        self.ctx = ctx
        self.out = ChunkPass(kind)
        self._open: Segment | None = None

    def add_op(self, op: Op, backward: bool, fused: tuple[bool, bool] = (False, False)) -> None:
        c = self.ctx
        if fused != (False, False):
            fused = _on_chip(op, fused, c)
        t = op_time(
            op, c.dev, c.micro_batch, c.tp, c.sequence_parallel, backward, c.elem_bytes, *fused, c.formats, c.spatial,
            c.residency,
        )
        seg = self._open
        if seg is None:
            seg = self._open = Segment(
                label=op.name.split(".")[0], layer=op.layer, busy_s=0, compute_s=0, flops=0, dram_bytes=0
            )
        seg.add(t, self.out.dataflows)

    def comm(self, kind: str, elems: float, layer: int, label: str) -> None:
        c = self.ctx
        if c.tp <= 1 or elems <= 0:
            return
        seg = self._open or Segment(label=label, layer=layer, busy_s=0, compute_s=0, flops=0, dram_bytes=0)
        seg.comm = (kind, elems * c.micro_batch * c.elem_bytes)
        self.out.segments.append(seg)
        self._open = None

    def finish(self) -> ChunkPass:
        if self._open is not None:
            self.out.segments.append(self._open)
            self._open = None
        return self.out


def _reduce(sp: bool) -> str:
    return "reduce-scatter" if sp else "all-reduce"


def _weighted(op: Op) -> bool:
    """Only weighted linear ops carry tensor-parallel collectives (not the elementwise ops between them)."""
    return op.params > 0 and op.kind in (OpKind.matmul, OpKind.fc, OpKind.conv, OpKind.embedding)


def _column(op: Op) -> bool:
    return op.split is TensorSplit.column and _weighted(op)


def forward_pass(
    layers: list[list[Op]], ctx: PassContext, kind: PassKind = "F", only_selective: bool = False
) -> ChunkPass:
    b = _Builder(ctx, kind)
    sp = ctx.sequence_parallel
    prev_column = False
    for ops in layers:
        flags = _fusion_flags(ops, ctx.fused)
        for op, fused in zip(ops, flags, strict=True):
            if only_selective:
                if op.selective:
                    b.add_op(op, backward=False)
                continue
            column = _column(op)
            if sp and column and not prev_column:  # gate and up read one gathered input: one all-gather
                b.comm("all-gather", op.in_elems, op.layer, op.name)
            b.add_op(op, backward=False, fused=fused)
            if _weighted(op) and (
                op.split is TensorSplit.row or (op.split is TensorSplit.vocab and op.kind is OpKind.embedding)
            ):
                b.comm(_reduce(sp), op.out_elems, op.layer, op.name)
            prev_column = column
    return b.finish()


def backward_pass(layers: list[list[Op]], ctx: PassContext) -> ChunkPass:
    """Input gradients of consecutive column-parallel ops (SwiGLU's gate and up) add up locally and
    are reduced once, as Megatron's fused linear does."""
    b = _Builder(ctx, "B")
    sp = ctx.sequence_parallel
    pending: Op | None = None
    for ops in reversed(layers):
        flags = _fusion_flags(ops, ctx.fused)
        for op, fused in zip(reversed(ops), reversed(flags), strict=True):
            if pending is not None and not _column(op):
                b.comm(_reduce(sp), pending.in_elems, pending.layer, pending.name)
                pending = None
            if sp and op.split is TensorSplit.row and _weighted(op):
                b.comm("all-gather", op.out_elems, op.layer, op.name)
            b.add_op(op, backward=True, fused=fused)
            if _column(op):
                pending = op
    if pending is not None:
        b.comm(_reduce(sp), pending.in_elems, pending.layer, pending.name)
    return b.finish()
