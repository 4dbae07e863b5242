"""Tensor-parallel communication overlapped with the GEMM beside it (``mapping.overlap_tp_comm``).

Transformer Engine's userbuffers (Megatron-Core ``--tp-comm-overlap``, with sequence parallelism) pair each
tensor-parallel collective of a layer with the GEMM it feeds or follows, in the three ways NVIDIA's H100
recipes configure (Megatron-Bridge ``training/comm_overlap.py``, ``userbuffers_*_h100_*``):

- an all-gather before a GEMM (the forward's before QKV and fc1, the backward's of the output gradient
  before proj's and fc2's data gradient) is a *ring exchange*: copy engines pass the tp chunks around while
  the GEMM multiplies the ones already there, taking no SMs; the first chunk shows, and whatever the GEMM
  cannot cover: ``max(0, T − G) + T / tp`` of a collective of T seconds beside a GEMM of G seconds;
- the forward's reduce-scatter after a row-parallel GEMM (proj, fc2) is *pipelined* by default
  (``mapping.tp_overlap_reduce_scatter`` 'pipeline'): the GEMM runs in ``PIPELINE_SPLITS`` chunks, each
  chunk's reduce-scatter on ``PIPELINE_SMS`` SMs taken from the GEMM (set aside: the GEMM slows by units /
  (units − PIPELINE_SMS)) while the next chunk computes; the last chunk's shows: ``max(0, T − G′) + T /
  PIPELINE_SPLITS`` beside the slowed GEMM G′. That is what the bf16 configurations set
  (``PipelineOverlapCfg`` for proj_fprop and fc2_fprop). The fp8 ones (``userbuffers_fp8_h100_h8192_tp4_mbs1_
  seqlen8192``, ``userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192``) set ``RingExchangeOverlapCfg(num_sm=1,
  set_sm_margin=True)`` instead ('ring_exchange'): the GEMM runs in tp chunks, each chunk's partial sum passed
  to the next rank by the copy engines and reduced there, with ``RING_SMS`` SM set aside; as the all-gather's
  ring, one chunk and whatever the GEMM cannot cover show: ``max(0, T − G′) + T / tp``;
- the backward's reduce-scatter of a column GEMM's input gradient is a *bulk* overlap on a few SMs with the
  GEMM beside it: ``max(0, T − G)`` shows.

A reduction hides behind the weighted GEMM just before it in its segment, an all-gather behind the first
weighted GEMM of the segment after it. The exposed part is charged as the same collective carrying that
fraction of its bytes, as an overlapped expert all-to-all is (``pass_comms.PassComms._a2a``).

**Split GEMMs.** To overlap, userbuffers runs the GEMM beside a ring exchange or a pipeline as several GEMMs,
one per chunk of its token rows (Transformer Engine ``CommOverlapP2PBase::split_overlap_ag`` /
``split_overlap_rs``: one cuBLAS call per tp chunk, ``CommOverlapBase::split_overlap_rs``: one per split),
each of M / chunks rows, with its own tile and wave quantization (``Compute.shape_efficiency``) and its own
weight read. ``gemm_chunks`` says which of a transformer layer's tensor-parallel GEMMs that is: forward, the
column-parallel GEMMs after the all-gather (qkv, fc1) in tp chunks and the row-parallel ones before the
reduce-scatter (proj, fc2) in tp chunks (ring exchange) or ``PIPELINE_SPLITS`` (pipeline); backward, the
row-parallel GEMMs' data gradient after the output gradient's all-gather in tp chunks (proj_dgrad, fc2_dgrad
ring exchanges) — half the op's backward FLOPs, its weight gradient runs whole on the gathered gradient; the
column-parallel GEMMs' backward overlaps in bulk, unsplit. The plan charges each such op the time its
chunks take over the whole GEMM's (``pass_builder.PassBuilder._split_gemm``), never less than the whole: the library
could run the whole GEMM as those chunks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tilewright.engine.perf.comm_sm import stretched

# The forward reduce-scatter's pipelined overlap in NVIDIA's H100 bf16 recipes: 4 splits, 16 SMs (fc2) to 24
# (proj) set aside for the communication (Megatron-Bridge training/comm_overlap.py,
# userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192).
PIPELINE_SPLITS = 4
PIPELINE_SMS = 16
# Its ring-exchange form in the fp8 recipes: RingExchangeOverlapCfg(num_sm=1, set_sm_margin=True), one SM set aside
# (same file, userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192 and userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192).
RING_SMS = 1


def gemm_chunks(column: bool, backward: bool, tp: int, ring_reduce_scatter: bool) -> tuple[int, float]:
    """(row chunks, share of the op's pass time they cover) of a transformer layer's tensor-parallel GEMM under
    userbuffers (module docstring, "Split GEMMs"): ``column`` a column-parallel op (qkv, fc1), else row-parallel
    (proj, fc2); (1, 0.0) for a GEMM that runs whole."""
    if not backward:
        if column or ring_reduce_scatter:
            return tp, 1.0
        return PIPELINE_SPLITS, 1.0
    return (1, 0.0) if column else (tp, 0.5)  # dgrad: half of dgrad + wgrad, equal FLOPs


@dataclass
class TpOverlap:
    """The overlap of one pass's tensor-parallel collectives. ``seconds``: a collective's uncontended time on
    the stage's tensor group, (kind, bytes) → s; ``units``: the GPU's SMs (``Compute.gemm_units``, None:
    no SMs set aside); ``backward``: a backward pass (its reductions overlap in bulk); ``ring_reduce_scatter``:
    the forward's reduce-scatters by ring exchange instead of pipelined (``mapping.tp_overlap_reduce_scatter``)."""

    seconds: Callable[[str, float], float]
    tp: int
    units: int | None = None
    backward: bool = False
    ring_reduce_scatter: bool = False
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
        sms, chunks = (RING_SMS, self.tp) if self.ring_reduce_scatter else (PIPELINE_SMS, PIPELINE_SPLITS)
        slowed = stretched(gemm, self.units, sms)  # the SMs set aside (``perf.comm_sm``)
        return (kind, nbytes * self._shown(total, slowed, chunks) / total), slowed - gemm
