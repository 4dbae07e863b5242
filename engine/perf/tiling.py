"""SRAM tiling model: pick a dataflow for a matmul from SRAM capacity and derive the DRAM traffic.

For C[M×N] = A[M×K] · B[K×N] with S elements of usable SRAM (half of it, the rest double-buffers):
- weight-stationary keeps K×n columns of B, streams A once per column block:  B + A·⌈N/n⌉ + C
- output-stationary keeps an m×n block of C (square), streams A and B:         A·⌈N/n⌉ + B·⌈M/m⌉ + C
- input-stationary ("streaming") keeps m×K rows of A, streams B per row block: A + B·⌈M/m⌉ + C
If everything fits, each operand moves once. This is the classic blocked-matmul traffic argument
(Hong & Kung 1981; the dataflow taxonomy of Chen et al., Eyeriss, ISCA 2016), not a fitted constant.

An operand already on chip (``resident``: weights held in SRAM, or a fused neighbour's output) is the
stationary one: it never comes from DRAM, and the other operands stream past it exactly once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Tiling:
    dataflow: str
    dram_elems: float


def matmul_traffic(m: float, n: float, k: float, sram_elems: float, resident: frozenset[str] = frozenset()) -> Tiling:
    """Minimum DRAM traffic (elements) over the three dataflows for an M×K by K×N product; ``resident``
    names the operands ("a", "b", "c") already held on chip."""
    a, b, c = m * k, k * n, m * n
    if resident:
        moved = {"a": a, "b": b, "c": c}
        held = " + ".join(name for x, name in (("a", "input"), ("b", "weights"), ("c", "output")) if x in resident)
        return Tiling(f"{held} on chip", sum(v for x, v in moved.items() if x not in resident))
    usable = max(sram_elems / 2.0, 1.0)
    if a + b + c <= usable:
        return Tiling("resident", a + b + c)
    options: list[Tiling] = []
    cols = usable / max(k, 1.0)
    if cols >= 1:
        options.append(Tiling("weight-stationary", b + a * math.ceil(n / min(cols, n)) + c))
    side = max(1.0, math.sqrt(usable / 3.0))
    options.append(Tiling("output-stationary", a * math.ceil(n / min(side, n)) + b * math.ceil(m / min(side, m)) + c))
    rows = usable / max(k, 1.0)
    if rows >= 1:
        options.append(Tiling("streaming", a + b * math.ceil(m / min(rows, m)) + c))
    return min(options, key=lambda t: t.dram_elems)
