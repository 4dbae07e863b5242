"""Dropout's traffic and rate on a GPU (``perf.dropout``): the 1-byte keep mask written forward and read backward in
place of the input, and the forward's Philox rate (``Compute.dropout_forward_efficiency``), checked against the
FlashAttention paper's measured standard attention on A100 (``benchmarks/calibrate_attention_a100.py``). Expected
bytes are counted here from what PyTorch's dropout kernels read and write, not taken from the engine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import DType
from tilewright.engine.ir.compute import Compute
from tilewright.engine.ir.ops import Op, OpKind, TensorSplit
from tilewright.engine.perf.device import DeviceModel, device_model
from tilewright.engine.perf.op_cost import op_time

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import calibrate_attention_a100 as ca  # noqa: E402

ELEMS = 64 * 1024 * 1024  # large enough that the stream ramp is a rounding error
MB = 4


def _a100() -> DeviceModel:
    comp = next(c for _, c in load_system("dgx-a100").walk() if c.compute is not None)
    return device_model(comp.compute, comp.memories, None, DType.bf16)


def _dropout(selective: bool = False) -> Op:
    return Op(name="0.attention_dropout" if selective else "0.dropout1", layer=0, kind=OpKind.dropout,
              split=TensorSplit.replicated, flops=0.0, in_elems=ELEMS, out_elems=ELEMS, saved_bytes_fixed=ELEMS,
              saved_elems=ELEMS if selective else 0, selective=selective)


def test_forward_writes_the_mask_at_the_philox_rate():
    """Forward: read x (2 B), write y (2 B) and the bool mask (1 B) per element, streamed at the preset's dropout
    share of the achievable bandwidth."""
    dev = _a100()
    t = op_time(_dropout(), dev, MB, 1, False, False, 2.0)
    nbytes = MB * ELEMS * (2 + 2 + 1)
    assert t.local_bytes == pytest.approx(nbytes)
    eff = dev.compute.dropout_forward_efficiency
    assert eff is not None and 0.5 < eff < 1.0
    assert t.memory_s == pytest.approx(nbytes / (dev.dram_bandwidth * eff))


def test_backward_reads_the_mask_not_the_input():
    """Backward (``masked_scale``): read dy (2 B) and the mask (1 B), write dx (2 B) — 5 B per element at the plain
    rate, where the generic backward would read the saved input too (6 B)."""
    dev = _a100()
    t = op_time(_dropout(), dev, MB, 1, False, True, 2.0)
    nbytes = MB * ELEMS * (2 + 1 + 2)
    assert t.local_bytes == pytest.approx(nbytes)
    assert t.memory_s == pytest.approx(nbytes / dev.dram_bandwidth)


def test_mask_is_one_byte_whatever_the_format():
    """In fp32 the activations double, the mask stays one byte: 4 + 4 + 1 forward."""
    dev = _a100()
    t = op_time(_dropout(), dev, 1, 1, False, False, 4.0)
    assert t.local_bytes == pytest.approx(ELEMS * 9)


def test_fused_attention_dropout_moves_nothing():
    """Inside a fused (flash) attention kernel the dropout regenerates its mask on chip: no bytes either way."""
    dev = _a100()
    for backward in (False, True):
        t = op_time(_dropout(selective=True), dev, MB, 1, False, backward, 2.0, fused_in=True)
        assert t.local_bytes == 0.0


def test_without_a_rate_the_forward_streams_at_the_plain_rate():
    """A device that gives no dropout rate streams the dropout forward like any memory-bound kernel."""
    dev = _a100()
    plain = DeviceModel(**{**dev.__dict__, "compute": dev.compute.model_copy(
        update={"dropout_forward_efficiency": None})})
    t = op_time(_dropout(), plain, MB, 1, False, False, 2.0)
    assert t.memory_s == pytest.approx(MB * ELEMS * 5 / dev.dram_bandwidth)


def test_rate_field_is_quiet():
    """The new field is left out of saved files at its default, so old projects save back unchanged."""
    assert "dropout_forward_efficiency" not in Compute(peak_flops={"fp16": 1e12}).model_dump(mode="json")


def test_preset_rate_is_the_papers_forward_over_backward():
    """The preset's 0.875 is the forward dropout share's rate over the backward's in the transcribed tables (both
    move 5 B per score element): derived here from the tables, not read from the preset's comment."""
    ratios = []
    for seq in ca.COMPARED:
        fwd = ca.measured(seq, True, False) - ca.measured(seq, False, False)
        bwd = ca.measured(seq, True, True) - ca.measured(seq, False, True)
        ratios.append(bwd / fwd)  # same bytes: rate ratio = inverse time ratio
    assert _a100().compute.dropout_forward_efficiency == pytest.approx(sum(ratios) / len(ratios), abs=0.01)


def test_transcription_is_consistent():
    """Each table grows with the sequence from 1,024 tokens on (about 4x per doubling: s² work), dropout adds time,
    and a backward takes longer than its forward."""
    for key, row in ca.MEASURED_MS.items():
        assert len(row) == len(ca.SEQS), key
        for a, b in zip(row[3:], row[4:], strict=False):
            assert 3.0 < b / a < 4.5, key
    for key, row in ca.MEGATRON_MS.items():
        assert len(row) == len(ca.MEGATRON_SEQS), key
    for i, seq in enumerate(ca.SEQS):
        if seq >= 512:
            for backward in (False, True):
                assert ca.MEASURED_MS[(True, backward)][i] > ca.MEASURED_MS[(False, backward)][i]
            for dropout in (False, True):
                assert ca.MEASURED_MS[(dropout, True)][i] > ca.MEASURED_MS[(dropout, False)][i]


@pytest.mark.parametrize("seq", ca.COMPARED)
def test_dropout_share_matches_the_paper(seq):
    """The dropout's share of the measured attention (runs with dropout less runs without), forward and backward,
    is priced within the benchmark's limit. The backward is independent of the preset's rate (it streams at the
    plain rate); before the mask was charged it was 22 % slow, the forward 28 % fast."""
    p = ca.price(seq, ca.device())
    for err in ca.dropout_errors(p):
        assert abs(err) <= ca.DROPOUT_LIMIT


@pytest.mark.parametrize("seq", ca.COMPARED)
def test_rest_of_the_core_is_priced_fast_within_the_floor(seq):
    """The batched GEMMs and PyTorch's softmax without dropout are priced fast of the paper (22-35 % when written):
    a known, reported gap. A change that prices them slower than measured, or much faster, fails."""
    p = ca.price(seq, ca.device())
    for err in ca.core_errors(p):
        assert ca.CORE_FLOOR <= err < 0.0
