"""Which producer → consumer edges of a layer stay on chip: ``mapping.fusion`` chains as edges, each op's
(input fused, output fused) flags, and whether a fused intermediate fits the device's SRAM. Apart from the passes
so that the plan's settings, the memory model's checks and the passes read one definition of a fused edge."""

from __future__ import annotations

from tilewright.engine.ir.ops import Op
from tilewright.engine.perf.op_cost import shard
from tilewright.engine.plan.pass_records import PassContext


def fused_edges(chains: list[list[str]]) -> frozenset[tuple[str, str]]:
    """``mapping.fusion`` chains as the producer → consumer edges they keep on chip."""
    return frozenset((a, b) for chain in chains for a, b in zip(chain, chain[1:], strict=False))


def local_name(op: Op) -> str:
    """An op's name within its layer ("block3.mlp_up" → "mlp_up"), what ``mapping.fusion`` names."""
    return op.name.split(".", 1)[-1]


def fusion_flags(ops: list[Op], fused: frozenset[tuple[str, str]]) -> list[tuple[bool, bool]]:
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


def on_chip(op: Op, fused: tuple[bool, bool], c: PassContext) -> tuple[bool, bool]:
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
