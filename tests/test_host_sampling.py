"""The host's read of the logits after a Tenstorrent decode step of more than one sequence
(``Compute.runtime_host_read_bytes_per_s``, ``plan.inference_phases.host_sampling_s``).

tt-transformers takes the argmax on the device only at batch 1; for a larger batch its timed decode iteration
reads device 0's untilized, all-gathered logits (the sequences' rows padded to a 32-row tile × the vocabulary, in
bf16) back with a blocking copy and samples them on the host while the device waits. The tests size that read by
hand from the demo's tensor shapes and the preset's read rate, and check that ``run`` (both engines) and the
serving cost model charge it once per decode step, only at batch > 1, and only where the runtime samples.
"""

from __future__ import annotations

import re

import pytest
from tilewright.engine.io.presets import load_project_preset, load_system
from tilewright.engine.ir.project import Project
from tilewright.engine.plan.inference_phases import host_sampling_s
from tilewright.engine.serving.cost_model import IterationCostModel, Work, decode
from tilewright.engine.simulate import make_plan, simulate

N150 = "wormhole-n150-llama2-7b-inference"  # Llama 2: vocabulary 32,000
N300 = "wormhole-n300-llama3.1-8b-inference"  # Llama 3.1: vocabulary 128,256
LLAMA3_VOCAB = 128256
TILE = 32
BF16 = 2
OUTPUTS = 4


def configured(name: str, batch: int, rate: float | None = -1.0, sampling: bool | None = None) -> Project:
    """The preset at ``batch`` sequences, a short generation; ``rate`` replaces the read rate (None: unset),
    ``sampling`` the on-device sampling switch."""
    p = load_project_preset(name).model_copy(deep=True)
    inf = p.run.inference.model_copy(update={"batch": batch, "prompt_tokens": 64, "output_tokens": OUTPUTS})
    p.run = p.run.model_copy(update={"inference": inf})
    for c in _walk(p.hardware):
        if c.compute is not None:
            if rate is None or rate > 0:
                c.compute.runtime_host_read_bytes_per_s = rate
            if sampling is not None:
                c.compute.runtime_sampling = sampling
    return p


def _walk(c):
    yield c
    for child in c.children:
        yield from _walk(child)


def _compute(p: Project):
    return next(c.compute for c in _walk(p.hardware) if c.compute is not None)


def test_the_wormhole_boards_read_at_the_rate_their_comment_cites():
    """n150, n300 and T3000 (the boards of PERF.md's batch-32 table) carry the FD2 read rate their comment
    states with its source; the comment names the demo code that samples on the host."""
    for name in ("wormhole-n150", "wormhole-n300", "wormhole-t3000"):
        compute = next(ch for ch in load_system(name).children if ch.compute is not None).compute
        stated = re.search(r"runtime_host_read_bytes_per_s (\d+(?:\.\d+)?) GB/s", compute.comment)
        assert stated is not None, name
        assert compute.runtime_host_read_bytes_per_s == pytest.approx(float(stated.group(1)) * 1e9)
        assert "#8098" in compute.comment and "read_decode_output" in compute.comment
        assert compute.runtime_sampling  # the read follows the on-device tail's untilize


def test_a_batch_of_32_reads_one_tile_of_rows_of_the_whole_vocabulary():
    """32 rows × 128,256 × 2 B = 8,208,384 B at 2.5 GB/s: 3.28 ms, on one chip or two (device 0's gathered
    copy is read); batch 8 still fills the 32-row tile; batch 33 needs two tiles; a vocabulary off the tile grid
    is padded to it; one sequence is sampled on the device and reads nothing."""
    compute = _compute(configured(N300, 32))
    rate = compute.runtime_host_read_bytes_per_s
    assert rate == pytest.approx(2.5e9)
    assert host_sampling_s(compute, LLAMA3_VOCAB, 32) == pytest.approx(8_208_384 / 2.5e9, rel=1e-12)
    assert host_sampling_s(compute, LLAMA3_VOCAB, 32) == pytest.approx(3.283e-3, rel=1e-3)
    assert host_sampling_s(compute, LLAMA3_VOCAB, 8) == host_sampling_s(compute, LLAMA3_VOCAB, 32)
    assert host_sampling_s(compute, LLAMA3_VOCAB, 33) == pytest.approx(64 * LLAMA3_VOCAB * BF16 / rate)
    assert host_sampling_s(compute, 50257, 32) == pytest.approx(32 * 50272 * BF16 / rate)  # 1571 tiles of 32
    assert host_sampling_s(compute, LLAMA3_VOCAB, 1) == 0.0


def test_no_rate_or_no_runtime_sampling_means_no_read():
    assert host_sampling_s(_compute(configured(N300, 32, rate=None)), LLAMA3_VOCAB, 32) == 0.0
    assert host_sampling_s(_compute(configured(N300, 32, sampling=False)), LLAMA3_VOCAB, 32) == 0.0
    gpu = _compute(load_project_preset("llama2-70b-h100-inference"))
    assert gpu.runtime_host_read_bytes_per_s is None
    assert host_sampling_s(gpu, LLAMA3_VOCAB, 32) == 0.0


@pytest.mark.parametrize("engine", ["analytic", "event"])
@pytest.mark.parametrize(("name", "vocab"), [(N150, 32000), (N300, LLAMA3_VOCAB)])
def test_each_decode_step_waits_for_the_read_in_both_engines(engine, name, vocab):
    """At batch 32 every decode step grows by the read (TPOT by one read, the request by one per decode step,
    reported as host wait); the prefill and TTFT do not change."""
    read = TILE * vocab * BF16 / 2.5e9
    base, slow = (configured(name, 32, rate=r) for r in (None, 2.5e9))
    for p in (base, slow):
        p.run.engine = engine
    a, b = (simulate(p, series=False).metrics_json() for p in (base, slow))
    assert b["tpot_s"] - a["tpot_s"] == pytest.approx(read, rel=1e-6)
    assert b["ttft_s"] == pytest.approx(a["ttft_s"], rel=1e-12)
    steps = OUTPUTS - 1
    assert b["e2e_s"] - a["e2e_s"] == pytest.approx(steps * read, rel=1e-6)
    waited = b["time_breakdown_s"]["host_wait"] - a["time_breakdown_s"]["host_wait"]
    assert waited == pytest.approx(steps * read, rel=1e-6)


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_batch_1_is_unchanged(engine):
    """One sequence: the argmax runs on the device and only its token comes back (the runtime's fixed step)."""
    base, rated = configured(N300, 1, rate=None), configured(N300, 1, rate=2.5e9)
    for p in (base, rated):
        p.run.engine = engine
    assert simulate(rated, series=False).tpot_s == simulate(base, series=False).tpot_s


def test_the_serving_cost_model_charges_a_decode_iteration_as_run_does():
    """The serving simulator's decode iteration of 32 sequences pays the same read, once; of one sequence, none;
    a prefill iteration (logits of the prompt's last token, sampled as in the demo's prefill) is not a decode
    step and is not charged here."""
    read = TILE * LLAMA3_VOCAB * BF16 / 2.5e9
    base = IterationCostModel(make_plan(configured(N300, 32, rate=None)), 256)
    rated = IterationCostModel(make_plan(configured(N300, 32, rate=2.5e9)), 256)
    batch = [decode(100)] * 32
    assert rated.iteration_seconds(batch) - base.iteration_seconds(batch) == pytest.approx(read, rel=1e-9)
    assert rated.iteration_seconds([decode(100)]) == base.iteration_seconds([decode(100)])
    prompts = [Work(64, 64, 1)] * 2
    assert rated.iteration_seconds(prompts) == base.iteration_seconds(prompts)
