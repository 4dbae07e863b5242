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
import math
from dataclasses import dataclass
from fnmatch import fnmatchcase

from tilewright.engine.ir.common import DEFAULT_FIDELITY, DType
from tilewright.engine.ir.hardware import Compute
from tilewright.engine.ir.mapping import Fp8Scaling, SpatialSplit, WeightPlacement
from tilewright.engine.ir.ops import AttentionBmm, MoERole, Op, OpKind, TensorSplit
from tilewright.engine.perf.device import DeviceModel, issues_kernels
from tilewright.engine.perf.dropout import dropout_rate, dropout_traffic
from tilewright.engine.perf.formats import OpFormats, gemm_dtype
from tilewright.engine.perf.residency import OpBytes, Residency, op_memory
from tilewright.engine.perf.score_kernels import score_bmm_rate, triangular_softmax_traffic
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


def _sharded_gemm(
    op: Op, micro_batch: int, tp: int, axes: tuple[int, int] | None = None
) -> tuple[float, float, float]:
    """(M, N, K) of one tensor-parallel rank's matmul: tokens × output columns × reduction. With 2-D tensor
    parallelism (``axes`` = rows × cols of ``Mapping.tp_axes``) a weighted matmul's weight is cut along both
    of its dimensions, as ``ShardTensor2dMesh`` lays it on a Galaxy (tt-metal tech_reports/LLMs/llms.md §2.5):
    a column-parallel op's N over the cols and its K over the rows (its partial sums reduced along a column,
    ``tensor_axes.axis_comm``), a row-parallel op's K over the cols and N over the rows — the same weight
    elements per device as a 1-D cut, but a K (and the activations every core receives) ``rows`` or ``cols``
    times shorter."""
    assert op.gemm is not None
    m, n, k = op.gemm
    m = m * micro_batch
    if axes is not None and op.params > 0 and op.split in (TensorSplit.column, TensorSplit.row):
        rows, cols = axes
        if op.split is TensorSplit.column:
            return m, n / cols, k / rows
        return m, n / rows, k / cols
    if op.split in (TensorSplit.column, TensorSplit.heads, TensorSplit.vocab):
        n = n / tp
    elif op.split is TensorSplit.row:
        k = k / tp
    return m, n, k


# GEMM kernels (forward, backward) of a matrix op on a device that runs kernel by kernel (a GPU): the
# backward of a weighted GEMM is a data-gradient and a weight-gradient GEMM; Megatron-LM's unfused attention
# is QKᵀ (``baddbmm``) and PV (``bmm``) forward, and the four GEMMs of their gradients backward.
GEMM_KERNELS: dict[OpKind, tuple[int, int]] = {
    OpKind.matmul: (1, 2),
    OpKind.fc: (1, 2),
    OpKind.conv: (1, 2),
    OpKind.attention: (2, 4),
}


def gemm_kernels(
    kind: OpKind, backward: bool, shape: tuple[float, float, float] | None
) -> tuple[tuple[float, tuple[float, float, float] | None], ...]:
    """(share of the op's FLOPs, (M, N, K) or None) of each GEMM kernel a GPU launches for a matrix op.
    Every kernel pays its own launch and fill (the efficiency curve's fixed part) and its own tile and wave
    quantization, at its own output shape: for an M×N×K forward (tokens × outputs × inputs) the data
    gradient is M×K reducing over N, the weight gradient K×N reducing over M (same FLOPs each). Without a
    shape (an attention op without ``Op.bmm``, as an imported graph's) the kernels share the FLOPs evenly;
    with one, ``attention_kernels``. Grids and wafers run an op as one program (``device.issues_kernels``):
    the caller keeps one GEMM there."""
    fwd, bwd = GEMM_KERNELS.get(kind, (1, 1))
    n = bwd if backward else fwd
    if shape is not None and backward and n == 2:
        m, nn, k = shape
        return ((0.5, (m, k, nn)), (0.5, (k, nn, m)))
    return tuple((1.0 / n, shape) for _ in range(n))


def attention_kernels(bmm: AttentionBmm, backward: bool) -> tuple[tuple[float, tuple[float, float, float]], ...]:
    """(share of the op's FLOPs, (M, N, K) of one product) of each batched GEMM kernel of an unfused attention
    (``Op.bmm``), as Megatron-LM's ``CoreAttention`` and autograd run them, with s_q queries, s_k keys and
    head widths d_qk, d_v. Forward: S = Q·Kᵀ (``baddbmm`` of Q [s_q × d_qk] and Kᵀ [d_qk × s_k]: s_q × s_k
    reducing over d_qk) and O = P·V (s_q × d_v reducing over s_k). Backward, the gradients of each GEMM's two
    operands: dV = Pᵀ·dO (s_k × d_v over s_q), dP = dO·Vᵀ (s_q × s_k over d_v), dQ = dS·K (s_q × d_qk over
    s_k) and dKᵀ = Qᵀ·dS (d_qk × s_k over s_q: the gradient of ``baddbmm``'s second operand, Kᵀ). Each
    kernel's share is its own FLOPs (M·N·K) over the pass's: QKᵀ and its gradients scale with d_qk, PV and
    its gradients with d_v."""
    q, keys, dq, dv = bmm.queries, bmm.keys, bmm.qk_dim, bmm.v_dim
    if backward:
        dims = ((keys, dv, q), (q, keys, dv), (q, dq, keys), (dq, keys, q))
    else:
        dims = ((q, keys, dq), (q, dv, keys))
    total = sum(m * n * k for m, n, k in dims)
    return tuple((m * n * k / total, (float(m), float(n), float(k))) for m, n, k in dims)


def _fused_attention(op: Op, fused_out: bool) -> bool:
    """An attention op run as one (flash) kernel: fused with its softmax (``mapping.fusion``), over a KV cache
    (decode), or carrying the head structure the inference graph gives a flash kernel (``Op.attention``).
    (A fused latent-attention prefill carries none and is costed as the two batched GEMMs.)"""
    return fused_out or bool(op.cache_elems) or op.attention is not None


def _masked_attention(op: Op) -> bool:
    """Whether a fused attention kernel runs ``op`` under a causal mask, which costs it its own, lower rate
    per computed tile (``Compute.flash_efficiency``). A training graph's causal attention carries
    ``fused_flops`` — a sliding window (gpt-oss) is such a mask too: the kernel skips the key blocks outside the
    band and masks its edge tiles element by element, as a causal kernel does its diagonal. An inference pass
    carries its head structure (``Op.attention``) and counts only the pairs it computes: fewer than queries ×
    keys when its new queries see only the keys before them (a prefill; ``spatial_op`` tells grid devices
    the same way). A decode step's single query sees every cached key: no mask."""
    if op.kind is not OpKind.attention:
        return False
    if op.fused_flops is not None:
        return True
    shape = op.attention
    if shape is None or shape.queries == 1:
        return False
    return op.flops / (4.0 * shape.heads * shape.head_dim) < shape.queries * shape.keys * (1.0 - 1e-9)


# Backward FLOPs of a fused attention kernel over its forward's: FlashAttention's backward keeps no scores, so
# it recomputes QKᵀ on chip and runs the four gradient GEMMs, 5 matmuls against the forward's 2 (Dao,
# "FlashAttention-2", arXiv 2307.08691, §3.1.2 and §4.1, whose benchmarks count the backward as 2.5× the
# forward FLOPs: flash-attention benchmarks/benchmark_flash_attention.py).
FLASH_BACKWARD = 2.5


def pass_flops(op: Op, backward: bool, fused_out: bool = False) -> float:
    """FLOPs per sample of one pass of ``op``. An attention op run as one fused kernel (``_fused_attention``)
    computes only the pairs a causal mask leaves (``Op.fused_flops``, when the model is causal) and its
    backward recomputes them: ``FLASH_BACKWARD`` × its forward, so no separate re-run of the attention core
    is needed (``plan.passes``). Other ops: ``flops``, ``backward_flops``."""
    if op.kind is not OpKind.attention or not _fused_attention(op, fused_out):
        return op.backward_flops if backward else op.flops
    forward = op.fused_flops if op.fused_flops is not None else op.flops
    return FLASH_BACKWARD * forward if backward else forward


def flash_ops(ops: list[Op], fused: frozenset[tuple[str, str]]) -> frozenset[str]:
    """Names of the ops of one layer that run inside a fused attention kernel: an attention op fused with the
    op after it (``mapping.fusion`` attention → softmax) and the attention-core ops (``selective``: softmax,
    attention dropout) chained on after it. The kernel keeps their s² tensors on chip, stores none of them
    for the backward (``perf.memory``) and recomputes them inside its backward (``pass_flops``), so
    selective recomputation has nothing of theirs to re-run (``plan.passes``). ``fused``: (producer,
    consumer) edges by name within the layer."""
    out: set[str] = set()
    inside = False
    for op, nxt in zip(ops, [*ops[1:], None], strict=True):
        name = op.name.split(".", 1)[-1]
        after = nxt is not None and (name, nxt.name.split(".", 1)[-1]) in fused
        if op.kind is OpKind.attention and not op.cache_elems:
            inside = after
        elif not op.selective:
            inside = False
        if inside:
            out.add(op.name)
        inside = inside and after
    return frozenset(out)


def _bias_grad_elems(op: Op, micro_batch: int, tp: int) -> float:
    """Output-gradient elements one rank's bias-gradient kernel reads in a weighted op's backward: tokens ×
    output columns of its shard when the op has a bias (parameters beyond its weight matrix), else 0.
    Megatron-LM reduces ``grad_output.sum(0)`` (or, for a bias fused into the next elementwise op, autograd
    sums the broadcast bias's gradient): a kernel of its own that streams the whole output gradient."""
    if op.gemm is None or op.moe is not None or op.kind not in (OpKind.matmul, OpKind.fc, OpKind.conv):
        return 0.0
    _m, n, k = op.gemm
    if op.params <= n * k:
        return 0.0
    m_rows, n_cols, _k = _sharded_gemm(op, micro_batch, tp)
    return m_rows * n_cols


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
    gemm_only: bool = False,
    tp_axes: tuple[int, int] | None = None,
    expert_kernels: bool = False,
) -> OpTime:
    """``fused_in``/``fused_out``: the op's input comes from / its output goes to a fused neighbour on
    chip (``mapping.fusion``), so that tensor — and in the backward its gradient — skips DRAM (local, or
    remote ports on SRAM-only tiles). ``formats``: each tensor kind's format (None: every tensor
    ``elem_bytes`` per element); ``spatial``: the split policy on a grid device (None: chosen by cost);
    ``residency``: which memory level holds each category (None: the device's own memory,
    ``perf.residency``); ``gemm_only``: a matrix op's GEMM kernels alone, without the kernels around them (a
    bias gradient's reduction, fp8 quantization), as when a library splits only the GEMM call into chunks
    (``plan.tp_overlap``'s split GEMMs); ``tp_axes``: 2-D tensor parallelism's rows × cols (``_sharded_gemm``),
    given for forward passes only (``plan.tensor_axes``); ``expert_kernels``: a routed-expert op runs one GEMM
    kernel per local expert, each paying its own fill, and quantizes its fp8 operands expert by expert
    (Transformer Engine's ``GroupedLinear`` as Megatron-Core training calls it, ``_gemm_parts``,
    ``fp8_expert_launches``)."""
    if formats is not None:
        formats = formats.for_op(op.name)  # mapping.formats.weights_by_op / fidelity_by_op
    k = shard(op, tp, sequence_parallel)
    flash = op.kind is OpKind.attention and _fused_attention(op, fused_out)
    flops = pass_flops(op, backward, fused_out) * micro_batch / k
    if op.kind is OpKind.attention:
        # the fused edge attention → softmax is the scores', which a flash kernel never writes (no score
        # traffic is added for it, ``plan.passes``); its own output, the context, still goes to memory for
        # out_proj (and its gradient comes back from there)
        fused_out = False
    w_elems = op.params / (tp if op.split in TP_SPLITS else 1)
    in_elems, out_elems = op.in_elems * micro_batch / k, op.out_elems * micro_batch / k
    if fused_in and (op.kind is OpKind.softmax or (op.kind is OpKind.dropout and op.selective)):
        # inside a fused attention kernel the scores come from QKᵀ and the probabilities (dropped out in the
        # kernel, ``flash_ops``) feed PV on chip, and the backward recomputes them there (``FLASH_BACKWARD``):
        # no side of the softmax or of its dropout, forward or backward, touches memory
        in_elems = out_elems = 0.0
    act_elems = in_elems + out_elems
    mask_bytes = 0.0
    # Megatron's fused causal softmax reads only the lower triangle of the scores (``perf.score_kernels``; the plan
    # clears ``causal_keys`` where the framework does not run that kernel)
    triangle = bool(op.kind is OpKind.softmax and op.causal_keys and not w_elems and issues_kernels(dev.compute))
    if op.kind is OpKind.dropout and (in_elems or out_elems) and issues_kernels(dev.compute):
        # PyTorch's dropout kernels on a GPU (``perf.dropout``): the mask written forward, read backward instead
        # of the input
        traffic_elems, mask_bytes = dropout_traffic(op, in_elems, out_elems, micro_batch / k)
    elif triangle:
        traffic_elems = triangular_softmax_traffic(in_elems, out_elems, backward)
    elif backward:  # reads weights, saved input and output gradient; writes input and weight gradients
        traffic_elems = 2 * w_elems + act_elems + in_elems
    else:
        traffic_elems = w_elems + act_elems
    if dev.compute.grid is not None:
        fmt = formats or OpFormats(dev.dtype, dev.dtype, dev.dtype, DEFAULT_FIDELITY[dev.dtype])
        cache = op.cache_elems * micro_batch / k
        on = OnChip(fused_in, fused_out, *(residency is not None and residency.at(c) == "sram"
                                           for c in ("weights", "activations", "kv_cache")))
        cost = _grid_cost(op, dev, micro_batch, tp, flops, backward, fmt, spatial or SpatialSplit(),
                          OpTensors(w_elems, in_elems, out_elems, cache), on, tp_axes)
        split = f"{op.name.split('.', 1)[-1]}: {cost.split}" if cost.split else ""
        overhead = max(0.0, cost.overhead_s + runtime_programs_extra(op, dev.compute))
        return OpTime(flops, cost.compute_s, cost.movement_s, 0.0, local_bytes=cost.dram_bytes,
                      overhead_s=overhead, split=split)
    all_elems = traffic_elems  # every byte passes through SRAM, fused or not
    if dev.local_dram is not None and triangle:  # fusion keeps on chip the share the triangle counted
        traffic_elems = triangular_softmax_traffic(in_elems, out_elems, backward, (fused_in, fused_out))
    elif dev.local_dram is not None:  # fusion keeps the intermediate (and its gradient) in SRAM
        traffic_elems -= (in_elems if fused_in else 0.0) + (out_elems if fused_out else 0.0)
    fixed_s = dev.compute.fixed_op_s
    if formats is not None and not formats.uniform:
        cache = op.cache_elems * micro_batch / k
        bytes_per_elem = _mixed_bytes(traffic_elems, w_elems, cache, backward, formats) / max(traffic_elems, 1e-30)
    else:
        bytes_per_elem = elem_bytes
    if mask_bytes:  # the mask is 1 byte per element whatever the activations' format
        traffic_elems += mask_bytes / bytes_per_elem
        all_elems += mask_bytes / bytes_per_elem
    score_bmm = False  # an unfused attention's batched GEMMs, at their own rate (``perf.score_kernels``)
    if op.kind in MATRIX_KINDS:
        # Tile and wave quantization pad the work: each GEMM kernel runs like one of flops / shape_eff FLOPs,
        # and the size curve (fixed launch and fill costs against throughput) applies to that padded work —
        # so a fixed per-kernel cost is paid once per kernel, not once per wasted tile row.
        peak = dev.matmul_peak(formats, op.params > 0)  # fp8 GEMMs on the fp8 units (``formats.gemm_dtype``)
        shape = _sharded_gemm(op, micro_batch, tp, tp_axes) if op.gemm is not None else None
        split = issues_kernels(dev.compute) and not flash
        # an unfused attention's kernels are batched: one product per sample and local head (``attention_kernels``)
        bmm = op.bmm if split and op.kind is OpKind.attention else None
        batch = micro_batch * bmm.heads / k if bmm is not None else 1.0
        # measured where the s × s score tensor is the operand (training, prefill); a decode step's batched GEMVs
        # over the KV cache (``cache_elems``) are another kernel: not this rate
        score_bmm = bmm is not None and not op.cache_elems
        kernels = (attention_kernels(bmm, backward) if bmm is not None
                   else gemm_kernels(op.kind, backward, shape) if split else ((1.0, shape),))
        compute_s = 0.0
        for share, dims in kernels:
            if not flops:
                break
            eff = _kernel_efficiency(op, dev.compute, dims, shape, batch) if dims is not None else 1.0
            padded = flops * share / eff
            # the fill is never hidden under streaming; a fused attention kernel runs at its own measured rate
            throughput_s, fill_s = (dev.flash_parts(padded, peak, backward, _masked_attention(op)) if flash
                                    else _gemm_parts(op, dev, padded, peak, expert_kernels))
            compute_s += throughput_s
            fixed_s += fill_s
        # the bias gradient is its own reduction kernel after the GEMMs: one more pass over the output gradient
        bias_bytes = _bias_grad_elems(op, micro_batch, tp) * (formats.activation_bytes if formats else elem_bytes)
        if split and backward and bias_bytes and dev.local_dram is not None and not gemm_only:
            fixed_s += dev.stream_s(bias_bytes)  # a memory-bound kernel: its ramp too (``stream_ramp_s``)
            traffic_elems += bias_bytes / bytes_per_elem
        cast = (fp8_cast_passes(op, formats, backward, in_elems, out_elems) if split and dev.local_dram
                and not gemm_only else None)
        if cast is not None:  # Transformer Engine's quantization kernels around an fp8 GEMM (memory-bound)
            # each streaming kernel pays its ramp on its share of the bytes; a GroupedLinear's per expert
            launches, streams = fp8_expert_launches(op, formats, cast[1], fp8_streaming_kernels(formats, cast[1]),
                                                    expert_kernels)
            fixed_s += launches * dev.compute.fixed_op_s + (streams * dev.stream_s(cast[0] / streams) if streams
                                                            else cast[0] / dev.dram_bandwidth)
            traffic_elems += cast[0] / bytes_per_elem
    else:
        compute_s = flops / dev.vector_flops if flops else 0.0
        if traffic_elems > 0 and dev.stream_ramp_s:
            # a memory-bound kernel's ramp beyond its bytes and the per-kernel floor (``DeviceModel.stream_s``):
            # a GEMM's start and drain are the efficiency curve's fixed part instead, never both
            local = traffic_elems * bytes_per_elem
            fixed_s += dev.stream_s(local) - local / dev.dram_bandwidth
    if residency is None and dev.local_dram is not None:
        local = traffic_elems * bytes_per_elem
        rate = dev.dram_bandwidth * (dropout_rate(dev.compute) if mask_bytes and not backward else 1.0) * (
            score_bmm_rate(dev.compute) if score_bmm else 1.0)
        memory_s = max(local / rate, all_elems * bytes_per_elem / dev.sram_bandwidth)
        return OpTime(flops, compute_s, memory_s, 0.0, local_bytes=local, overhead_s=fixed_s)
    # residency, and SRAM-only devices (remote DRAM ports or none): SRAM bandwidth is always a bound,
    # what does not stay on chip goes to remote DRAM (the SRAM tiling model) or over the host link
    mixed = formats if formats is not None and not formats.uniform else None
    tensors = OpBytes.of(w_elems, in_elems, out_elems, op.cache_elems * micro_batch / k, backward,
                         (fused_in, fused_out), mixed, elem_bytes)
    if mask_bytes:  # dropout's activations: its input and output (or their gradients) and its mask
        act_bytes = mixed.activation_bytes if mixed is not None else elem_bytes
        tensors = dataclasses.replace(tensors, activations=(in_elems + out_elems) * act_bytes + mask_bytes)
    elif triangle:  # the causal softmax's triangle, and the share of it a fused neighbour keeps on chip
        act_bytes = mixed.activation_bytes if mixed is not None else elem_bytes
        gross = triangular_softmax_traffic(in_elems, out_elems, backward)
        net = triangular_softmax_traffic(in_elems, out_elems, backward, (fused_in, fused_out))
        tensors = dataclasses.replace(tensors, activations=gross * act_bytes, fused=(gross - net) * act_bytes)
    gemm = _sharded_gemm(op, micro_batch, tp, tp_axes) if op.gemm is not None and op.kind in MATRIX_KINDS else None
    cost, dataflow = op_memory(dev, tensors, residency, gemm, bytes_per_elem, backward, (fused_in, fused_out))
    memory_s = cost.memory_s
    if mask_bytes and not backward and dev.local_dram is not None:  # its local bytes at the dropout's rate
        memory_s = max(memory_s, cost.local_bytes / (dev.dram_bandwidth * dropout_rate(dev.compute)))
    if score_bmm and dev.local_dram is not None:  # and the batched GEMMs' at theirs
        memory_s = max(memory_s, cost.local_bytes / (dev.dram_bandwidth * score_bmm_rate(dev.compute)))
    return OpTime(flops, compute_s, memory_s, cost.dram_bytes, dataflow, cost.local_bytes, overhead_s=fixed_s)


def runtime_programs(op: Op, compute: Compute) -> int:
    """Device programs the runtime runs for ``op`` (``Compute.programs_by_op``, first glob matching the op's
    name within its layer; 1 when none does)."""
    name = op.name.split(".", 1)[-1]
    return next((n for pattern, n in compute.programs_by_op.items() if fnmatchcase(name, pattern)), 1)


def extra_program_s(op: Op, compute: Compute) -> float:
    """Device time of each program the runtime runs for ``op`` beyond its first (``Compute.program_s_by_op``,
    first glob matching the op's name within its layer; ``fixed_op_s`` when none does). The op model costs
    the first program's kernel; the others (a head reshape, a rotary, a cache update, a reshard) have no
    kernel model of their own, so they cost what such programs are measured to take, launch to launch."""
    name = op.name.split(".", 1)[-1]
    return next((s for pattern, s in compute.program_s_by_op.items() if fnmatchcase(name, pattern)),
                compute.fixed_op_s)


def runtime_programs_extra(op: Op, compute: Compute) -> float:
    """Device time of an op's programs beyond the one its grid cost already charges (``extra_program_s`` each;
    negative for an op the runtime does inside another program: its one fixed cost is taken back)."""
    programs = runtime_programs(op, compute)
    if programs < 1:
        return -compute.fixed_op_s
    return (programs - 1) * extra_program_s(op, compute)


def programs_fixed_s(op: Op, compute: Compute) -> float:
    """The fixed part of an op's programs on a grid device: ``fixed_op_s`` for its first (the op model's
    kernel pays it) and ``extra_program_s`` for each further one; 0 for an op run inside another program."""
    return max(0.0, compute.fixed_op_s + runtime_programs_extra(op, compute))


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
    tp_axes: tuple[int, int] | None = None,
) -> GridOpCost:
    """A grid device: the GEMM split or 1-D stream of the op (``perf.spatial_op``). Residency in host
    memory is not modelled here: such tensors are read from the device's DRAM."""
    chip = device_chip(dev)
    if op.gemm is not None and op.kind in MATRIX_KINDS:
        m, n, k = _sharded_gemm(op, micro_batch, tp, tp_axes)
        if spatial.weights is WeightPlacement.prefetched and op.split not in (TensorSplit.column, TensorSplit.row):
            # the prefetcher streams the transformer layers' projections; the LM head reads its own (sharded)
            spatial = spatial.model_copy(update={"weights": WeightPlacement.sharded})
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


# Concurrent streams Transformer Engine's ``GroupedLinear`` spreads its per-expert GEMMs over on a GPU:
# ``nvte_multi_stream_cublas_gemm`` issues GEMM i on compute stream i mod ``num_streams`` (4 by default,
# ``nvte_get_num_compute_streams``; TransformerEngine ``common/gemm/cublaslt_gemm.cu``; its PyTorch grouped
# GEMM: "For now, we only have multi-stream cublas backend"). The streams' kernels share the SMs' waves
# (``grouped_efficiency``), but each expert's GEMM stays a kernel of its own, and its fill (launch, pipeline fill
# and drain: ``DeviceModel.matmul_parts``) is not hidden by the other streams. Measured: TE's grouped-GEMM
# benchmark on H100 (NVIDIA/TransformerEngine pull request #2045, merged for TE 2.8; tests/pytorch/
# test_group_gemm.py: ``general_grouped_gemm`` called 1,000 times back to back and timed on the host, FLOPs
# 2·m·n·k, fp16) runs the multi-stream cuBLAS path (TE 2.7, CUDA 12.9) at 627.9 TFLOP/s for 8 experts of
# 4096 × 768 × 2048 and 553.9 TFLOP/s for 16 experts of 2048 × 768 × 2048 (m × n × k per expert: Qwen3-30B-A3B's
# expert width and hidden size). On the dgx-h100 curve, converted to burst clocks like these short runs (× 0.80 /
# 0.72, the preset's efficiency comment), one fill per expert gives 616 and 527 TFLOP/s (2 % and 5 % slow), one
# fill per round of the 4 streams (ceil(experts / 4)) 723 and 689 (15 % and 24 % fast). The same
# PR's single-launch CUTLASS grouped kernel (``NVTE_USE_CUTLASS_GROUPED_GEMM=1``: bf16/fp16 only, off by default,
# set by none of the recipes read) runs 650.6 and 636.9. Not modelled: that CUTLASS path (one fill per group),
# uneven experts (each expert's own tiles at its own rows; TE issue #2151 reports bf16 slowdowns when m_splits are
# uneven). A runtime whose experts are not TE's per-expert kernels (``expert_kernels`` False) runs each grouped GEMM
# as one kernel over all its experts and pays one fill: vLLM's fused MoE (``fused_experts`` launches one Triton
# ``fused_moe_kernel`` for w13, gate and up together, and one for w2; vllm/model_executor/layers/fused_moe/
# fused_moe.py), torchtitan's ``GroupedExperts`` (``torch._grouped_mm``, one CUTLASS grouped kernel per weight),
# a TPU's or a wafer's compiled grouped op. Not modelled: vLLM's w13 fusion (its gate op pays a fill of its own
# here, a few microseconds per layer). Megatron-Core's gated ``linear_fc1`` is one GroupedLinear: the gate half
# runs in the up half's kernels (``_gemm_parts``).


def _kernel_efficiency(
    op: Op, compute: Compute, dims: tuple[float, float, float], shape: tuple[float, float, float] | None,
    batch: float = 1.0,
) -> float:
    """Tile and wave quantization of one GEMM kernel a GPU runs for ``op`` (``dims``: the kernel's M×N×K — one
    product's, for a batched kernel of ``batch`` products — ``shape``: the op's forward M×N×K). A routed-expert
    op runs as a grouped GEMM (``grouped_efficiency``); any other op as one (batched) GEMM
    (``Compute.shape_efficiency``)."""
    experts = _experts_reached(op)
    if experts == 1.0 or shape is None:
        return compute.shape_efficiency(*dims, batch=batch)
    return grouped_efficiency(compute, dims, shape[0], experts)


def _gemm_parts(
    op: Op, dev: DeviceModel, padded: float, peak: float, expert_kernels: bool = False
) -> tuple[float, float]:
    """(throughput, fill) seconds of the GEMM kernels of ``op`` on a GPU doing ``padded`` FLOPs (tile and wave
    quantization included). A routed-expert op is a grouped GEMM, its experts' tiles sharing the units
    (``grouped_efficiency``). With ``expert_kernels`` (TE's multi-stream cuBLAS GEMMs, Megatron-Core training)
    it is one GEMM per local expert, each paying its own fill on the efficiency curve at its own size (measured:
    the comment above), once per expert for the gated pair: Megatron-Core's ``linear_fc1`` is one
    ``GroupedLinear`` of twice the expert width, so ``experts_gate`` (``SHARED_INPUT_SUFFIX``) runs in
    ``experts_up``'s kernels and pays no fill of its own. Otherwise it is one kernel over all the experts, with
    one fill, as a dense GEMM of its FLOPs."""
    throughput_s, fill_s = dev.matmul_parts(padded, peak)
    experts = _experts_reached(op)
    if experts == 1.0 or not expert_kernels:
        return throughput_s, fill_s
    if op.name.split(".", 1)[-1].endswith(SHARED_INPUT_SUFFIX):
        return throughput_s, 0.0
    _, fill_one = dev.matmul_parts(padded / experts, peak)
    return throughput_s, fill_one * math.ceil(experts)


def grouped_efficiency(compute: Compute, dims: tuple[float, float, float], tokens: float, experts: float) -> float:
    """Tile and wave quantization of a grouped GEMM over ``experts`` local experts sharing ``tokens``
    token-slots evenly (Megatron-Core's ``--moe-grouped-gemm``: CUTLASS's grouped GEMM, whose tile scheduler
    deals every problem's tiles to one persistent grid, or Transformer Engine's ``GroupedLinear``, one cuBLAS
    GEMM per expert spread over 4 concurrent streams). Each expert's problem is tiled on its own: its M (the
    forward's and the data gradient's token rows) is padded to whole tiles per expert, not once over all
    token-slots; the tiles of all experts then fill the units in shared waves. The weight gradient reduces
    over the tokens and writes one K×N output per expert: the experts' outputs stacked, each tiled whole.
    ``dims``: the kernel's M×N×K over all experts; ``tokens``: the token-slots (the forward's M). The fills
    (launch, pipeline fill and drain) are the caller's: one per expert kernel, or one (``_gemm_parts``)."""
    m, n, k = dims
    per = tokens / experts
    if m == tokens:  # forward or data gradient: rows per expert
        tm = compute.tile_rows(per)
        if tm is None:
            return compute.shape_efficiency(per, n, k)
        rows = math.ceil(per / tm) * tm
        return per / rows * compute.shape_efficiency(experts * rows, n, k)
    # weight gradient (K×N per expert, reducing over the expert's token-slots): outputs stacked along M
    return compute.shape_efficiency(experts * m, n, per)


# Transformer Engine's fp8 training recipes (transformer_engine/common/recipe/__init__.py), each a different set
# of quantization kernels around an fp8 GEMM (``mapping.formats.fp8_scaling``). Bytes per element of the tensor
# quantized, and kernels, per quantized tensor:
# - 'tensor', current scaling (``Float8CurrentScaling``, NVIDIA's "FP8-CS" rows, the default): the scale comes
#   from the tensor's own amax, which must be known before its first element is cast, so a tensor is quantized
#   by an amax reduction over it, a one-thread scale kernel and then the scaled cast (TE's C API:
#   nvte_compute_amax, nvte_compute_scale_from_amax, nvte_quantize, as tests/cpp/operator/
#   test_cast_current_scaling.cu calls them). The amax pass reads bf16; the cast reads bf16 and writes fp8.
#   vLLM's dynamic per-tensor fp8 quantization of an activation is the same reduction then cast.
# - 'delayed' (``DelayedScaling``): the scale is the one the amax history gave before this step, so the cast
#   runs at once and records the tensor's amax as it goes (the amax fused into the cast and cast-transpose
#   kernels): one kernel, one bf16 read and the fp8 writes. Once per autocast pass the amaxes are all-reduced
#   and one multi-tensor kernel updates every history and scale (quantization.py
#   ``reduce_and_update_fp8_tensors``: one amax all-reduce and ``tex.fused_amax_and_scale_update_after_
#   reduction``, forward and backward): not charged (a few microseconds per micro-batch).
# - 'block' (``Float8BlockScaling``, DeepSeek-V3's recipe: x and grad in 1×128 blocks, weights in 128×128): each
#   block's scale is its own amax, which the quantize kernel finds in the block it holds
#   (``quantize_transpose_vector_blockwise``: the row-wise and the column-wise copy, each with its scales, from
#   one read of the bf16 input): one kernel, fp8 writes plus one fp32 scale per 128 elements per copy.
# - 'mxfp8' (``MXFP8BlockScaling``, Blackwell): the same single pass with 1×32 blocks and one E8M0 (1-byte) scale
#   per 32 elements per copy; the tensor cores apply the scales (``Compute.microscaling``).
# The per-block scales' GEMM rate stays the per-tensor fp8 rate: the fp8 GEMM efficiency of the presets
# (dgx-h100 ``format_efficiency`` fp8) is already DeepGEMM's, a 1×128/128×128 block-scaled kernel.
FP8_AMAX_READ = 2.0  # current scaling's amax pass reads the bf16 tensor
FP8_SOURCE_READ = 2.0  # every cast reads the bf16 tensor once
FP8_CAST_KERNELS = 3  # amax, scale from amax, cast (nvte_compute_amax, nvte_compute_scale_from_amax, nvte_quantize)


@dataclass(frozen=True, slots=True)
class Fp8Quantization:
    """One recipe's quantization of a tensor: bytes read per element before the cast (a separate amax pass),
    fp8 bytes written per element per copy (with its scales), and kernels per quantized tensor."""

    amax_read: float
    copy_bytes: float
    kernels: int


FP8_QUANTIZATION: dict[Fp8Scaling, Fp8Quantization] = {
    Fp8Scaling.tensor: Fp8Quantization(FP8_AMAX_READ, 1.0, FP8_CAST_KERNELS),
    Fp8Scaling.delayed: Fp8Quantization(0.0, 1.0, 1),
    Fp8Scaling.block: Fp8Quantization(0.0, 1.0 + 4.0 / 128, 1),  # fp32 scale per 1×128 block
    Fp8Scaling.mxfp8: Fp8Quantization(0.0, 1.0 + 1.0 / 32, 1),  # E8M0 scale per 1×32 block
}


def fp8_streaming_kernels(formats: OpFormats | None, kernels: int) -> int:
    """Of the ``kernels`` quantization kernels ``fp8_cast_passes`` counts, those that stream a tensor through
    memory (each pays its ramp, ``DeviceModel.stream_s``): all but current scaling's one-thread scale kernel, which
    sits between its amax pass and its cast (``Fp8Quantization.amax_read``)."""
    if formats is None or kernels <= 0:
        return 0
    return kernels - 1 if FP8_QUANTIZATION[formats.fp8_scaling].amax_read else kernels


def fp8_expert_launches(op: Op, formats: OpFormats | None, kernels: int, streams: int,
                        expert_kernels: bool) -> tuple[int, int]:
    """(kernels, streaming kernels) of the quantization around a routed-expert GEMM as Transformer Engine's
    ``GroupedLinear`` runs it (``expert_kernels``), from one tensor's (``kernels``, ``streams``). TE quantizes
    the grouped input (and in the backward the grouped output gradient) split by expert: ``split_quantize``
    (``transformer_engine/pytorch/csrc/extensions/cast.cpp``) builds one tensor per local expert and hands the
    list to ``multi_tensor_quantize_impl``, whose only fused kernel is delayed scaling's
    (``nvte_multi_cast_transpose``, one launch for all experts: "Currently only have fused kernel for FP8 delayed
    scaling"); every other recipe is "Quantize kernels individually": each expert's tensor gets the recipe's
    kernels of its own (current scaling's amax, scale and cast; block scaling's and MXFP8's one), each with the
    per-kernel floor and ramp, its share of the bytes unchanged. Megatron-Core's gated ``linear_fc1`` is one
    ``GroupedLinear`` (``SHARED_INPUT_SUFFIX``): its output gradient, gate and up halves together, is split and
    quantized once, so the gate op's bytes ride on the up op's launches (0 here: the bytes stream at the full
    rate, ``op_time``), as its GEMMs do (``_gemm_parts``). Any other op, or experts not run as TE's per-expert
    kernels: unchanged."""
    experts = _experts_reached(op)
    if not expert_kernels or experts == 1.0 or kernels <= 0:
        return kernels, streams
    if op.name.split(".", 1)[-1].endswith(SHARED_INPUT_SUFFIX):
        return 0, 0
    if formats is not None and formats.fp8_scaling is Fp8Scaling.delayed:
        return kernels, streams
    local = math.ceil(experts)
    return kernels * local, streams * local


# A gated MLP's up and gate projections (``transformer_block._add_mlp``: "mlp_up"/"mlp_gate",
# "experts_up"/"experts_gate") are one GEMM in Megatron-Core (``linear_fc1`` of twice the width), so their
# shared input is quantized once: the gate op pays no input-side cast of its own.
SHARED_INPUT_SUFFIX = "_gate"


def fp8_cast_passes(
    op: Op, formats: OpFormats | None, backward: bool, in_elems: float, out_elems: float
) -> tuple[float, int] | None:
    """(bytes moved, kernels) of the quantization passes one rank runs around a weighted fp8 GEMM kernel
    by kernel (a GPU): None when the op is not one (``formats.gemm_dtype``). The recipe
    (``formats.fp8_scaling``, ``FP8_QUANTIZATION``) says whether an amax pass precedes the cast, what each fp8
    copy carries in scales and how many kernels a quantized tensor takes. Forward: the input activation
    (its local shard: with sequence parallelism TE casts before the fp8 all-gather) gets (an amax pass and) a
    cast. Backward: the output gradient the same, its cast also writing the transposed fp8 copy the weight
    gradient needs (``cast_transpose``, one more fp8 write per element), and the input's transposed fp8 copy
    for the weight gradient (TE writes it in the forward's cast when the input needs a gradient; charged
    here, with the pass only training runs, so a forward-only inference pass pays just its row-wise cast).
    Weights are cast once per optimizer step (TE caches them over the micro-batches of a step,
    ``is_first_microbatch``): not charged per micro-batch. Elements: ``in_elems``/``out_elems`` of the rank."""
    if formats is None or op.params <= 0 or op.kind not in (OpKind.matmul, OpKind.fc, OpKind.conv):
        return None
    if gemm_dtype(formats, True) is not DType.fp8:
        return None
    shared = op.name.split(".", 1)[-1].endswith(SHARED_INPUT_SUFFIX)
    q = FP8_QUANTIZATION[formats.fp8_scaling]
    if not backward:
        return (0.0, 0) if shared else (in_elems * (q.amax_read + FP8_SOURCE_READ + q.copy_bytes), q.kernels)
    grad = out_elems * (q.amax_read + FP8_SOURCE_READ + 2 * q.copy_bytes)
    return grad + (0.0 if shared else in_elems * q.copy_bytes), q.kernels
