"""Time of one operator pass on one device: FLOPs over peak × efficiency, bytes over bandwidth, roofline.

Per-op traffic follows the usual accounting: a forward pass reads its weights and input and writes its
output; a backward pass reads weights, saved input and output gradient, and writes the input and weight
gradients. On SRAM-only devices the tiling model turns matmul traffic into DRAM bytes that the caller
moves as network flows (so ports and NoC links are contended, not assumed). A device with a grid of cores
(``Compute.grid``) spreads each op over its cores itself (``spatial``): the chosen split is reported.
Bytes per element follow each tensor's format (``mapping.formats``: weights, activations, KV cache).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fnmatch import fnmatchcase

from tilewright.engine.ir.common import DEFAULT_FIDELITY
from tilewright.engine.ir.hardware import Compute
from tilewright.engine.ir.mapping import SpatialSplit
from tilewright.engine.ir.ops import MoERole, Op, OpKind, TensorSplit
from tilewright.engine.perf.device import DeviceModel
from tilewright.engine.perf.formats import OpFormats
from tilewright.engine.perf.residency import OpBytes, Residency, op_memory
from tilewright.engine.perf.spatial import device_chip
from tilewright.engine.perf.spatial_op import GridOpCost, OnChip, OpTensors, gemm_op, stream_op

MATRIX_KINDS = {OpKind.matmul, OpKind.attention, OpKind.conv, OpKind.fc}
TP_SPLITS = {TensorSplit.column, TensorSplit.row, TensorSplit.heads, TensorSplit.vocab}


@dataclass(frozen=True, slots=True)
class OpTime:
    flops: float  # per device
    compute_s: float  # arithmetic time at the achieved efficiency
    memory_s: float  # local memory (HBM or SRAM) time
    dram_bytes: float  # bytes to move to/from a remote DRAM port (SRAM-only devices)
    dataflow: str = ""  # what the SRAM tiling model chose for a matmul on an SRAM-only device
    local_bytes: float = 0.0  # bytes moved to/from the device's own memory (its DRAM, else its SRAM)
    overhead_s: float = 0.0  # not overlapped: fixed per-op cost, a grid's pipeline fill/drain and tails
    split: str = ""  # how a grid device spread the op over its cores ("qkv: 2-D 8×8, …")

    @property
    def busy_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.overhead_s


def _sharded_gemm(op: Op, micro_batch: int, tp: int) -> tuple[float, float, float]:
    """(M, N, K) of one tensor-parallel rank's matmul: tokens × output columns × reduction."""
    assert op.gemm is not None
    m, n, k = op.gemm
    m = m * micro_batch
    if op.split in (TensorSplit.column, TensorSplit.heads, TensorSplit.vocab):
        n = n / tp
    elif op.split is TensorSplit.row:
        k = k / tp
    return m, n, k


def shard(op: Op, tp: int, sequence_parallel: bool) -> int:
    if op.split in TP_SPLITS:
        return tp
    if op.split is TensorSplit.replicated and sequence_parallel:
        return tp
    return 1


def op_time(
    op: Op,
    dev: DeviceModel,
    micro_batch: int,
    tp: int,
    sequence_parallel: bool,
    backward: bool,
    elem_bytes: float,
    fused_in: bool = False,
    fused_out: bool = False,
    formats: OpFormats | None = None,
    spatial: SpatialSplit | None = None,
    residency: Residency | None = None,
) -> OpTime:
    """``fused_in``/``fused_out``: the op's input comes from / its output goes to a fused neighbour on
    chip (``mapping.fusion``), so that tensor — and in the backward its gradient — skips DRAM (local, or
    remote ports on SRAM-only tiles). ``formats``: each tensor kind's format (None: every tensor
    ``elem_bytes`` per element); ``spatial``: the split policy on a grid device (None: chosen by cost);
    ``residency``: which memory level holds each category (None: the device's own memory,
    ``perf.residency``)."""
    if formats is not None:
        formats = formats.for_op(op.name)  # mapping.formats.weights_by_op / fidelity_by_op
    k = shard(op, tp, sequence_parallel)
    flops = (op.backward_flops if backward else op.flops) * micro_batch / k
    w_elems = op.params / (tp if op.split in TP_SPLITS else 1)
    in_elems, out_elems = op.in_elems * micro_batch / k, op.out_elems * micro_batch / k
    act_elems = in_elems + out_elems
    if backward:  # reads weights, saved input and output gradient; writes input and weight gradients
        traffic_elems = 2 * w_elems + act_elems + in_elems
    else:
        traffic_elems = w_elems + act_elems
    if dev.compute.grid is not None:
        fmt = formats or OpFormats(dev.dtype, dev.dtype, dev.dtype, DEFAULT_FIDELITY[dev.dtype])
        cache = op.cache_elems * micro_batch / k
        on = OnChip(fused_in, fused_out, *(residency is not None and residency.at(c) == "sram"
                                           for c in ("weights", "activations", "kv_cache")))
        cost = _grid_cost(op, dev, micro_batch, tp, flops, backward, fmt, spatial or SpatialSplit(),
                          OpTensors(w_elems, in_elems, out_elems, cache), on)
        split = f"{op.name.split('.', 1)[-1]}: {cost.split}" if cost.split else ""
        overhead = max(0.0, cost.overhead_s + runtime_programs_extra(op, dev.compute))
        return OpTime(flops, cost.compute_s, cost.movement_s, 0.0, local_bytes=cost.dram_bytes,
                      overhead_s=overhead, split=split)
    all_elems = traffic_elems  # every byte passes through SRAM, fused or not
    if dev.local_dram is not None:  # fusion keeps the intermediate (and its gradient) in SRAM
        traffic_elems -= (in_elems if fused_in else 0.0) + (out_elems if fused_out else 0.0)
    fixed_s = dev.compute.fixed_op_s
    if formats is not None and not formats.uniform:
        cache = op.cache_elems * micro_batch / k
        bytes_per_elem = _mixed_bytes(traffic_elems, w_elems, cache, backward, formats) / max(traffic_elems, 1e-30)
    else:
        bytes_per_elem = elem_bytes
    if op.kind in MATRIX_KINDS:
        # Tile and wave quantization pad the work: the GEMM runs like one of flops / shape_eff FLOPs, and
        # the size curve (fixed launch and fill costs against throughput) applies to that padded work —
        # so a fixed per-kernel cost is paid once, not once per wasted tile row.
        padded = flops
        if op.gemm is not None:
            m_rows, n_cols, k_depth = _sharded_gemm(op, micro_batch, tp)
            padded = flops / dev.compute.shape_efficiency(m_rows, n_cols, k_depth)
        peak = dev.matmul_peak(formats, op.params > 0)  # fp8 GEMMs on the fp8 units (``formats.gemm_dtype``)
        fill_s = dev.matmul_fill_s(padded, peak) if flops else 0.0  # never hidden under memory streaming
        compute_s = padded / (peak * dev.matmul_efficiency(padded)) - fill_s if flops else 0.0
        fixed_s += fill_s
    else:
        compute_s = flops / dev.vector_flops if flops else 0.0
    if residency is None and dev.local_dram is not None:
        local = traffic_elems * bytes_per_elem
        memory_s = max(local / dev.dram_bandwidth, all_elems * bytes_per_elem / dev.sram_bandwidth)
        return OpTime(flops, compute_s, memory_s, 0.0, local_bytes=local, overhead_s=fixed_s)
    # residency, and SRAM-only devices (remote DRAM ports or none): SRAM bandwidth is always a bound,
    # what does not stay on chip goes to remote DRAM (the SRAM tiling model) or over the host link
    tensors = OpBytes.of(w_elems, in_elems, out_elems, op.cache_elems * micro_batch / k, backward,
                         (fused_in, fused_out), formats if formats is not None and not formats.uniform else None,
                         elem_bytes)
    gemm = _sharded_gemm(op, micro_batch, tp) if op.gemm is not None and op.kind in MATRIX_KINDS else None
    cost, dataflow = op_memory(dev, tensors, residency, gemm, bytes_per_elem, backward, (fused_in, fused_out))
    return OpTime(flops, compute_s, cost.memory_s, cost.dram_bytes, dataflow, cost.local_bytes, overhead_s=fixed_s)


def runtime_programs(op: Op, compute: Compute) -> int:
    """Device programs the runtime runs for ``op`` (``Compute.programs_by_op``, first glob matching the op's
    name within its layer; 1 when none does)."""
    name = op.name.split(".", 1)[-1]
    return next((n for pattern, n in compute.programs_by_op.items() if fnmatchcase(name, pattern)), 1)


def runtime_programs_extra(op: Op, compute: Compute) -> float:
    """Fixed cost of an op's programs beyond the one its grid cost already charges (negative for an op the
    runtime does inside another program: its one fixed cost is taken back)."""
    return (runtime_programs(op, compute) - 1) * compute.fixed_op_s


def _mixed_bytes(traffic_elems: float, w_elems: float, cache: float, backward: bool, f: OpFormats) -> float:
    """Bytes of an op's traffic when tensor kinds differ in format: weights read in theirs, the weight
    gradient written in the activations' (the compute format), KV-cache reads in the cache's, the rest
    in the activations'."""
    weight_reads = w_elems * f.weight_bytes
    weight_grads = w_elems if backward else 0.0
    other = traffic_elems - w_elems - weight_grads - cache
    return weight_reads + (other + weight_grads) * f.activation_bytes + cache * f.kv_bytes


def _grid_cost(
    op: Op,
    dev: DeviceModel,
    micro_batch: int,
    tp: int,
    flops: float,
    backward: bool,
    fmt: OpFormats,
    spatial: SpatialSplit,
    tensors: OpTensors,
    on: OnChip,
) -> GridOpCost:
    """A grid device: the GEMM split or 1-D stream of the op (``perf.spatial_op``). Residency in host
    memory is not modelled here: such tensors are read from the device's DRAM."""
    chip = device_chip(dev)
    if op.gemm is not None and op.kind in MATRIX_KINDS:
        m, n, k = _sharded_gemm(op, micro_batch, tp)
        experts = _experts_reached(op)
        if experts == 1.0:
            return gemm_op(chip, (m, n, k), backward, fmt, spatial, on)
        # routed experts: one GEMM per expert the tokens reach, each with its share of the token-slots and
        # its own weights (the stacked ``gemm`` has one expert's n × k)
        one = gemm_op(chip, (m / experts, n, k), backward, fmt, spatial, on)
        return dataclasses.replace(one, seconds=one.seconds * experts, compute_s=one.compute_s * experts,
                                   movement_s=one.movement_s * experts, dram_bytes=one.dram_bytes * experts,
                                   split=f"{experts:.3g} experts × ({one.split})")
    return stream_op(chip, op, flops, tensors, backward, fmt, on)


def _experts_reached(op: Op) -> float:
    """Experts whose weights a routed-expert GEMM reads: ``params`` (every expert the pass's tokens reach)
    over one expert's n × k; 1 for any other op."""
    if op.moe is None or op.moe.role is not MoERole.expert or op.gemm is None:
        return 1.0
    _m, n, k = op.gemm
    return max(1.0, op.params / (n * k)) if n * k else 1.0
