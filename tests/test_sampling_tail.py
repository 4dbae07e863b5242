"""The on-device sampling tail of a Tenstorrent decode step (``Compute.runtime_sampling``).

tt-transformers ends each traced decode step with an all-gather of the vocabulary-split logits (multi-chip
boards), ``ttnn.untilize`` of the tile-padded logits and, at batch 1, ``ttnn.argmax`` and the next step's index
updates (``workloads.transformer_inference.sampling_ops``). The tests derive the tail's bytes and time from the
preset's datasheet numbers by hand, check that both engines see it, and that a device without the switch (every
GPU preset) runs exactly the decode step it ran before.
"""

from __future__ import annotations

import math

import pytest
from tilewright.engine.io.presets import load_project_preset
from tilewright.engine.ir.project import Project
from tilewright.engine.plan.inference_phases import inference_phases
from tilewright.engine.simulate import make_plan, simulate

N150 = "wormhole-n150-llama2-7b-inference"
N300 = "wormhole-n300-llama3.1-8b-inference"
GALAXY = "wormhole-galaxy-llama3-70b-inference"
GPU = "llama2-70b-h100-inference"


def configured(name: str, batch: int = 1, sampling: bool | None = None) -> Project:
    p = load_project_preset(name).model_copy(deep=True)
    inf = p.run.inference.model_copy(update={"batch": batch, "prompt_tokens": 64, "output_tokens": 4})
    p.run = p.run.model_copy(update={"inference": inf})
    if sampling is not None:
        for c in _walk(p.hardware):
            if c.compute is not None:
                c.compute.runtime_sampling = sampling
    return p


def _walk(c):
    yield c
    for child in c.children:
        yield from _walk(child)


def decode_step(p: Project):
    """The middle decode step's pass on the last stage (which holds the head) and its plan."""
    plan = make_plan(p)
    ph = inference_phases(plan)
    return plan, ph.samples[sorted(ph.samples)[len(ph.samples) // 2]][-1]


def test_the_presets_sample_on_the_device_and_gpus_do_not():
    for name in (N150, N300, GALAXY, "blackhole-p150-llama3.1-8b-inference", "wormhole-t3000-llama2-70b-inference"):
        assert load_project_preset(name).hardware.children[0].compute.runtime_sampling, name
    gpu = [c for c in _walk(load_project_preset(GPU).hardware) if c.compute is not None]
    assert gpu and not any(c.compute.runtime_sampling for c in gpu)


def test_untilize_argmax_and_updates_cost_their_bytes_by_hand_on_an_n150():
    """Llama 2 7B on one n150 at batch 1: the logits [1, 1, 32, 32000] (one user padded to a 32-row tile) in bf16.
    untilize reads and writes them in DRAM; argmax reads them and compares every element on the vector units;
    the updates touch three values. Each op pays the grid's fixed cost once per device program (8 for the
    updates), one DRAM round trip, and the larger of its arithmetic and its bytes over the achievable
    interleaved DRAM bandwidth (never faster than the cores in use can each move)."""
    on, off = configured(N150, sampling=True), configured(N150, sampling=False)
    chip = on.hardware.children[0]
    comp, g, mem = chip.compute, chip.compute.grid, chip.memories[0]
    vocab, rows, elem = on.workload.vocab, 32, 2.0
    assert vocab == 32000 and on.run.dtype.value == "bf16"
    logits = rows * vocab * elem  # bytes of the padded logits
    read_bw = mem.bandwidth_bytes_per_s * (mem.efficiency_interleaved_read or mem.efficiency)
    write_bw = mem.bandwidth_bytes_per_s * (mem.efficiency_interleaved_write or mem.efficiency)
    cores = g.rows * g.cols  # 1000 tiles of 32 × 32: every core takes some
    per_core_read = cores * g.movement.dram_read * g.clock_hz
    per_core_write = cores * g.movement.dram_write * g.clock_hz
    latency = g.movement.dram_latency_cycles / g.clock_hz

    def read_s(b: float) -> float:
        return max(b / read_bw, b / per_core_read)

    def write_s(b: float) -> float:
        return max(b / write_bw, b / per_core_write)

    untilize = comp.fixed_op_s + latency + read_s(logits) + write_s(logits)
    compares = rows * vocab / (cores * g.vector_flops_per_cycle * g.clock_hz)
    argmax = comp.fixed_op_s + latency + max(compares, read_s(logits) + write_s(rows * elem))
    tiny = 3 * elem  # one tile: one core moves it
    one_core = max(tiny / read_bw, tiny / (g.movement.dram_read * g.clock_hz)) + max(
        tiny / write_bw, tiny / (g.movement.dram_write * g.clock_hz))
    updates = 8 * comp.fixed_op_s + latency + one_core
    assert comp.programs_by_op["sample_update"] == 8
    _, step_on = decode_step(on)
    _, step_off = decode_step(off)
    added_bytes = sum(s.local_bytes for s in step_on.segments) - sum(s.local_bytes for s in step_off.segments)
    assert added_bytes == pytest.approx(3 * logits + rows * elem + 2 * tiny, rel=1e-9)
    assert step_on.busy_s - step_off.busy_s == pytest.approx(untilize + argmax + updates, rel=1e-6)
    assert 50e-6 < untilize + argmax + updates < 1e-3  # tens of µs of DRAM traffic, not milliseconds
    assert not any(s.comm for s in step_on.segments)  # one chip: nothing to gather


def test_a_multi_chip_board_gathers_the_whole_vocabulary_before_untilizing():
    """n300 (tp 2): one all-gather of the padded logits, 32 rows × 128,256 × 2 bytes in the whole tensor, after
    the vocab-split LM head; its time is the collectives model's for that kind and size on the board."""
    p = configured(N300)
    plan, step = decode_step(p)
    gathers = [s.comm for s in step.segments if s.comm and s.comm[0].endswith("all-gather")]
    assert gathers == [("all-gather", 32 * 128256 * 2.0)]
    assert plan.tp_time(0, 0, *gathers[0]) > 0


def test_the_galaxy_gathers_along_one_axis_of_its_mesh():
    plan, step = decode_step(configured(GALAXY))
    gathers = [s.comm for s in step.segments if s.comm and s.comm[0].endswith("all-gather")]
    # the logits' gather after the vocab-split LM head, along the mesh's rows (the layers' own gathers of the
    # project's scatter-gather structure come before it, each along one axis too)
    assert gathers[-1] == ("tp-row:all-gather", 32 * 128256 * 2.0)
    assert all(kind.startswith(("tp-row:", "tp-col:")) for kind, _ in gathers)


def test_at_batch_32_the_host_samples_only_the_gather_and_untilize_stay():
    """The demos take the argmax on the device at batch 1 only: a batch of 32 fills the 32-row tile exactly,
    untilize moves it, no argmax or index update runs on the device."""
    on, off = configured(N150, batch=32, sampling=True), configured(N150, batch=32, sampling=False)
    _, a = decode_step(on)
    _, b = decode_step(off)
    added = sum(s.local_bytes for s in a.segments) - sum(s.local_bytes for s in b.segments)
    assert added == pytest.approx(2 * 32 * 32000 * 2.0, rel=1e-9)


@pytest.mark.parametrize("name", [N150, N300])
def test_both_engines_time_the_tail_alike(name):
    results = {}
    for engine in ("analytic", "event"):
        for sampling in (False, True):
            p = configured(name, sampling=sampling)
            p.run.engine = engine
            results[engine, sampling] = simulate(p, series=False).tpot_s
    added = {e: results[e, True] - results[e, False] for e in ("analytic", "event")}
    assert added["analytic"] > 0
    assert added["event"] == pytest.approx(added["analytic"], rel=1e-6)


def test_a_gpu_decode_step_is_unchanged_by_the_switch_being_off():
    """A GPU preset leaves it off: its decode step has no gather and costs what it did; switched on, the same
    device would pay the tail (the switch decides, not the kind of device)."""
    _, step = decode_step(configured(GPU))
    assert not any(s.comm and s.comm[0].endswith("all-gather") for s in step.segments)
    _, step_off = decode_step(configured(GPU, sampling=False))
    assert step.busy_s == step_off.busy_s
    _, step_on = decode_step(configured(GPU, sampling=True))
    assert math.isfinite(step_on.busy_s) and step_on.busy_s > step.busy_s


@pytest.mark.parametrize("name", [N300])
def test_serving_at_a_trickle_pays_the_tail_as_run_does(name):
    """The serving cost model adds the same tail (ops and gather) to a decode iteration of one sequence."""
    from tilewright.engine.serving import ServingConfig, simulate_serving

    p = configured(name)
    p.run = p.run.model_copy(update={"engine": "analytic", "contention": False})
    single = simulate(p, series=False)
    served = simulate_serving(p, ServingConfig(rate=1e-3, count=1, chunk=64))
    assert served.records[0].tpot_s == pytest.approx(single.tpot_s, rel=1e-6)
