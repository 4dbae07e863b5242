"""The fused (flash) attention kernel runs at its own measured rate, not a large GEMM's.

A device may give the fraction of its matrix peak a fused attention kernel reaches at large sizes, forward and
backward (``Compute.flash_forward_efficiency`` / ``flash_backward_efficiency``: cuDNN's measured rates on H100),
and under a causal mask its own lower rates (``flash_causal_forward_efficiency`` / ``flash_causal_backward_efficiency``:
the Llama attention here is causal; ``test_causal_attention_rate`` covers the mask itself); the kernel's launch and
fill stay the GEMM efficiency curve's. Expected times are derived here from the preset's
peak, its curve's points and the op's shapes, not read back from the engine. In an fp8 run attention stays
bf16 (Transformer Engine's ``fp8_dpa`` is off by default), so it runs at the bf16 peak.
"""

from __future__ import annotations

import math

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import LlamaSpec
from tilewright.engine.ir.common import DType
from tilewright.engine.ir.mapping import TensorFormats
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.formats import resolve_formats
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.workloads import build_workload
from tilewright.engine.workloads.transformer_block import FLASH_BLOCK

SEQ, HIDDEN, HEADS = 8192, 4096, 32
HEAD_DIM = HIDDEN // HEADS
NO_RATES = {"flash_forward_efficiency": None, "flash_backward_efficiency": None,
            "flash_causal_forward_efficiency": None, "flash_causal_backward_efficiency": None}


def _gpu(system: str = "dgx-h100", **update: object):
    gpu = load_system(system).children[0].children[0]
    compute = gpu.compute.model_copy(update=update) if update else gpu.compute
    return device_model(compute, gpu.memories, None, DType.bf16)


def _attention(seq: int = SEQ):
    spec = LlamaSpec(name="llama", layers=1, hidden=HIDDEN, heads=HEADS, kv_heads=8, ffn=14336, vocab=32000,
                     seq_len=seq)
    graph = build_workload(spec)
    return next(op for op in graph.layer_ops(graph.block_layers[0]) if op.kind is OpKind.attention)


def _fill(compute, flops: float, peak: float) -> float:
    """The GEMM curve's fixed part at ``flops``: its time at the curve minus its time at the curve's best,
    the curve interpolated linearly in log10(FLOPs) (clamped at its ends) from the preset's points."""
    pts = compute.efficiency.points
    x = math.log10(flops)
    xs = [math.log10(p[0]) for p in pts]
    if x <= xs[0]:
        eff = pts[0][1]
    elif x >= xs[-1]:
        eff = pts[-1][1]
    else:
        i = next(i for i in range(1, len(xs)) if x <= xs[i])
        t = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
        eff = pts[i - 1][1] + t * (pts[i][1] - pts[i - 1][1])
    best = max(p[1] for p in pts)
    return flops / (peak * eff) - flops / (peak * best)


def _causal_flops(seq: int, mb: int, tp: int) -> float:
    return seq * (seq + FLASH_BLOCK) / 2 * 4 * HEAD_DIM * HEADS * mb / tp


def test_h100_preset_gives_forward_and_backward_rates_below_its_gemms():
    c = load_system("dgx-h100").children[0].children[0].compute
    best = max(p[1] for p in c.efficiency.points)
    assert c.flash_backward_efficiency < c.flash_forward_efficiency < best
    assert c.flash_causal_forward_efficiency < c.flash_forward_efficiency
    assert c.flash_causal_backward_efficiency < c.flash_backward_efficiency


@pytest.mark.parametrize("mb,tp", [(1, 1), (2, 4)])
@pytest.mark.parametrize("backward", [False, True])
def test_fused_kernel_runs_at_its_own_rate_plus_the_gemm_fill(mb, tp, backward):
    dev = _gpu()
    c = dev.compute
    flops = _causal_flops(SEQ, mb, tp) * (2.5 if backward else 1.0)
    rate = c.flash_causal_backward_efficiency if backward else c.flash_causal_forward_efficiency
    peak = c.peak_flops[DType.bf16]
    t = op_time(_attention(), dev, mb, tp, False, backward, 2, fused_out=True)
    assert t.flops == pytest.approx(flops)
    assert t.compute_s == pytest.approx(flops / (peak * rate))
    assert t.overhead_s == pytest.approx(c.fixed_op_s + _fill(c, flops, peak))


def test_short_sequences_reach_a_lower_achieved_rate():
    """The fixed launch and fill weigh more on a small kernel: achieved FLOP/s fall with the sequence."""
    dev = _gpu()

    def achieved(seq: int) -> float:
        t = op_time(_attention(seq), dev, 1, 1, False, False, 2, fused_out=True)
        return t.flops / t.busy_s

    best = dev.compute.flash_causal_forward_efficiency * dev.peak_flops
    assert achieved(512) < achieved(2048) < achieved(8192) <= best


def test_without_kernel_rates_the_fused_kernel_runs_at_the_gemm_curve():
    dev = _gpu(**NO_RATES)
    c = dev.compute
    best = max(p[1] for p in c.efficiency.points)
    for backward in (False, True):
        flops = _causal_flops(SEQ, 1, 1) * (2.5 if backward else 1.0)
        t = op_time(_attention(), dev, 1, 1, False, backward, 2, fused_out=True)
        assert t.compute_s == pytest.approx(flops / (c.peak_flops[DType.bf16] * best))


def test_unfused_attention_keeps_the_gemm_rate():
    """Megatron-LM's unfused QKᵀ and PV are batched GEMMs: the kernel rates do not reach them."""
    with_rates, without = _gpu(), _gpu(**NO_RATES)
    for backward in (False, True):
        a = op_time(_attention(), with_rates, 1, 1, False, backward, 2)
        b = op_time(_attention(), without, 1, 1, False, backward, 2)
        assert a.compute_s == pytest.approx(b.compute_s) and a.overhead_s == pytest.approx(b.overhead_s)


def test_fp8_runs_cost_fused_attention_at_the_bf16_rate():
    dev = _gpu()
    fp8 = resolve_formats(DType.fp8, TensorFormats(), None)
    bf16 = resolve_formats(DType.bf16, TensorFormats(), None)
    for backward in (False, True):
        a = op_time(_attention(), dev, 1, 1, False, backward, 2, fused_out=True, formats=fp8)
        b = op_time(_attention(), dev, 1, 1, False, backward, 2, fused_out=True, formats=bf16)
        assert a.compute_s == pytest.approx(b.compute_s)
        rate = dev.compute.flash_causal_backward_efficiency if backward else dev.compute.flash_causal_forward_efficiency
        assert a.compute_s == pytest.approx(a.flops / (dev.compute.peak_flops[DType.bf16] * rate))
