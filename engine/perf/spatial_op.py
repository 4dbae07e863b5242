"""One operator pass on a grid device: which GEMMs or streams it is, in which formats, and their cost.

A forward matmul is one GEMM, C = A·B (A the activations, B the weights). Its backward is two: the input
gradient dA = dC·Bᵀ and the weight gradient dB = Aᵀ·dC, each split over the grid on its own. Every other op
streams its tensors through the cores (``spatial.stream_on_grid``); attention's batched products run on the
matrix units at the activations' format. A fused (flash) attention pass that carries its head structure
(``Op.attention``) is split like tt-metal's kernels instead (``spatial_attention``): a prefill as heads × query
chunks over the cores, each chunk re-reading its K/V; a decode step as FlashDecode, sequences × K/V heads
with the keys split over the cores. A decode-step norm (rows within one tile row) adds the cross-core chain of
tt-metal's sharded norm to its stream (``spatial_norm``). Tensors a fused neighbour hands over on chip
(``mapping.fusion``) stay in L1 instead of going through DRAM, as do categories held in SRAM
(``mapping.memory_levels``). With ``mapping.spatial.weights`` prefetched, a decode matmul runs as tt-metal's ring
matmul on the prefetcher's receiver cores, its weight already in their L1 (``_prefetched_gemm``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilewright.engine.ir.mapping import SpatialSplit, WeightPlacement
from tilewright.engine.ir.ops import AttentionShape, Op, OpKind
from tilewright.engine.perf.formats import OpFormats
from tilewright.engine.perf.spatial import GridChip, gemm_on_grid, stream_on_grid
from tilewright.engine.perf.spatial_attention import decode_on_grid, prefill_on_grid
from tilewright.engine.perf.spatial_norm import norm_on_grid


@dataclass(frozen=True, slots=True)
class GridOpCost:
    seconds: float
    compute_s: float  # in-loop arithmetic
    movement_s: float  # in-loop data delivery (DRAM, NoC, L1), overlapped with the arithmetic
    dram_bytes: float  # read + written in the device's own DRAM
    split: str  # what the choice was, for notes and views

    @property
    def overhead_s(self) -> float:
        """What does not overlap: fixed cost, pipeline fill and drain, write-back tail, K-split reduction."""
        return max(0.0, self.seconds - max(self.compute_s, self.movement_s))


@dataclass(frozen=True, slots=True)
class OpTensors:
    """Elements one device moves for one op pass (already divided by the tensor-parallel shard)."""

    weights: float
    inputs: float
    outputs: float
    cache: float = 0.0  # part of ``inputs`` read from the KV cache


@dataclass(frozen=True, slots=True)
class OnChip:
    """Tensors that stay in the cores' L1 instead of DRAM: what a fused neighbour hands over
    (``mapping.fusion``) and whole categories held in SRAM (``mapping.memory_levels``)."""

    fused_in: bool = False
    fused_out: bool = False
    weights: bool = False
    activations: bool = False
    kv_cache: bool = False

    @property
    def op_input(self) -> bool:
        return self.fused_in or self.activations

    @property
    def op_output(self) -> bool:
        return self.fused_out or self.activations


def gemm_op(
    chip: GridChip,
    mnk: tuple[float, float, float],
    backward: bool,
    fmt: OpFormats,
    spatial: SpatialSplit,
    on: OnChip = OnChip(),
) -> GridOpCost:
    """A matmul of ``mnk`` = (tokens, output columns, reduction) on one device."""
    m, n, k = mnk
    a, w, fid = str(fmt.activations), str(fmt.weights), str(fmt.fidelity)
    policy, grid = spatial.policy.value, spatial.grid
    if not backward and prefetched(chip, spatial, m, on):
        return _prefetched_gemm(chip, mnk, fmt, spatial)
    if not backward:
        sharded = spatial.weights in (WeightPlacement.sharded, WeightPlacement.prefetched) and not on.weights
        c = gemm_on_grid(
            chip, m, k, n, a, w, a, fid, policy, grid, (not on.op_input, not on.weights, not on.op_output), sharded
        )
        split = c.split.describe() + (", B DRAM-sharded" if sharded and c.split.kind == "1d_in0" else "")
        return GridOpCost(c.seconds, c.compute_s, c.movement_s, c.dram_read_bytes + c.dram_write_bytes, split)
    # input gradient dA = dC · Bᵀ, weight gradient dB = Aᵀ · dC (A the saved input)
    dgrad = gemm_on_grid(chip, m, n, k, a, w, a, fid, policy, grid, (not on.op_output, not on.weights, not on.op_input))
    wgrad = gemm_on_grid(
        chip, k, m, n, a, a, a, fid, policy, grid, (not on.activations, not on.op_output, not on.weights)
    )
    parts = (dgrad, wgrad)
    return GridOpCost(
        seconds=sum(p.seconds for p in parts),
        compute_s=sum(p.compute_s for p in parts),
        movement_s=sum(p.movement_s for p in parts),
        dram_bytes=sum(p.dram_read_bytes + p.dram_write_bytes for p in parts),
        split=f"input grad {dgrad.split.describe()}; weight grad {wgrad.split.describe()}",
    )


# tt-metal's decode prefetcher (models/demos/llama3_70b_galaxy/tt/prefetcher_common.py: ``num_reader_cores = 12``,
# ``num_global_cb_receivers = 2``): one reader core per DRAM bank on a sub-device of its own streams the weight
# slices of the coming matmuls into a global circular buffer on 2 receiver cores each — the 24-core ring the
# decode matmuls run on (``matmul_1d_ring_config``, RING_SIZE 24 on a Wormhole).
PREFETCH_RECEIVERS_PER_BANK = 2


def prefetched(chip: GridChip, spatial: SpatialSplit, m: float, on: OnChip = OnChip()) -> bool:
    """Whether a forward matmul of ``m`` rows reads its weights from the prefetcher's ring buffers: weights
    ``prefetched`` in DRAM (not held in SRAM), a chip that states its banks, and decode rows (one tile row,
    as the runtime prefetches in decode mode only; a prefill reads them as ``sharded``)."""
    return (spatial.weights is WeightPlacement.prefetched and not on.weights and chip.dram_banks > 0
            and math.ceil(m / chip.tile) == 1)


def prefetch_ring(chip: GridChip) -> tuple[int, int]:
    """The rows × cols of cores the prefetched matmuls run on: the receivers of the bank readers
    (``PREFETCH_RECEIVERS_PER_BANK`` per bank), in as few rows of the grid as hold them and no wider than
    they need (the ring's 24 cores of a Wormhole's 8 × 8 grid: 3 × 8; a Blackhole's 16 of 10 × 11: 2 × 8,
    not two whole rows of 22 cores the ring does not have)."""
    ring = chip.dram_banks * PREFETCH_RECEIVERS_PER_BANK
    rows = min(chip.rows, max(1, math.ceil(ring / chip.cols)))
    return rows, min(chip.cols, math.ceil(ring / rows))


def _prefetched_gemm(
    chip: GridChip, mnk: tuple[float, float, float], fmt: OpFormats, spatial: SpatialSplit
) -> GridOpCost:
    """A decode matmul fed by the prefetcher: a 1-D split over the ring (each core its slice of the output
    columns over all of K, the activations passed around the ring) with B already in the cores' L1. The ring
    program takes A width-sharded in the ring cores' L1 and leaves C there (``matmul_1d_ring_config``; the
    collectives around it read and write those L1 shards), so neither touches DRAM. The
    weight's DRAM read is the prefetcher's, which runs on its own cores behind every op of the step: it is
    not in this op's time but in its bytes, and a layer is never faster than its weights' stream
    (``inference_phases.with_prefetch_floor``)."""
    m, n, k = mnk
    a, w, fid = str(fmt.activations), str(fmt.weights), str(fmt.fidelity)
    rows, cols = prefetch_ring(chip)
    if spatial.grid is not None:
        rows, cols = min(rows, spatial.grid[0]), min(cols, spatial.grid[1])
    c = gemm_on_grid(
        chip, m, k, n, a, w, a, fid, "1d", (rows, cols), (False, False, False), a_ring=True
    )
    weight = math.ceil(k / chip.tile) * math.ceil(n / chip.tile) * chip.tile_bytes(w)
    split = c.split.describe().replace("A mcast to all", "A around the ring") + ", B prefetched to L1"
    return GridOpCost(c.seconds, c.compute_s, c.movement_s, c.dram_read_bytes + c.dram_write_bytes + weight, split)


def stream_op(
    chip: GridChip,
    op: Op,
    flops: float,
    t: OpTensors,
    backward: bool,
    fmt: OpFormats,
    on: OnChip = OnChip(),
) -> GridOpCost:
    """A non-GEMM op: its reads and writes by tensor kind, each in its own format; what stays on chip
    costs L1 bandwidth only."""
    wb, ab, kb = fmt.weight_bytes, fmt.activation_bytes, fmt.kv_bytes
    shape = op.attention if op.kind is OpKind.attention else None
    if shape is not None and not backward and op.flops > 0:
        return _fused_attention(chip, op, shape, flops, fmt, on)
    if backward:  # read weights, saved input and output gradient; write input and weight gradients
        reads = ((t.weights * wb, on.weights), (t.inputs * ab, on.activations), (t.outputs * ab, on.op_output))
        writes = ((t.inputs * ab, on.op_input), (t.weights * ab, on.weights))
    else:
        reads = ((t.weights * wb, on.weights), ((t.inputs - t.cache) * ab, on.op_input), (t.cache * kb, on.kv_cache))
        writes = ((t.outputs * ab, on.op_output),)
    dram_read = sum(b for b, stays in reads if not stays)
    dram_write = sum(b for b, stays in writes if not stays)
    l1_only = sum(b for b, stays in (*reads, *writes) if stays)
    elements = max(t.outputs, t.inputs)
    norm = None
    if op.kind is OpKind.norm and not backward:  # a decode-step norm: the cores agree on the row's statistics
        norm = norm_on_grid(chip, t.weights, dram_read, dram_write, elements, l1_only, ab, op.in_elems)
    matrix = (str(fmt.activations), str(fmt.fidelity)) if op.kind is OpKind.attention else None
    s = norm or stream_on_grid(chip, flops, dram_read, dram_write, elements, matrix, l1_only)
    return GridOpCost(s.seconds, s.compute_s, s.movement_s, dram_read + dram_write, "")  # 1-D: nothing to report


def _fused_attention(
    chip: GridChip, op: Op, shape: AttentionShape, flops: float, fmt: OpFormats, on: OnChip
) -> GridOpCost:
    """A flash-attention pass (``spatial_attention``): prefill, or a decode step for one query. This
    device's share of the sequences × heads is the op's per-sample heads scaled by this pass's FLOPs over one
    sample's (micro-batch over the tensor-parallel head split); the attention is causal (or windowed) when
    its pairs are fewer than queries × keys."""
    head_batches = shape.heads * flops / op.flops
    pairs = op.flops / (4.0 * shape.heads * shape.head_dim)  # per head and sample
    cached = (shape.keys - shape.queries) / shape.keys  # share of the keys read from the KV cache
    kv_bytes = cached * fmt.kv_bytes + (1.0 - cached) * fmt.activation_bytes
    matrix = (str(fmt.activations), str(fmt.fidelity))
    elem = (fmt.activation_bytes, kv_bytes)
    in_dram = (not on.op_input, not on.op_output)
    if shape.queries == 1:
        s, dram = decode_on_grid(chip, shape, head_batches, min(float(shape.keys), pairs), matrix, elem, in_dram)
        return GridOpCost(s.seconds, s.compute_s, s.movement_s, dram, f"flash decode over {s.cores} cores")
    causal = pairs < shape.queries * shape.keys * (1.0 - 1e-9)
    s, dram = prefill_on_grid(chip, shape, head_batches, causal, matrix, elem, in_dram)
    return GridOpCost(s.seconds, s.compute_s, s.movement_s, dram, f"flash attention over {s.cores} cores")
