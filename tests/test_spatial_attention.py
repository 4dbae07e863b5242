"""Flash-attention prefill on a grid device (perf.spatial_attention): what the kernel's split implies.

Every q chunk of every head re-reads the K/V it attends to from DRAM, so K/V traffic grows with the number of
q chunks (quadratically with the prompt when causal); work is spread in whole (head, q-chunk) units, so a
few heads leave cores idle; no split beats the matrix roofline, DRAM or the fixed cost; the softmax constant
reproduces the per-core rate it was taken from; a decode step reads the cache once over at most 16 cores
per K/V head; only fused inference graphs carry the head structure.
"""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_project_preset, load_system
from tilewright.engine.ir.common import DEFAULT_FIDELITY
from tilewright.engine.ir.ops import AttentionShape, OpKind
from tilewright.engine.perf.formats import OpFormats
from tilewright.engine.perf.spatial_attention import chunk_size, decode_on_grid, prefill_on_grid
from tilewright.engine.perf.spatial_chip import GridChip, grid_chip
from tilewright.engine.perf.spatial_op import OpTensors, stream_op
from tilewright.engine.workloads.transformer_inference import inference_graph


def chip(name: str) -> GridChip:
    c = load_system(name).children[0]
    return grid_chip(c.compute, c.memories[0])


N150, P150 = chip("wormhole-n150"), chip("blackhole-p150")
BF16 = ("bf16", "HiFi2")


def shape(s: int, heads: int = 32, kv_heads: int = 8, d: int = 128, prefix: int = 0) -> AttentionShape:
    return AttentionShape(heads=heads, kv_heads=kv_heads, head_dim=d, queries=s, keys=s + prefix)


@pytest.mark.parametrize("s", [512, 2048, 4096])
def test_causal_kv_reads_every_chunk_up_to_its_position(s):
    """DRAM bytes = Q + output once, K and V once per q chunk up to the chunk's last query:
    chunks c, n = s / c of them, read c·(1 + 2 + … + n) keys per head."""
    c = chunk_size(s)
    n = s // c
    heads, d, b = 32, 128, 2.0
    _, dram = prefill_on_grid(N150, shape(s), heads, True, BF16, (b, b), (True, True))
    keys = c * n * (n + 1) // 2
    assert dram == pytest.approx(heads * d * b * (2 * s + 2 * keys))


def test_non_causal_reads_all_keys_per_chunk_and_gqa_does_not_share():
    """Without a causal mask every q chunk reads the whole K/V; K/V heads shared by several query heads are
    still read once per query head (the kernel does not multicast them)."""
    s, d, b = 1024, 128, 2.0
    n = s // chunk_size(s)
    _, mha = prefill_on_grid(N150, shape(s, kv_heads=32), 32, False, BF16, (b, b), (True, True))
    _, gqa = prefill_on_grid(N150, shape(s, kv_heads=8), 32, False, BF16, (b, b), (True, True))
    assert mha == pytest.approx(32 * d * b * (2 * s + 2 * n * s))
    assert gqa == pytest.approx(mha)


def test_kv_traffic_grows_quadratically_with_the_prompt():
    """At a fixed chunk size, 4× the prompt is 4× the chunks each re-reading up to 4× the keys."""
    small = prefill_on_grid(N150, shape(512), 32, True, BF16, (2.0, 2.0), (True, True), (64, 64))[1]
    large = prefill_on_grid(N150, shape(2048), 32, True, BF16, (2.0, 2.0), (True, True), (64, 64))[1]
    assert large > 8 * small


@pytest.mark.parametrize("ch", [N150, P150], ids=["n150", "p150"])
@pytest.mark.parametrize("s", [128, 2048, 8192])
@pytest.mark.parametrize("fmt", [BF16, ("bfp8", "LoFi"), ("bf16", "HiFi4")])
def test_never_beats_a_bound(ch, s, fmt):
    heads, d = 32, 128
    flops = 4.0 * heads * d * s * (s + 1) / 2
    c, dram = prefill_on_grid(ch, shape(s), heads, True, fmt, (2.0, 2.0), (True, True))
    assert c.seconds >= flops / ch.peak(*fmt) * (1 - 1e-12)
    assert c.seconds >= dram / ch.dram_peak * (1 - 1e-12)
    assert c.seconds >= ch.fixed_s + max(c.compute_s, c.movement_s) * (1 - 1e-12)


def test_whole_units_leave_cores_idle():
    """One head of one 64-token chunk runs on one core; the grid's worth of such units takes the same time."""
    one, _ = prefill_on_grid(N150, shape(64, heads=1, kv_heads=1), 1, True, BF16, (2.0, 2.0), (True, True))
    full, _ = prefill_on_grid(N150, shape(64), N150.cores, True, BF16, (2.0, 2.0), (True, True))
    assert one.cores == 1 and full.cores == N150.cores
    assert full.compute_s == pytest.approx(one.compute_s)
    over, _ = prefill_on_grid(N150, shape(64), N150.cores + 1, True, BF16, (2.0, 2.0), (True, True))
    assert over.compute_s == pytest.approx(2 * one.compute_s)  # one more unit: a second wave


def test_softmax_constant_reproduces_its_per_core_measurement():
    """SDPAPrecisionRecipes.md: the legacy kernel does 1.99 TFLOP/s on one Blackhole core, K/V in L1, D128,
    Q256/K512, K 8192 (non-causal). The model's matrix engine adds its per-MAC overhead, so within 10 %."""
    one_core = P150.with_grid(1, 1)
    s = AttentionShape(heads=1, kv_heads=1, head_dim=128, queries=256, keys=8192)
    c, dram = prefill_on_grid(one_core, s, 1, False, BF16, (2.0, 2.0), (False, False), (256, 512))
    assert dram == 0.0
    rate = 4 * 128 * 256 * 8192 / c.compute_s
    assert rate == pytest.approx(1.99e12, rel=0.10)


def _attention(n: int, context: int, fused: bool):
    dims = load_project_preset("wormhole-n150-llama2-7b-inference").workload
    graph = inference_graph(dims, n, context, 1, fused)
    return next(op for op in graph.ops() if op.kind is OpKind.attention), dims


def test_only_fused_graphs_carry_the_head_structure():
    op, dims = _attention(128, 128, True)
    assert op.attention == AttentionShape(heads=dims.heads, kv_heads=dims.kv_heads_n, head_dim=dims.head_dim_n,
                                          queries=128, keys=128)
    assert _attention(128, 128, False)[0].attention is None


def test_decode_reads_the_cache_once_and_prefill_costs_more_than_a_stream():
    """A decode step reads the KV cache once, as the 1-D stream of its tensors did (same bytes up to the new
    token's K/V); a 2k prefill, with the kernel's K/V re-reads and softmax, costs more than that stream."""
    fmt = OpFormats("bf16", "bf16", "bf16", DEFAULT_FIDELITY["bf16"])
    for n, context in ((1, 2048), (2048, 2048)):
        op, dims = _attention(n, context, True)
        t = OpTensors(0.0, op.in_elems, op.out_elems, op.cache_elems)
        fused = stream_op(N150, op, op.flops, t, False, fmt)
        stream = stream_op(N150, op.model_copy(update={"attention": None}), op.flops, t, False, fmt)
        if n == 1:
            assert "flash decode" in fused.split
            new_kv = 2 * dims.kv_heads_n * dims.head_dim_n * 2.0  # the stream reads it as an input
            assert fused.dram_bytes == pytest.approx(stream.dram_bytes, abs=new_kv)
            assert fused.seconds >= stream.seconds * (1 - 1e-9)
        else:
            assert "flash attention" in fused.split
            assert fused.seconds > stream.seconds
            assert fused.dram_bytes > stream.dram_bytes


def test_decode_bytes_and_core_limit():
    """FlashDecode: the cache is read once per K/V head; one K/V head (MQA, or a T3000's share of a 70B
    model) runs on at most 16 cores, however many the grid has."""
    keys, d = 4096, 128
    c, dram = decode_on_grid(N150, shape(1, heads=8, kv_heads=1, prefix=keys - 1), 8, keys, BF16, (2.0, 1.0625),
                             (True, True))
    assert c.cores == 16
    assert dram == pytest.approx(keys * d * 2 * 1.0625 + 2 * 8 * d * 2.0)
    many, _ = decode_on_grid(N150, shape(1, prefix=keys - 1), 32 * 8, keys, BF16, (2.0, 1.0625), (True, True))
    assert many.cores == N150.cores  # 8 sequences × 8 K/V heads: one core each


def test_decode_query_heads_of_a_group_share_the_padded_tile():
    """Up to 32 query heads of one K/V head ride in the rows of one padded Q tile: 4 per group cost the
    arithmetic of 1 (MHA pays the padding for every head)."""
    keys = 2048
    gqa, _ = decode_on_grid(N150, shape(1, heads=32, kv_heads=8, prefix=keys - 1), 32, keys, BF16, (2.0, 2.0),
                            (True, True))
    mha, _ = decode_on_grid(N150, shape(1, heads=8, kv_heads=8, prefix=keys - 1), 8, keys, BF16, (2.0, 2.0),
                            (True, True))
    assert gqa.compute_s == pytest.approx(mha.compute_s)


def test_tensor_parallel_share_scales_the_heads():
    """Half the heads on a device (tp = 2) move half the bytes and, 32 heads × 8 chunks filling 4 waves of 64
    cores, take half the compute: the share comes from the pass's FLOPs."""
    fmt = OpFormats("bf16", "bf16", "bf16", DEFAULT_FIDELITY["bf16"])
    op, _ = _attention(2048, 2048, True)
    t = OpTensors(0.0, op.in_elems, op.out_elems, op.cache_elems)
    whole = stream_op(N150, op, op.flops, t, False, fmt)
    half = stream_op(N150, op, op.flops / 2, t, False, fmt)
    assert half.dram_bytes == pytest.approx(whole.dram_bytes / 2)
    assert half.compute_s == pytest.approx(whole.compute_s / 2)
