"""A GEMM's launch, pipeline fill and drain (the fixed part of the device's efficiency curve) is paid whether
the GEMM is compute- or memory-bound: a decode GEMV streams its weights after the kernel has started, so
the fill is not hidden under the streaming time."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import DType, LlamaSpec
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.workloads.transformer_inference import inference_graph

SPEC = LlamaSpec(name="l7", layers=2, hidden=4096, heads=32, ffn=11008, vocab=32000, seq_len=2048)


def _a100():
    dgx = load_system("dgx-a100")
    gpu = next(c for _, c in dgx.walk() if c.compute is not None)
    return device_model(gpu.compute, gpu.memories, None, DType.bf16)


def _mlp_up(tokens: int):
    graph = inference_graph(SPEC, tokens, max(tokens, 128), 1, True)
    return next(op for op in graph.layer_ops(1) if op.name.endswith("mlp_up"))


def test_a_memory_bound_gemv_pays_the_fill_on_top_of_streaming_its_weights():
    dev = _a100()
    op = _mlp_up(1)
    t = op_time(op, dev, 1, 1, False, False, 2.0)
    weights = op.params * 2.0
    assert t.memory_s >= weights / dev.dram_bandwidth  # reads its weights at most at the achievable rate
    assert t.memory_s > t.compute_s  # one token: memory-bound
    fill = dev.matmul_fill_s(t.flops, dev.matmul_peak(None, True))
    assert fill > 1e-6  # the curve's launch and fill (the A100 preset: t0 = 4 us)
    assert t.busy_s >= t.memory_s + dev.compute.fixed_op_s + 0.5 * fill


def test_a_compute_bound_gemm_costs_what_the_efficiency_curve_says():
    dev = _a100()
    op = _mlp_up(4096)
    t = op_time(op, dev, 1, 1, False, False, 2.0)
    assert t.compute_s > t.memory_s
    peak = dev.matmul_peak(None, True)
    curve = t.flops / (peak * dev.matmul_efficiency(t.flops))
    # tile quantization may pad the work; the padded GEMM's time at its efficiency, plus the gap per kernel
    assert t.busy_s == pytest.approx(t.compute_s + dev.matmul_fill_s(t.flops, peak) + dev.compute.fixed_op_s,
                                     rel=0.05)
    assert t.busy_s >= curve + dev.compute.fixed_op_s - 1e-12
