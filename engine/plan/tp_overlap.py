"""Tensor-parallel communication overlapped with the GEMM beside it (``mapping.overlap_tp_comm``).

Transformer Engine's userbuffers (Megatron-Core ``--tp-comm-overlap``, with sequence parallelism) pair each
tensor-parallel collective of a layer with the GEMM it feeds or follows, in the three ways NVIDIA's H100
recipes configure (Megatron-Bridge ``training/comm_overlap.py``, ``userbuffers_*_h100_*``):

- an all-gather before a GEMM (the forward's before QKV and fc1, the backward's of the output gradient
  before proj's and fc2's data gradient) is a *ring exchange*: copy engines pass the tp chunks around while
  the GEMM multiplies the ones already there, taking no SMs; the first chunk shows, and whatever the GEMM
  cannot cover: ``max(0, T − G) + T / tp`` of a collective of T seconds beside a GEMM of G seconds;
- the forward's reduce-scatter after a row-parallel GEMM (proj, fc2) is *pipelined*: the GEMM runs in
  ``PIPELINE_SPLITS`` chunks, each chunk's reduce-scatter on ``PIPELINE_SMS`` SMs taken from the GEMM (set
  aside: the GEMM slows by units / (units − PIPELINE_SMS)) while the next chunk computes; the last chunk's
  shows: ``max(0, T − G′) + T / PIPELINE_SPLITS`` beside the slowed GEMM G′;
- the backward's reduce-scatter of a column GEMM's input gradient is a *bulk* overlap on a few SMs with the
  GEMM beside it: ``max(0, T − G)`` shows.

A reduction hides behind the weighted GEMM just before it in its segment, an all-gather behind the first
weighted GEMM of the segment after it. The exposed part is charged as the same collective carrying that
fraction of its bytes, as an overlapped expert all-to-all is (``passes._Builder._a2a``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# The forward reduce-scatter's pipelined overlap in NVIDIA's H100 recipes: 4 splits, 16 SMs (fc2) to 24 (proj)
# set aside for the communication (userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192 and its bf16 twin).
PIPELINE_SPLITS = 4
PIPELINE_SMS = 16


@dataclass
class TpOverlap:
    """The overlap of one pass's tensor-parallel collectives. ``seconds``: a collective's uncontended time on
    the stage's tensor group, (kind, bytes) → s; ``units``: the GPU's SMs (``Compute.gemm_units``, None:
    no SMs set aside); ``backward``: a backward pass (its reductions overlap in bulk)."""

    seconds: Callable[[str, float], float]
    tp: int
    units: int | None = None
    backward: bool = False
    last_gemm_s: float = 0.0  # the open segment's last weighted GEMM
    waiting: list[tuple[object, str, float]] = field(default_factory=list)  # all-gathers: (segment, kind, bytes)

    def _shown(self, total: float, gemm_s: float, chunks: float) -> float:
        return min(total, max(0.0, total - gemm_s) + (total / chunks if chunks else 0.0))

    def gemm(self, seconds: float) -> None:
        """A weighted GEMM joined the open segment: the all-gathers before it hide behind it (ring exchange)."""
        for segment, kind, nbytes in self.waiting:
            total = self.seconds(kind, nbytes)
            if total > 0 and nbytes > 0:
                segment.comm = (kind, nbytes * self._shown(total, seconds, self.tp) / total)  # type: ignore[attr-defined]
        self.waiting.clear()
        self.last_gemm_s = seconds

    def collective(self, segment: object, kind: str, nbytes: float) -> tuple[tuple[str, float], float]:
        """The (kind, bytes) a segment closed by this collective carries, and the seconds its GEMM slows by
        sharing SMs; an all-gather waits for the GEMM after it."""
        gemm, self.last_gemm_s = self.last_gemm_s, 0.0
        if kind == "all-gather":
            self.waiting.append((segment, kind, nbytes))
            return (kind, nbytes), 0.0
        total = self.seconds(kind, nbytes)
        if total <= 0 or nbytes <= 0:
            return (kind, nbytes), 0.0
        if self.backward:  # bulk
            return (kind, nbytes * self._shown(total, gemm, 0) / total), 0.0
        slowed = gemm * self.units / (self.units - PIPELINE_SMS) if self.units and self.units > PIPELINE_SMS else gemm
        return (kind, nbytes * self._shown(total, slowed, PIPELINE_SPLITS) / total), slowed - gemm
