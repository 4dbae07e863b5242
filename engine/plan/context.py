"""Context parallelism (ring attention; Liu et al. 2023, Megatron-LM's ``--context-parallel-size``).

Each sequence is split over ``cp`` ranks: every rank runs every layer on s/cp of the tokens, so all
token-proportional work and memory — GEMM rows, activations, attention's queries — divide by cp, while
weights are whole on every rank (their gradients are reduced over dp × cp). Attention needs every key: the
ranks pass their K and V blocks around a ring, cp − 1 steps, each overlapped with the attention of the
block already at hand. Per tensor rank that is an all-gather of the layer's K and V (forward) and, in the
backward, K and V again plus the reduce-scatter of their gradients. Only what the attention's own compute
cannot hide is exposed (charged as the collective carrying that fraction of its bytes, as
``plan.sharding`` does).

Placement: cp ranks sit next to the tensor ranks (Megatron's order tp, cp, dp, pp), so a ring stays
inside a node while tp × cp fits one. The plan sees dp × cp replicas of each stage's tensor group: replica
``d·cp + c`` is context rank c of data-parallel replica d.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tilewright.engine.ir.ops import Op
from tilewright.engine.plan.sharding import CP_PREFIX


@dataclass(frozen=True)
class ContextComm:
    """The ring exchange of one stage's attention layers."""

    cp: int
    seconds: Callable[[str, float], float]  # uncontended time of a ``cp:`` collective of that many bytes

    def exchange(
        self, op: Op, micro_batch: int, tp: int, elem_bytes: float, backward: bool, attention_s: float
    ) -> list[tuple[str, float]]:
        """The exposed part of one attention op's K/V ring, per tensor rank: (cp: kind, bytes of the whole
        gathered K and V of a micro-batch) — K and V are the op's input beyond its queries."""
        kv = max(op.in_elems - op.out_elems, 0.0) * micro_batch * elem_bytes / tp
        items = [(CP_PREFIX + "all-gather", kv)]
        if backward:
            items.append((CP_PREFIX + "reduce-scatter", kv))
        total = sum(self.seconds(k, b) for k, b in items)
        if kv <= 0 or total <= attention_s:
            return []
        frac = (total - attention_s) / total
        return [(k, b * frac) for k, b in items]
