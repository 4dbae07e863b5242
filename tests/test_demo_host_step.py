"""What tt-transformers' demo reads back per timed decode iteration, and the host step the Tenstorrent presets
charge for it (``Compute.runtime_step_s``): benchmarks/calibrate_tiled_llm.py derives the bytes from the demo's
code (a token per tile-padded row from each device when the argmax runs on the device, device 0's logits when
the host samples); these checks redo that arithmetic by hand and hold each preset's value to the figure its
comment states."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from tilewright.engine.io.presets import load_system

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from calibrate_tiled_llm import (  # noqa: E402
    CONFIGS,
    HOST_READ_BPS,
    demo_readback_bytes,
    readback_rows,
)

LLAMA3_VOCAB = 128256  # meta-llama Llama 3.x config.json
TENSTORRENT = ("wormhole-n150", "wormhole-n300", "wormhole-t3000", "wormhole-galaxy", "blackhole-p150",
               "blackhole-galaxy")


def test_with_the_argmax_on_the_device_a_token_per_padded_row_comes_back_from_each_device():
    """Batch 1 fills one row of a 32-row tile; ttnn.argmax leaves a uint32 per row, and the demo reads every
    device's copy: 32 x 4 B per device, whatever the vocabulary."""
    assert demo_readback_bytes(1, LLAMA3_VOCAB, 1) == 32 * 4
    assert demo_readback_bytes(1, LLAMA3_VOCAB, 8) == 8 * 32 * 4
    assert demo_readback_bytes(1, 50257, 2) == demo_readback_bytes(1, LLAMA3_VOCAB, 2)


def test_when_the_host_samples_it_reads_device_0s_tile_padded_logits_in_bf16():
    """Batch 32 and batch 8 both fill one 32-row tile: 32 x 128256 x 2 B = 8,208,384 B, however many devices
    (the logits are all-gathered, device 0's copy is read); a vocabulary off the tile grid is padded to it."""
    assert demo_readback_bytes(32, LLAMA3_VOCAB, 1) == 32 * 128256 * 2 == 8_208_384
    assert demo_readback_bytes(8, LLAMA3_VOCAB, 8) == 8_208_384
    assert demo_readback_bytes(33, LLAMA3_VOCAB, 1) == 64 * 128256 * 2
    assert demo_readback_bytes(32, 50257, 1) == 32 * 50272 * 2  # 50257 -> 1571 tiles of 32


def test_each_perf_row_is_listed_with_its_readback_time_and_the_presets_host_step():
    """Every configuration published in PERF.md appears once; the transfer time is bytes over the slower host
    read rate (2.5 GB/s: the 8.2 MB of logits take 3.28 ms), the step is the preset's runtime_step_s, and at
    batch > 1 the engine charges the same read per decode step (``host_sampling_s``)."""
    rows = readback_rows()
    perf = [c for c in CONFIGS if c.published is not None and "PERF" in c.published.sources]
    assert [r[0] for r in rows] == perf
    slow_bps = min(HOST_READ_BPS)
    for c, p, nbytes, transfer, step, host in rows:
        assert nbytes == demo_readback_bytes(c.batch, p.workload.vocab, p.mapping.tp)
        assert transfer == pytest.approx(nbytes / slow_bps)
        chip = next(ch for ch in p.hardware.children if ch.compute is not None)
        assert step == chip.compute.runtime_step_s
        if c.batch == 1:
            # a few hundred bytes: the host step is the round trip, not the transfer (< 1 % of it)
            assert transfer < 0.01 * step
            assert host == 0.0  # the argmax ran on the device: the engine charges no logits' read
        else:
            assert transfer == pytest.approx(8_208_384 / 2.5e9)
            # the engine charges the logits' read at the Wormhole board's rate, the same 2.5 GB/s
            assert host == pytest.approx(transfer, rel=1e-12)


@pytest.mark.parametrize("name", TENSTORRENT)
def test_the_host_step_is_the_one_its_comment_derives(name):
    """The preset's comment states runtime_step_s in ms with the demo's timer as its source; the field holds
    that figure."""
    chip = next(ch for ch in load_system(name).children if ch.compute is not None)
    comment = chip.compute.comment
    stated = re.search(r"runtime_step_s (\d+(?:\.\d+)?) ms", comment)
    assert stated is not None
    assert chip.compute.runtime_step_s == pytest.approx(float(stated.group(1)) * 1e-3)
    assert "simple_text_demo.py" in comment and "#26033" in comment
