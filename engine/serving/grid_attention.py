"""A serving batch's attention on a grid of cores, priced as ``tilewright run`` prices it.

On a GPU the batch's attention is one varlen / paged kernel per layer whose cost follows its summed FLOPs
and bytes, so ``cost_model`` merges every sequence into one op. A grid device instead splits a fused
attention by its head structure (``perf.spatial_attention``: a prefill as heads × query chunks over the
cores, each chunk re-reading its keys; a decode step as FlashDecode over sequences × K/V heads), which a
merged op has lost. So here the batch is priced in groups that keep a shape:

- the decode steps as one pass of n sequences at their mean context (one query each; the cache bytes
  are the sum of the contexts, as the merged op has them);
- every prefill chunk or speculative verify step as its own pass (its queries over its context).

Each group is priced by ``plan.passes.forward_pass`` on the stage's context; the zero-size op's cost
(fixed per-program costs) is counted once, as the caller subtracts it once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

from tilewright.engine.ir.ops import Op
from tilewright.engine.plan.memo import weak_cache
from tilewright.engine.plan.passes import PassContext, forward_pass


class _Work(Protocol):
    tokens: int
    context: int


def shaped(ops: Sequence[Op], ctx: PassContext) -> bool:
    """The device splits attention by its head structure (a grid device, ops that carry it)."""
    return ctx.dev.compute.grid is not None and any(op.attention is not None for op in ops)


class GridAttention:
    """``(device seconds, DRAM bytes)`` of one layer's attention for a batch, on one stage class.
    ``ops_for(tokens, context)``: one sequence's attention ops of one layer; ``seconds_of``: a segment's
    device seconds (without the host wait)."""

    def __init__(
        self,
        ctx: PassContext,
        ops_for: Callable[[int, int], Sequence[Op]],
        seconds_of: Callable[[object], float],
        zero: tuple[float, float],
    ) -> None:
        self.ctx, self.ops_for, self.seconds_of, self.zero = ctx, ops_for, seconds_of, zero
        self._price = weak_cache(GridAttention._group, self, maxsize=16384)

    def _group(self, tokens: int, context: int, sequences: int) -> tuple[float, float]:
        ctx = dataclasses.replace(self.ctx, micro_batch=sequences)
        ps = forward_pass([list(self.ops_for(tokens, context))], ctx)
        return sum(self.seconds_of(s) for s in ps.segments), sum(s.dram_bytes for s in ps.segments)

    def parts(self, work: Sequence[_Work]) -> tuple[float, float]:
        seconds, nbytes = self.zero
        decodes = [w.context for w in work if w.tokens == 1]
        groups = [(w.tokens, w.context, 1) for w in work if w.tokens > 1]
        if decodes:
            groups.append((1, max(round(sum(decodes) / len(decodes)), 1), len(decodes)))
        for g in groups:
            s, b = self._price(*g)
            seconds += s - self.zero[0]
            nbytes += b - self.zero[1]
        return seconds, nbytes
