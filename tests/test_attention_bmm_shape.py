"""Shape-aware pricing of an unfused attention's batched GEMMs on a GPU (``Op.bmm``, ``op_cost.attention_kernels``,
``Compute.shape_efficiency`` with a batch): the training graph gives its attention op the head structure, each
of Megatron-LM's kernels (QKᵀ, PV forward; dV, dP, dQ, dKᵀ backward) is priced at its own M×N×K over a batch
of micro-batch × local heads, its tiles dealt to the SMs in waves. Expected quantization is derived by hand
from the preset's tile (256 × 128) and SM count; a fused kernel and a grid device are untouched."""

from __future__ import annotations

import math

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import DType, GPTSpec, LlamaSpec, OpKind
from tilewright.engine.ir.ops import AttentionBmm, Op
from tilewright.engine.ir.workload import MLASpec
from tilewright.engine.perf.device import device_model, issues_kernels
from tilewright.engine.perf.op_cost import attention_kernels, op_time
from tilewright.engine.workloads import build_workload


def _device(system: str):
    comp = next(c for _, c in load_system(system).walk() if c.compute is not None)
    return device_model(comp.compute, comp.memories, None, DType.bf16)


def _attention(spec) -> Op:
    graph = build_workload(spec)
    return next(op for op in graph.layer_ops(graph.block_layers[0]) if op.kind is OpKind.attention)


def test_the_training_graph_gives_attention_its_heads_and_widths():
    """GPT (head_dim = h/a), Llama with GQA and a head_dim other than h/a, and MLA (query/key and value widths
    differ): the batch counts query heads (K/V are expanded to them before the GEMMs), and the shapes' FLOPs,
    2·a·s_q·s_k·(d_qk + d_v), are the op's own."""
    seq = 512
    cases = [
        (GPTSpec(name="g", layers=1, hidden=1024, heads=16, seq_len=seq, vocab=4096), 16, 64, 64),
        (LlamaSpec(name="l", layers=1, hidden=1024, heads=8, kv_heads=2, head_dim=160, ffn=2048, vocab=4096,
                   seq_len=seq), 8, 160, 160),
        (LlamaSpec(name="m", layers=1, hidden=1024, heads=8, ffn=2048, vocab=4096, seq_len=seq,
                   mla=MLASpec(kv_lora_rank=256, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=48)),
         8, 96, 48),
    ]
    for spec, heads, qk, v in cases:
        op = _attention(spec)
        assert op.bmm == AttentionBmm(heads=heads, queries=seq, keys=seq, qk_dim=qk, v_dim=v)
        assert op.flops == pytest.approx(2.0 * heads * seq * seq * (qk + v))
        assert op.attention is None  # the flash marker stays off: how the op runs is the mapping's choice


def test_a_sliding_window_counts_the_keys_the_flops_count():
    spec = LlamaSpec(name="w", layers=1, hidden=512, heads=8, ffn=1024, vocab=4096, seq_len=1024, sliding_window=256)
    op = _attention(spec)
    assert op.bmm is not None and op.bmm.keys == 256
    assert op.flops == pytest.approx(2.0 * 8 * 1024 * 256 * (64 + 64))


def test_the_op_saves_without_the_field_at_its_default():
    op = Op(name="0.a", kind=OpKind.attention, layer=0, flops=1.0)
    assert "bmm" not in op.model_dump(mode="json")


def test_kernels_are_the_autograd_gemms_with_shares_by_their_own_flops():
    """Forward S = Q·Kᵀ (s_q × s_k over d_qk), O = P·V (s_q × d_v over s_k); backward dV = Pᵀ·dO, dP = dO·Vᵀ,
    dQ = dS·K, dKᵀ = Qᵀ·dS. With d_qk = 96, d_v = 32 the QKᵀ side carries 96/128 of each pass's FLOPs."""
    bmm = AttentionBmm(heads=4, queries=300, keys=500, qk_dim=96, v_dim=32)
    fwd = attention_kernels(bmm, False)
    assert [d for _, d in fwd] == [(300, 500, 96), (300, 32, 500)]
    assert [s for s, _ in fwd] == pytest.approx([0.75, 0.25])
    bwd = attention_kernels(bmm, True)
    assert [d for _, d in bwd] == [(500, 32, 300), (300, 500, 32), (300, 96, 500), (96, 500, 300)]
    assert [s for s, _ in bwd] == pytest.approx([0.125, 0.125, 0.375, 0.375])


def test_one_forward_priced_kernel_by_kernel_with_its_batched_quantization():
    """GPT 350M-like attention (16 heads of 64, s = 1024) at tp 2, micro-batch 1 on an H100: 8 products per
    kernel. QKᵀ, 1024 × 1024 over 64: 4 × 8 tiles of 256 × 128 per product, 256 tiles over 132 SMs in two
    waves: 256 / 264 of the SM-slots do work. PV, 1024 × 64 over 1024: a 64-wide tile, 4 tiles per product, 32
    over 132 SMs, so K (1024) splits in 4 slices of 256: 128 tiles, one wave: 128 / 132. Each kernel's padded
    FLOPs go on the size curve with its own fill."""
    dev = _device("dgx-h100")
    assert issues_kernels(dev.compute) and tuple(dev.compute.gemm_tile) == (256, 128)
    assert dev.compute.gemm_units == 132
    op = _attention(GPTSpec(name="g", layers=1, hidden=1024, heads=16, seq_len=1024, vocab=4096))
    tp, mb = 2, 1
    flops = op.flops * mb / tp
    effs = (256 / (2 * 132), 128 / 132)
    peak = dev.matmul_peak(None, False)
    parts = [dev.matmul_parts(flops / 2 / e, peak) for e in effs]
    t = op_time(op, dev, mb, tp, False, False, 2.0)
    assert t.compute_s == pytest.approx(sum(p[0] for p in parts), rel=1e-9)
    assert t.overhead_s == pytest.approx(dev.compute.fixed_op_s + sum(p[1] for p in parts), rel=1e-9)
    # the same op without a shape: two kernels of half the FLOPs each, no quantization
    plain = op_time(op.model_copy(update={"bmm": None}), dev, mb, tp, False, False, 2.0)
    assert plain.compute_s < t.compute_s


def test_the_batch_is_micro_batch_times_local_heads():
    """Doubling the micro-batch doubles the products of each kernel: QKᵀ (32 tiles each) goes from 256 tiles in
    two waves of 132 to 512 in four (512 / 528), PV's 4-tile products from 32 (split-K 4: 128 of 132) to 64
    (split-K 2, the units left over: 128 of 132)."""
    dev = _device("dgx-h100")
    op = _attention(GPTSpec(name="g", layers=1, hidden=1024, heads=16, seq_len=1024, vocab=4096))
    peak = dev.matmul_peak(None, False)
    flops = op.flops * 2 / 2
    effs = (512 / (4 * 132), 128 / 132)
    parts = [dev.matmul_parts(flops / 2 / e, peak) for e in effs]
    t = op_time(op, dev, 2, 2, False, False, 2.0)
    assert t.compute_s == pytest.approx(sum(p[0] for p in parts), rel=1e-9)


def test_backward_kernels_at_their_own_shapes():
    """Backward of a 4-product (micro-batch 1, 8 heads at tp 2) attention with s = 512, d = 64 on an H100.
    dV (512 × 64 over 512) and dQ (512 × 64 over 512): 2 tiles of 256 × 64 per product, 8 tiles, split-K
    min(132 // 8, 512 / 256) = 2: 16 of 132. dP (512 × 512 over 64): 2 × 4 tiles, 32 tiles, K = 64 splits
    once (ceil(64 / 256) = 1): 32 of 132. dKᵀ (64 × 512 over 512): a 64-row tile, 1 × 4 tiles, 16 tiles,
    split-K 2: 32 of 132. Each carries a quarter of the backward's FLOPs (d_qk = d_v)."""
    dev = _device("dgx-h100")
    op = _attention(GPTSpec(name="g", layers=1, hidden=1024, heads=8, seq_len=512, vocab=4096))
    flops = op.backward_flops * 1 / 2
    effs = (16 / 132, 32 / 132, 16 / 132, 32 / 132)
    peak = dev.matmul_peak(None, False)
    parts = [dev.matmul_parts(flops / 4 / e, peak) for e in effs]
    t = op_time(op, dev, 1, 2, False, True, 2.0)
    assert t.compute_s == pytest.approx(sum(p[0] for p in parts), rel=1e-9)
    assert t.overhead_s == pytest.approx(dev.compute.fixed_op_s + sum(p[1] for p in parts), rel=1e-9)


def test_batched_quantization_counts_every_products_tiles_in_one_set_of_waves():
    """``Compute.shape_efficiency`` with a batch: 3 products of 300 × 200 (H100: 256 × 128 tiles, 2 × 2 per
    product, 300·200 / (512·256) of each tile set useful) are 12 tiles, K 4096 split min(132 // 12, 16) = 11
    ways: 132 tiles, one full wave."""
    c = _device("dgx-h100").compute
    pad = 300 * 200 / (512 * 256)
    assert c.shape_efficiency(300, 200, 4096, batch=3) == pytest.approx(pad * 132 / 132)
    # 50 products: 200 tiles, no split, two waves of 132
    assert c.shape_efficiency(300, 200, 4096, batch=50) == pytest.approx(pad * 200 / 264)
    assert c.shape_efficiency(300, 200, 4096) == c.shape_efficiency(300, 200, 4096, batch=1)
    assert math.isclose(c.shape_efficiency(300, 200, 0, batch=3), pad * 12 / 132)


@pytest.mark.parametrize("backward", [False, True])
def test_a_fused_kernel_and_a_grid_device_ignore_the_shape(backward):
    """A flash kernel (fused attention → softmax) is one kernel at its own rate, and a grid device runs the op
    as one program: neither reads ``Op.bmm``."""
    op = _attention(GPTSpec(name="g", layers=1, hidden=1024, heads=16, seq_len=1024, vocab=4096))
    bare = op.model_copy(update={"bmm": None})
    h100 = _device("dgx-h100")
    assert (op_time(op, h100, 2, 2, False, backward, 2.0, fused_out=True)
            == op_time(bare, h100, 2, 2, False, backward, 2.0, fused_out=True))
    grid = _device("wormhole-n150")
    assert not issues_kernels(grid.compute)
    assert op_time(op, grid, 2, 1, False, backward, 2.0) == op_time(bare, grid, 2, 1, False, backward, 2.0)
