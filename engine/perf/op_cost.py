"""Time of one operator pass on one device: FLOPs over peak × efficiency, bytes over bandwidth, roofline.

Per-op traffic follows the usual accounting: a forward pass reads its weights and input and writes its
output; a backward pass reads weights, saved input and output gradient, and writes the input and weight
gradients. On SRAM-only devices the tiling model turns matmul traffic into DRAM bytes that the caller
moves as network flows (so ports and NoC links are contended, not assumed).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.ir.ops import Op, OpKind, TensorSplit
from tilewright.engine.perf.device import DeviceModel
from tilewright.engine.perf.tiling import matmul_traffic

MATRIX_KINDS = {OpKind.matmul, OpKind.attention, OpKind.conv, OpKind.fc}
TP_SPLITS = {TensorSplit.column, TensorSplit.row, TensorSplit.heads, TensorSplit.vocab}


@dataclass(frozen=True, slots=True)
class OpTime:
    flops: float  # per device
    compute_s: float  # arithmetic time at the achieved efficiency
    memory_s: float  # local memory (HBM or SRAM) time
    dram_bytes: float  # bytes to move to/from a remote DRAM port (SRAM-only devices)
    dataflow: str = ""  # what the SRAM tiling model chose for a matmul on an SRAM-only device

    @property
    def busy_s(self) -> float:
        return max(self.compute_s, self.memory_s)


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
    elem_bytes: int,
    fused_in: bool = False,
    fused_out: bool = False,
) -> OpTime:
    """``fused_in``/``fused_out``: the op's input comes from / its output goes to a fused neighbour on
    chip (``mapping.fusion``), so that tensor — and in the backward its gradient — skips local DRAM."""
    k = shard(op, tp, sequence_parallel)
    flops = (op.backward_flops if backward else op.flops) * micro_batch / k
    w_elems = op.params / (tp if op.split in TP_SPLITS else 1)
    in_elems, out_elems = op.in_elems * micro_batch / k, op.out_elems * micro_batch / k
    act_elems = in_elems + out_elems
    if backward:  # reads weights, saved input and output gradient; writes input and weight gradients
        traffic_elems = 2 * w_elems + act_elems + in_elems
    else:
        traffic_elems = w_elems + act_elems
    if dev.local_dram is not None:  # fusion keeps the intermediate (and its gradient) in SRAM
        traffic_elems -= (in_elems if fused_in else 0.0) + (out_elems if fused_out else 0.0)
    if op.kind in MATRIX_KINDS:
        # Tile and wave quantization pad the work: the GEMM runs like one of flops / shape_eff FLOPs, and
        # the size curve (fixed launch and fill costs against throughput) applies to that padded work —
        # so a fixed per-kernel cost is paid once, not once per wasted tile row.
        padded = flops
        if op.gemm is not None:
            m_rows, n_cols, k_depth = _sharded_gemm(op, micro_batch, tp)
            padded = flops / dev.compute.shape_efficiency(m_rows, n_cols, k_depth)
        compute_s = padded / (dev.peak_flops * dev.matmul_efficiency(padded)) if flops else 0.0
    else:
        compute_s = flops / dev.vector_flops if flops else 0.0
    if dev.local_dram is not None or dev.remote_dram is None:
        return OpTime(flops, compute_s, traffic_elems * elem_bytes / dev.dram_bandwidth, 0.0)
    # SRAM-only device: on-chip traffic at SRAM bandwidth, what does not fit goes to remote DRAM
    sram_elems = dev.sram_bytes / elem_bytes
    dataflow = ""
    if op.gemm is not None and op.kind in MATRIX_KINDS:
        tiling = matmul_traffic(*_sharded_gemm(op, micro_batch, tp), sram_elems)
        dram_elems = tiling.dram_elems * (2.0 if backward else 1.0)
        dataflow = tiling.dataflow
    else:
        dram_elems = 0.0 if traffic_elems <= sram_elems / 2 else traffic_elems
    memory_s = traffic_elems * elem_bytes / dev.sram_bandwidth
    return OpTime(flops, compute_s, memory_s, dram_elems * elem_bytes, dataflow)
