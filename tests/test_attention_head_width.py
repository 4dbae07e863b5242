"""An unfused attention's batched GEMMs and the width of the head they reduce over: the wider the head, the more
FLOPs per score byte (2·d per score QKᵀ writes), yet xformers' A100 runs of the plain PyTorch attention
(``benchmarks/calibrate_attention_a100.py``, ``XFORMERS_FWD_US``) move their bytes at one rate from d = 16 to 128.
The engine keeps the GEMMs' bytes at their measured rate with the FLOPs under the max: the head enters only through
the Q, K, V and output bytes. Bytes are counted here from the kernels' reads and writes, not taken from the engine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import DType
from tilewright.engine.ir.ops import AttentionBmm, Op, OpKind, TensorSplit
from tilewright.engine.perf.device import DeviceModel, device_model
from tilewright.engine.perf.op_cost import op_time

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import calibrate_attention_a100 as ca  # noqa: E402

PRODUCTS, TOKENS = ca.XFORMERS_PRODUCTS, ca.XFORMERS_SEQ


def _ref_attention_bytes(head_dim: int) -> float:
    """xformers' ``ref_attention`` forward, kernel by kernel (fp16): the scale reads and writes q; QKᵀ reads q, k
    and writes S; the softmax reads S and writes P; PV reads P, v and writes the output."""
    scores, rows = PRODUCTS * TOKENS * TOKENS, PRODUCTS * TOKENS * head_dim
    return 2.0 * ((2 * rows) + (2 * rows + scores) + (2 * scores) + (scores + 2 * rows))


def test_the_measured_time_is_the_bytes_at_one_rate_whatever_the_head():
    """Each row's bytes over its time is one rate (within 1 %) from d = 16 to 128, and the growth from d = 16 is its
    added bytes at d = 16's rate, leaving no room for the added FLOPs (4 · B · M² · Δd at 0.8 of the 312 TFLOP/s
    peak), which a cost of bytes plus FLOPs would charge on top."""
    rates = {k: _ref_attention_bytes(k) / (us * 1e-6) for k, us in ca.XFORMERS_FWD_US.items()}
    assert max(rates.values()) / min(rates.values()) < 1.01
    grown = (ca.XFORMERS_FWD_US[128] - ca.XFORMERS_FWD_US[16]) * 1e-6
    by_bytes = (_ref_attention_bytes(128) - _ref_attention_bytes(16)) / rates[16]
    by_flops = 4.0 * PRODUCTS * TOKENS * TOKENS * (128 - 16) / (0.8 * 312e12)
    assert grown == pytest.approx(by_bytes, rel=0.02)
    assert grown < by_bytes + 0.1 * by_flops


def test_the_benchmark_counts_the_same_bytes():
    for k in ca.XFORMERS_FWD_US:
        assert ca.vanilla_bytes(TOKENS, k) == pytest.approx(_ref_attention_bytes(k))


@pytest.mark.parametrize("head_dim", sorted(ca.XFORMERS_FWD_US))
def test_priced_rows_and_their_growth_follow_the_measured(head_dim):
    """Our price of each row (attention op, whole-row softmax, the scale's pass) is near the measured one, and its
    growth from the narrowest head is the measured growth."""
    dev = ca.device()
    ours = ca.vanilla_forward_us(TOKENS, head_dim, dev)
    assert ours == pytest.approx(ca.XFORMERS_FWD_US[head_dim], rel=ca.HEAD_DIM_LIMIT)
    narrow = min(ca.XFORMERS_FWD_US)
    assert ours / ca.vanilla_forward_us(TOKENS, narrow, dev) == pytest.approx(
        ca.XFORMERS_FWD_US[head_dim] / ca.XFORMERS_FWD_US[narrow], rel=ca.HEAD_DIM_GROWTH_LIMIT)


def _a100() -> DeviceModel:
    comp = next(c for _, c in load_system("dgx-a100").walk() if c.compute is not None)
    return device_model(comp.compute, comp.memories, None, DType.bf16)


def _megatron_attention(head_dim: int, heads: int = 16, seq: int = 2048) -> Op:
    """Megatron's unfused attention as a pass prices it: Q, K, V in with the forward's two score passes (QKᵀ
    writes S, PV reads P), the context out."""
    hidden, scores = heads * head_dim, heads * seq * seq
    return Op(name="0.attention", layer=0, kind=OpKind.attention, split=TensorSplit.heads,
              flops=4.0 * seq * seq * hidden, in_elems=3 * seq * hidden + 2 * scores, out_elems=seq * hidden,
              selective=True, bmm=AttentionBmm(heads=heads, queries=seq, keys=seq, qk_dim=head_dim, v_dim=head_dim))


@pytest.mark.parametrize("backward", [False, True])
def test_a_wider_head_costs_megatron_only_its_bytes(backward):
    """At 2,048 tokens on the dgx-a100 preset, widening the heads from 64 to 96 and 128 (the SC'21 models' widths)
    adds only the Q, K, V and context bytes (and backward their gradients') at the GEMMs' rate:
    the FLOPs stay under the max, and each kernel's fill (its t0 on the efficiency curve, sampled per decade of
    FLOPs) moves by less than a microsecond."""
    dev, mb, heads, seq = _a100(), 4, 16, 2048
    rate = dev.dram_bandwidth * dev.compute.attention_bmm_efficiency
    base = op_time(_megatron_attention(64), dev, mb, 1, False, backward, 2.0)
    for head_dim in (96, 128):
        t = op_time(_megatron_attention(head_dim), dev, mb, 1, False, backward, 2.0)
        assert t.compute_s < t.memory_s
        rows = mb * seq * heads * (head_dim - 64)  # elements added to each of Q, K, V and the context
        # forward: Q, K, V read, the context written; backward: Q, K, V read and their gradients written, the
        # context's gradient read (the accounting ``test_score_kernels`` spells out)
        added = (2 * 3 * rows + rows if backward else 3 * rows + rows) * 2.0
        assert t.memory_s - base.memory_s == pytest.approx(added / rate, rel=1e-9)
        kernels = 4 if backward else 2  # QKᵀ and PV; their four gradient GEMMs
        assert t.busy_s - base.busy_s == pytest.approx(added / rate, abs=kernels * 1e-6)
