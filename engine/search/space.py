"""The parallelism search space: which values of each knob are legal for a model, system and batch.

The rules are the ones ``engine.plan.checks`` enforces on a project (Megatron-LM's constraints: tp divides
heads and the FFN width, sequence parallelism needs tp | seq_len, interleaving needs pp·v | layers and
pp | micro-batches), so every candidate the search emits is a project the engine accepts. dp must
divide the global batch; fewer devices than offered may be used (5,128 = 8·641 has almost no useful
factorisation, so insisting on all of them would leave nothing to search).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

from tilewright.engine.ir.mapping import PlacementStrategy, Recompute
from tilewright.engine.ir.workload import TransformerDims, WorkloadSpec
from tilewright.engine.plan.checks import tp_fits_kv_heads


@cache
def divisors(n: int) -> tuple[int, ...]:
    """Ascending; cached, since the walk asks for the same few numbers tens of thousands of times."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


@dataclass
class Space:
    """Options per knob; ``search`` walks them in nested loops, cheapest-to-reject first."""

    devices: int
    global_batch: int
    blocks: int
    tps: list[int]
    recomputes: list[Recompute]
    placements: list[PlacementStrategy] = field(default_factory=lambda: [PlacementStrategy.row_major])
    rank_orders: list[str] = field(default_factory=lambda: ["tp-dp-pp", "tp-pp-dp"])
    zeros: list[int] = field(default_factory=lambda: [0, 1])
    seq_len: int | None = None
    max_interleave: int = 8
    # selective recomputation of the attention core re-runs and stores nothing a fused attention kernel does not
    # already (``perf.recompute.changes_nothing``): walked only for the module lists it seeds, never ranked
    selective_idle: bool = False
    _counts: dict[tuple[int, int], int] | None = field(default=None, init=False, repr=False, compare=False)

    def pps(self, tp: int) -> list[int]:
        return [p for p in range(1, min(self.blocks, self.devices // tp) + 1)]

    def dps(self, tp: int, pp: int) -> list[int]:
        return [d for d in divisors(self.global_batch) if tp * pp * d <= self.devices]

    def micro_batches(self, dp: int) -> tuple[int, ...]:
        return divisors(self.global_batch // dp)

    def interleaves(self, pp: int, m: int) -> list[int]:
        """v = 1, and v ≥ 2 where interleaved 1F1B is legal (pp > 1, pp·v | layers, pp | m)."""
        out = [1]
        if pp > 1 and m % pp == 0:
            out += [v for v in range(2, self.max_interleave + 1) if self.blocks % (pp * v) == 0]
        return out

    def sequence_parallel(self, tp: int) -> list[bool]:
        if tp == 1 or self.seq_len is None or self.seq_len % tp:
            return [False]
        return [False, True]

    def size(self) -> int:
        """Candidates before any pruning (for the report); counts the loops without evaluating them."""
        counts = self.counts()
        return sum(
            len(self.sequence_parallel(tp)) * len(self.recomputes) * counts[(tp, pp)]
            for tp in self.tps
            for pp in self.pps(tp)
        )

    def counts(self) -> dict[tuple[int, int], int]:
        """Candidates per (tp, pp) for one sequence-parallel and recompute setting: the walk's weights,
        so its progress fraction follows the space rather than the loop counters."""
        if self._counts is None:
            out: dict[tuple[int, int], int] = {}
            for tp in self.tps:
                for pp in self.pps(tp):
                    n = 0
                    for dp in self.dps(tp, pp):
                        layouts = len(self.placements) * (len(self.rank_orders) if pp > 1 and dp > 1 else 1)
                        zeros = len(self.zeros) if dp > 1 else 1
                        for mb in self.micro_batches(dp):
                            m = self.global_batch // (dp * mb)
                            n += layouts * zeros * len(self.interleaves(pp, m))
                    out[(tp, pp)] = n
            self._counts = out
        return self._counts


def tensor_options(spec: WorkloadSpec, devices: int) -> list[int]:
    """tp values the model allows (``plan.checks``): divisors of heads, FFN width and the experts' width that
    fit the key/value heads; 1 for CNNs, whose layers are not tensor-split (HyPar's per-layer choice covers
    them)."""
    if not isinstance(spec, TransformerDims):
        return [1]
    out = []
    for tp in divisors(spec.heads):
        if tp > devices or spec.ffn_dim % tp or (spec.moe is not None and spec.moe.expert_ffn % tp):
            continue
        if not tp_fits_kv_heads(tp, spec.kv_heads_n):
            continue
        out.append(tp)
    return out


def recompute_options(spec: WorkloadSpec) -> list[Recompute]:
    """Recomputation saves memory only on tensor-split layers (``engine.perf.memory``): transformers.
    Elsewhere it would cost a forward pass and save nothing."""
    if isinstance(spec, TransformerDims):
        return [Recompute.none, Recompute.selective, Recompute.full]
    return [Recompute.none]
