"""A format whose datasheet peak the SMs cannot feed as well as bf16's (fp8 on Hopper) reaches a share of the
efficiency curve (``Compute.format_efficiency``): its GEMMs' throughput time grows by 1 / share, bf16 GEMMs
and attention (computed in the activations' format) keep theirs."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import DType, LlamaSpec
from tilewright.engine.ir.mapping import TensorFormats
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.formats import resolve_formats
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.workloads import build_workload

SPEC = LlamaSpec(name="l8", layers=1, hidden=4096, heads=32, ffn=14336, vocab=32000, seq_len=8192)
FP8 = resolve_formats(DType.fp8, TensorFormats(), None)


def _h100(**update):
    gpu = next(c for _, c in load_system("dgx-h100").walk() if c.compute is not None)
    return device_model(gpu.compute.model_copy(update=update), gpu.memories, None, DType.bf16)


def _op(kind: OpKind, name: str = ""):
    return next(op for op in build_workload(SPEC).ops() if op.kind is kind and op.name.endswith(name))


def test_the_h100_preset_scales_fp8_only():
    assert _h100().compute.format_efficiency == {DType.fp8: pytest.approx(0.875)}


@pytest.mark.parametrize("backward", [False, True])
def test_an_fp8_gemm_runs_at_its_share_of_the_curve(backward: bool):
    """The throughput part of each GEMM kernel scales by 1 / 0.875; its launch and fill (the curve's fixed
    part, a time at the scaled peak) need not, so the whole op lies between 1× and 1 / 0.875 of the unscaled."""
    up = _op(OpKind.matmul, "mlp_up")
    scaled = op_time(up, _h100(), 1, 1, False, backward, 2, formats=FP8)
    plain = op_time(up, _h100(format_efficiency={}), 1, 1, False, backward, 2, formats=FP8)
    assert scaled.compute_s == pytest.approx(plain.compute_s / 0.875, rel=1e-9)
    assert plain.busy_s < scaled.busy_s <= plain.busy_s / 0.875 * (1 + 1e-9)


def test_bf16_gemms_and_attention_keep_their_rate():
    up, attention = _op(OpKind.matmul, "mlp_up"), _op(OpKind.attention)
    bf16 = resolve_formats(DType.bf16, TensorFormats(), None)
    for op, formats in ((up, bf16), (up, None), (attention, FP8)):
        a = op_time(op, _h100(), 1, 1, False, False, 2, formats=formats)
        b = op_time(op, _h100(format_efficiency={}), 1, 1, False, False, 2, formats=formats)
        assert a.busy_s == pytest.approx(b.busy_s, rel=1e-12)
