"""The unfused attention's kernels over the score tensor on a GPU (``perf.score_kernels``): Megatron's causal softmax
reads only the lower triangle, and the batched GEMMs move their bytes at their own measured share of the bandwidth
(``Compute.attention_bmm_efficiency``). Expected bytes are counted here from what the kernels read and write
(megatron/fused_kernels/scaled_upper_triang_masked_softmax.h; QKᵀ, PV and their gradients), not taken from the
engine; the preset's share is re-derived from the FlashAttention paper's transcribed Table 13."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import DType, GPTSpec
from tilewright.engine.ir.compute import Compute
from tilewright.engine.ir.ops import AttentionBmm, Op, OpKind, TensorSplit
from tilewright.engine.ir.workload import BertSpec
from tilewright.engine.perf.device import DeviceModel, device_model
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.perf.score_kernels import runs_causal_kernel, triangular_softmax_traffic
from tilewright.engine.workloads.transformer import build_bert, build_gpt

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import calibrate_attention_a100 as ca  # noqa: E402

HEADS, SEQ, HEAD_DIM = 16, 2048, 64
SCORES = HEADS * SEQ * SEQ  # per sample
MB = 4


def _a100() -> DeviceModel:
    comp = next(c for _, c in load_system("dgx-a100").walk() if c.compute is not None)
    return device_model(comp.compute, comp.memories, None, DType.bf16)


def _with(dev: DeviceModel, **update: object) -> DeviceModel:
    return dataclasses.replace(dev, compute=dev.compute.model_copy(update=update))


def _softmax(triangular: bool) -> Op:
    return Op(name="0.softmax", layer=0, kind=OpKind.softmax, split=TensorSplit.heads, flops=0.0, in_elems=SCORES,
              out_elems=SCORES, saved_elems=SCORES, selective=True, causal_keys=SEQ if triangular else 0)


def _attention() -> Op:
    """An unfused attention op as a pass prices it: Q, K, V in and the two score passes of its forward (QKᵀ writes
    S, PV reads P) added to its input (``plan.costed_op``), the context out."""
    hidden = HEADS * HEAD_DIM
    qkv = 3 * SEQ * hidden
    return Op(name="0.attention", layer=0, kind=OpKind.attention, split=TensorSplit.heads,
              flops=4.0 * SEQ * SEQ * hidden, in_elems=qkv + 2 * SCORES, out_elems=SEQ * hidden, selective=True,
              bmm=AttentionBmm(heads=HEADS, queries=SEQ, keys=SEQ, qk_dim=HEAD_DIM, v_dim=HEAD_DIM))


def test_causal_softmax_forward_reads_half_and_writes_all():
    """Forward: the lower triangle of the scores read (½ of 2 B per element), every probability written (2 B)."""
    dev = _a100()
    t = op_time(_softmax(True), dev, MB, 1, False, False, 2.0)
    nbytes = MB * SCORES * (0.5 * 2 + 2)
    assert t.local_bytes == pytest.approx(nbytes)
    assert t.memory_s == pytest.approx(nbytes / dev.dram_bandwidth)


def test_causal_softmax_backward_reads_half_of_each_and_writes_all():
    """Backward: the lower triangle of the output gradient and of the saved probabilities, the whole input
    gradient (zeros past the diagonal included): 1 + 1 + 2 B per element, against 6 B for a full-row kernel."""
    dev = _a100()
    tri = op_time(_softmax(True), dev, MB, 1, False, True, 2.0)
    full = op_time(_softmax(False), dev, MB, 1, False, True, 2.0)
    assert tri.local_bytes == pytest.approx(MB * SCORES * (0.5 * 2 + 0.5 * 2 + 2))
    assert full.local_bytes == pytest.approx(MB * SCORES * 3 * 2)


def test_full_row_softmax_keeps_two_passes_forward():
    """A softmax over unmasked scores (or PyTorch's, reading whole rows) reads and writes every element."""
    t = op_time(_softmax(False), _a100(), MB, 1, False, False, 2.0)
    assert t.local_bytes == pytest.approx(MB * SCORES * 2 * 2)


def test_fused_causal_softmax_moves_nothing():
    """Inside a flash kernel the softmax stays on chip, causal or not."""
    for backward in (False, True):
        t = op_time(_softmax(True), _a100(), MB, 1, False, backward, 2.0, fused_in=True)
        assert t.local_bytes == 0.0


def test_grid_device_ignores_the_gpu_kernel():
    """A grid of cores (a Tenstorrent chip) runs its own softmax program: the flag changes nothing there."""
    comp = next(c for _, c in load_system("wormhole-n300").walk() if c.compute is not None)
    dev = device_model(comp.compute, comp.memories, None, DType.bf16)
    a, b = (op_time(_softmax(tri), dev, 1, 1, False, False, 2.0) for tri in (True, False))
    assert a.busy_s == pytest.approx(b.busy_s)


def test_builder_marks_causal_self_attention_only():
    """GPT's softmax is causal; BERT's is not; a sliding window is not Megatron's triangle kernel."""
    def softmax_of(graph):
        return next(o for o in graph.ops() if o.kind is OpKind.softmax)

    gpt = build_gpt(GPTSpec(name="g", layers=1, hidden=512, heads=8, seq_len=256, vocab=1024))
    assert softmax_of(gpt).causal_keys == 256
    windowed = build_gpt(GPTSpec(name="w", layers=1, hidden=512, heads=8, seq_len=256, vocab=1024, sliding_window=64))
    assert not softmax_of(windowed).causal_keys
    bert = build_bert(BertSpec(name="b", layers=1, hidden=512, heads=8, seq_len=256, vocab=1024))
    assert not softmax_of(bert).causal_keys


@pytest.mark.parametrize("backward", [False, True])
def test_batched_gemms_move_their_bytes_at_their_share(backward):
    """Forward: Q, K, V read, S written, P read, the context written; backward reads the (saved) input twice
    over — P for dV, dS for dQ and dK, Q, K, V — reads dO and writes dP, dQ, dK, dV. All of it at the preset's
    batched-GEMM share of the achievable bandwidth, where the plain rate was charged before."""
    dev = _a100()
    eff = dev.compute.attention_bmm_efficiency
    assert eff is not None and 0.5 < eff < 1.0
    qkv, out = 3 * SEQ * HEADS * HEAD_DIM, SEQ * HEADS * HEAD_DIM
    per_sample = (2 * (qkv + 2 * SCORES) + out) if backward else (qkv + 2 * SCORES + out)
    t = op_time(_attention(), dev, MB, 1, False, backward, 2.0)
    assert t.local_bytes == pytest.approx(MB * per_sample * 2)
    assert t.memory_s == pytest.approx(t.local_bytes / (dev.dram_bandwidth * eff))
    plain = op_time(_attention(), _with(dev, attention_bmm_efficiency=None), MB, 1, False, backward, 2.0)
    assert plain.memory_s == pytest.approx(t.local_bytes / dev.dram_bandwidth)


def test_weighted_gemms_keep_the_plain_rate():
    """The share is the batched attention GEMMs' alone: a projection's memory time is unchanged by it."""
    dev = _a100()
    op = Op(name="0.qkv", layer=0, kind=OpKind.matmul, split=TensorSplit.column, flops=2.0 * 8 * 64 * 64,
            params=64 * 64, in_elems=8 * 64, out_elems=8 * 64, gemm=(8, 64, 64))
    a = op_time(op, dev, 1, 1, False, False, 2.0)
    b = op_time(op, _with(dev, attention_bmm_efficiency=None), 1, 1, False, False, 2.0)
    assert a.memory_s == pytest.approx(b.memory_s)


def test_new_fields_are_quiet():
    """Both new fields are left out of saved files at their defaults, so old projects save back unchanged."""
    assert "attention_bmm_efficiency" not in Compute(peak_flops={"fp16": 1e12}).model_dump(mode="json")
    assert "causal_keys" not in _softmax(False).model_dump(mode="json")


def test_preset_share_is_table_13_less_the_softmax_backward():
    """Re-derived by hand from the transcribed Table 13 (Megatron backward with its fused softmax, 2,048 tokens,
    A100-40GB): the softmax backward's 3 plain passes over the 16 × 8 × s² fp16 scores leave the rest to the four
    gradient GEMMs, whose bytes (4 score passes, Q, K, V twice, dO) at the plain rate over that time is the share.
    (The GEMMs' fixed fills, ~0.03 ms, are left in: within the tolerance.)"""
    seq = 2048
    dev = ca.device()
    bw = dev.dram_bandwidth
    scores = ca.BATCH * ca.HEADS * seq * seq * ca.ELEM_BYTES
    tokens = ca.BATCH * seq * ca.HEADS * ca.HEAD_DIM * ca.ELEM_BYTES
    softmax_s = 3 * scores / bw
    gemm_bytes = 4 * scores + 2 * 3 * tokens + tokens
    measured_s = ca.MEGATRON_MS[(True, True)][ca.MEGATRON_SEQS.index(seq)] * 1e-3
    share = gemm_bytes / bw / (measured_s - softmax_s)
    assert dev.compute.attention_bmm_efficiency == pytest.approx(share, abs=0.015)
    assert ca.implied_bmm_share(seq, dev) == pytest.approx(share, abs=0.015)


@pytest.mark.parametrize("seq", ca.COMPARED)
def test_pytorch_softmax_is_what_stays_slow(seq):
    """With the GEMMs at their share, what the PyTorch rows leave for their softmax is slower than the plain rate
    (its block kernel beyond 1,024 columns) — forward and backward — and the backward slower than the forward."""
    shares = ca.softmax_shares(seq, ca.device())
    assert 0.3 < shares["torch bwd"] < shares["torch fwd"] < 1.0


@pytest.mark.parametrize(("framework", "keys", "elem_bytes", "runs"), [
    ("megatron-lm", 2048, 2, True), ("megatron-lm", 4096, 2, False),  # v2.x: 16 < sk <= 2048
    ("megatron-deepspeed", 2048, 2, True), ("mcore-te", 4096, 2, True), ("mcore", 8192, 2, False),
    ("megatron-lm", 1024, 4, False),  # fp32 scores: the fallback
    ("pytorch", 1024, 2, False), ("pytorch-compile", 1024, 2, False),  # PyTorch's softmax reads whole rows
])
def test_the_causal_kernel_runs_only_where_the_framework_would_run_it(framework, keys, elem_bytes, runs):
    assert runs_causal_kernel(framework, keys, elem_bytes) is runs


@pytest.mark.parametrize("backward", [False, True])
def test_a_fused_neighbour_keeps_on_chip_only_the_share_the_triangle_counted(backward):
    """Forward with the output fused (softmax → dropout): half the scores read, nothing written. Backward with
    the output gradient arriving on chip: half the saved probabilities read, every input gradient written."""
    fused = (False, True)
    got = triangular_softmax_traffic(SCORES, SCORES, backward, fused)
    assert got == pytest.approx((0.5 + 1.0) * SCORES if backward else 0.5 * SCORES)
    assert triangular_softmax_traffic(SCORES, SCORES, backward) == pytest.approx((2.0 if backward else 1.5) * SCORES)


def test_memory_levels_keep_the_triangle():
    """Naming the memory a GPU already uses changes nothing: the softmax pays the same bytes with residency."""
    from tilewright.engine.perf.residency import Residency

    dev = _a100()
    plain = op_time(_softmax(True), dev, MB, 1, False, True, 2.0)
    placed = op_time(_softmax(True), dev, MB, 1, False, True, 2.0, residency=Residency())
    assert placed.local_bytes == pytest.approx(plain.local_bytes, rel=1e-12)


def test_a_decode_steps_batched_gemvs_over_the_kv_cache_keep_the_plain_rate():
    """The share was measured on GEMMs over the s × s scores; a decode step's QKᵀ and PV read the KV cache
    (``cache_elems``), another kernel: the device's share leaves it unchanged, while it slows the training op."""
    dev = _a100()
    plain = _with(dev, attention_bmm_efficiency=None)
    decode = _attention().model_copy(update={"cache_elems": 2 * SEQ * HEADS * HEAD_DIM})
    assert op_time(decode, dev, MB, 1, False, False, 2.0).memory_s == pytest.approx(
        op_time(decode, plain, MB, 1, False, False, 2.0).memory_s, rel=1e-12)
    assert op_time(_attention(), dev, MB, 1, False, False, 2.0).memory_s > op_time(
        _attention(), plain, MB, 1, False, False, 2.0).memory_s
