"""fp8 GEMMs on a GPU pay Transformer Engine's quantization passes (current scaling, NVIDIA's FP8-CS).

Around each weighted fp8 GEMM: forward, the input activation's amax pass (reads bf16) and cast (reads bf16,
writes fp8); backward, the output gradient's amax pass and cast with its transposed fp8 copy, plus the
input's transposed fp8 copy for the weight gradient. Three kernels per quantized tensor (amax, scale, cast),
each at the device's per-kernel floor. A gated MLP's gate shares the up projection's quantized input (one
``linear_fc1`` GEMM in Megatron-Core). Expected bytes are derived from the op's shapes here; the time is
bytes over the HBM's achievable bandwidth, each streaming kernel (the amax pass and the cast, not the scale
kernel) on an equal share of them with the HBM's ramp (``Memory.stream_ramp_s``), compared with the same op
costed without the passes.
"""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import LlamaSpec
from tilewright.engine.ir.common import DType
from tilewright.engine.ir.mapping import TensorFormats
from tilewright.engine.perf import op_cost
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.formats import resolve_formats
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.workloads import build_workload

SEQ, HIDDEN, FFN = 4096, 4096, 14336
H100_RAMP = 1.0e-6  # dgx-h100 preset: HBM stream_ramp_s


def streamed(dev, moved: float, streams: int) -> float:
    """Seconds of ``streams`` memory-bound kernels moving ``moved`` bytes in equal shares, each delivered at a
    bandwidth rising linearly to the HBM's achievable rate over twice the ramp r: τ + r for a share taking
    τ ≥ r at the full rate, 2√(rτ) below."""
    tau = moved / streams / dev.dram_bandwidth
    return streams * (tau + H100_RAMP if tau >= H100_RAMP else 2 * (H100_RAMP * tau) ** 0.5)


def _h100():
    gpu = load_system("dgx-h100").children[0].children[0]
    return device_model(gpu.compute, gpu.memories, None, DType.fp8)


def _ops():
    spec = LlamaSpec(name="llama", layers=1, hidden=HIDDEN, heads=32, kv_heads=8, ffn=FFN, vocab=32000,
                     seq_len=SEQ)
    graph = build_workload(spec)
    return {op.name.split(".", 1)[-1]: op for op in graph.layer_ops(graph.block_layers[0])}


def cast_extra(op, dev, backward: bool, dtype: DType, tp: int = 1, sp: bool = False, mb: int = 1,
               recipe: str | None = None):
    """(extra overhead seconds, extra local bytes) of ``op`` over the same op without the cast passes, under
    the fp8 scaling ``recipe`` (None: current scaling); the GEMM's own rate must not change."""
    formats = resolve_formats(dtype, TensorFormats(fp8_scaling=recipe), None)
    with_casts = op_time(op, dev, mb, tp, sp, backward, 2, formats=formats)
    original = op_cost.fp8_cast_passes
    op_cost.fp8_cast_passes = lambda *a, **k: None
    try:
        without = op_time(op, dev, mb, tp, sp, backward, 2, formats=formats)
    finally:
        op_cost.fp8_cast_passes = original
    assert with_casts.compute_s == pytest.approx(without.compute_s)
    return with_casts.overhead_s - without.overhead_s, with_casts.local_bytes - without.local_bytes


@pytest.mark.parametrize("tp,sp,mb", [(1, False, 1), (4, True, 2)])
def test_forward_quantizes_the_input_once(tp, sp, mb):
    dev = _h100()
    up = _ops()["mlp_up"]
    elems = SEQ * HIDDEN * mb / tp  # the rank's input shard (sequence parallel: cast before the all-gather)
    moved = elems * (2 + 2 + 1)  # amax reads bf16; the cast reads bf16 and writes fp8
    seconds, local = cast_extra(up, dev, False, DType.fp8, tp, sp, mb)
    assert local == pytest.approx(moved)
    assert seconds == pytest.approx(streamed(dev, moved, 2) + 3 * dev.compute.fixed_op_s)


@pytest.mark.parametrize("tp,sp", [(1, False), (4, True)])
def test_backward_quantizes_the_gradient_with_its_transpose_and_the_inputs_transpose(tp, sp):
    dev = _h100()
    down = _ops()["mlp_down"]  # M×K = tokens × ffn in, M×N = tokens × hidden out (row parallel)
    grad = SEQ * HIDDEN / tp if sp else SEQ * HIDDEN  # the rank's output-gradient shard
    inp = SEQ * FFN / tp
    moved = grad * (2 + 2 + 1 + 1) + inp * 1
    seconds, local = cast_extra(down, dev, True, DType.fp8, tp, sp)
    assert local == pytest.approx(moved)
    assert seconds == pytest.approx(streamed(dev, moved, 2) + 3 * dev.compute.fixed_op_s)


def test_the_gate_shares_the_up_projections_quantized_input():
    dev = _h100()
    gate = _ops()["mlp_gate"]
    assert cast_extra(gate, dev, False, DType.fp8) == (0.0, 0.0)
    seconds, local = cast_extra(gate, dev, True, DType.fp8)
    assert local == pytest.approx(SEQ * FFN * (2 + 2 + 1 + 1))  # its own output gradient only


def test_bf16_runs_and_unweighted_ops_pay_no_casts():
    dev = _h100()
    ops = _ops()
    for backward in (False, True):
        assert cast_extra(ops["mlp_up"], dev, backward, DType.bf16) == (0.0, 0.0)
        for name in ("attention", "norm1", "activation"):
            assert cast_extra(ops[name], dev, backward, DType.fp8) == (0.0, 0.0)


def test_a_device_that_runs_ops_as_whole_programs_pays_none():
    """The passes are host-issued kernels of a GPU framework; a device without host dispatch (a TPU, whose
    compiler runs each op as one program) is not charged them."""
    tpu = load_system("tpu-v4-torus")
    comp = next(c for c in _walk(tpu) if c.compute is not None)
    dev = device_model(comp.compute, comp.memories, None, DType.fp8)
    for backward in (False, True):
        assert cast_extra(_ops()["mlp_up"], dev, backward, DType.fp8) == (0.0, 0.0)


def _walk(c):
    yield c
    for ch in c.children:
        yield from _walk(ch)


@pytest.mark.parametrize("backward", [False, True])
def test_gemm_only_is_the_op_without_its_quantization(backward: bool):
    """``op_time(..., gemm_only=True)``: the GEMM kernels alone, as a library splitting only the GEMM call runs
    each chunk (``plan.tp_overlap``); equal to the op costed with the cast passes taken out."""
    dev = _h100()
    up = _ops()["mlp_up"]
    formats = resolve_formats(DType.fp8, TensorFormats(), None)
    gemm = op_time(up, dev, 1, 4, True, backward, 2, formats=formats, gemm_only=True)
    original = op_cost.fp8_cast_passes
    op_cost.fp8_cast_passes = lambda *a, **k: None
    try:
        without = op_time(up, dev, 1, 4, True, backward, 2, formats=formats)
    finally:
        op_cost.fp8_cast_passes = original
    assert (gemm.compute_s, gemm.overhead_s, gemm.local_bytes) == (without.compute_s, without.overhead_s,
                                                                  without.local_bytes)
    assert op_time(up, dev, 1, 4, True, backward, 2, formats=formats).overhead_s > gemm.overhead_s
