"""LLM serving on tiled and wafer-scale presets: the physics invariants of decode and prefill.

A decode step never beats the DRAM floor of what it reads; DRAM-sharded weights are read at the
bank-adjacent rate and interleaved ones at the arbitrary-reader rate; the fixed per-op cost is paid once per
op in both engines; the WaferLLM mapping spreads every layer over the whole wafer; a decode step's
all-reduces on a chip mesh are latency-bound.
"""

from __future__ import annotations

import math

import pytest
from tilewright.engine.io.presets import load_project_preset, load_system
from tilewright.engine.ir.hardware import Component
from tilewright.engine.ir.project import Project
from tilewright.engine.perf.memory import params_on_device
from tilewright.engine.perf.op_cost import runtime_programs
from tilewright.engine.perf.spatial import gemm_on_grid
from tilewright.engine.perf.spatial_chip import grid_chip
from tilewright.engine.plan.inference_phases import inference_phases, sampling_tile
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload
from tilewright.engine.workloads.transformer_inference import inference_graph

N150 = "wormhole-n150-llama2-7b-inference"
T3000 = "wormhole-t3000-llama2-70b-inference"
WSE = "cerebras-wse2-llama2-7b-inference"


def n150_chip():
    chip = load_system("wormhole-n150").children[0]
    return grid_chip(chip.compute, chip.memories[0])


def with_inference(project: Project, **inference) -> Project:
    inf = project.run.inference.model_copy(update=inference)
    return project.model_copy(update={"run": project.run.model_copy(update={"inference": inf})})


def with_mapping(project: Project, **mapping) -> Project:
    return project.model_copy(update={"mapping": project.mapping.model_copy(update=mapping)})


def with_fixed_cost(project: Project, fixed_s: float) -> Project:
    """Every program's fixed part moved to ``fixed_s``: ``fixed_op_s``, and the measured durations of the
    runtime's extra programs (``program_s_by_op``) by the same step."""
    p = project.model_copy(deep=True)
    chips = [c for c in _walk(p.hardware) if c.compute is not None]
    for c in chips:
        step = fixed_s - c.compute.fixed_op_s
        c.compute.fixed_op_s = fixed_s
        c.compute.program_s_by_op = {k: s + step for k, s in c.compute.program_s_by_op.items()}
    return p


def _walk(c: Component):
    yield c
    for child in c.children:
        yield from _walk(child)


@pytest.mark.parametrize("weights", ["interleaved", "sharded"])
def test_a_decode_step_never_beats_the_dram_floor_of_its_bytes(weights):
    project = load_project_preset(N150)
    spatial = project.mapping.spatial.model_copy(update={"weights": weights})
    plan = make_plan(with_mapping(project, spatial=spatial))
    ph = inference_phases(plan)
    peak = plan.stages[0].dev.local_dram.bandwidth_bytes_per_s
    step_ops = inference_graph(project.workload, 1, 2, ph.micro_batch, True).ops()
    weight_bytes = params_on_device(step_ops, 1) * plan.weight_bytes
    for passes in ph.samples.values():
        ps = passes[0]
        moved = sum(s.local_bytes for s in ps.segments)
        assert moved >= weight_bytes * 0.999  # every weight is read once per step
        assert ps.busy_s >= moved / peak


def test_sharded_weights_read_bank_adjacent_interleaved_ones_at_the_arbitrary_reader_rate():
    chip = n150_chip()
    m, k, n = 32, 4096, 12288  # a decode step's QKV matmul, batch 32
    weights = k * n * 1.0625  # bfp8
    interleaved = gemm_on_grid(chip, m, k, n, "bf16", "bfp8", "bf16", "HiFi2")
    sharded = gemm_on_grid(chip, m, k, n, "bf16", "bfp8", "bf16", "HiFi2", b_sharded=True)
    assert sharded.seconds < interleaved.seconds
    assert interleaved.seconds >= weights / chip.dram_read_Bps(interleaved=True)
    assert sharded.seconds >= weights / chip.dram_read_Bps(interleaved=False)
    # a DRAM-bound decode matmul gets close to the bank-adjacent rate (what the layout is for)
    assert sharded.seconds < 1.25 * weights / chip.dram_read_Bps(interleaved=False)
    assert sharded.split.kind == "1d_in0"


def test_sharding_leaves_a_2d_split_alone():
    chip = n150_chip()
    args = (chip, 4096, 4096, 4096, "bf16", "bfp8", "bf16", "HiFi2")
    plain, sharded = gemm_on_grid(*args), gemm_on_grid(*args, b_sharded=True)
    assert plain.split.kind == sharded.split.kind == "2d"
    assert plain.seconds == sharded.seconds


@pytest.mark.parametrize("name", [N150, T3000])
@pytest.mark.parametrize("engine", ["event", "analytic"])
def test_the_fixed_cost_is_paid_once_per_program_in_both_engines(engine, name):
    """Once per device program the runtime runs for an op (``compute.programs_by_op``) on each device:
    tensor-parallel devices pay it side by side, not one after another."""
    project = load_project_preset(name)
    project = with_inference(project, batch=1, prompt_tokens=64, output_tokens=4)
    project.run.engine = engine
    base_fixed = project.hardware.children[0].compute.fixed_op_s
    extra = 1e-5
    base = simulate(project, series=False)
    more = simulate(with_fixed_cost(project, base_fixed + extra), series=False)
    compute = project.hardware.children[0].compute

    def programs(graph) -> int:
        return sum(runtime_programs(op, compute) for op in graph.ops())

    tail = sampling_tile(compute)  # the decode step's on-device sampling (untilize, argmax, updates)
    decode_ops = programs(inference_graph(project.workload, 1, 2, 1, True, tail))
    prefill_ops = programs(inference_graph(project.workload, 64, 64, 1, True))
    ops = sum(1 for _ in inference_graph(project.workload, 1, 2, 1, True).ops())
    assert tail and decode_ops == prefill_ops + 1 + 1 + compute.programs_by_op["sample_update"]
    assert prefill_ops > ops > 10 * project.workload.layers  # norms, matmuls, attention, adds, ...
    assert more.tpot_s - base.tpot_s == pytest.approx(decode_ops * extra, rel=1e-6)
    assert more.ttft_s - base.ttft_s == pytest.approx(prefill_ops * extra, rel=1e-6)


def test_the_waferllm_mapping_runs_every_layer_over_the_whole_wafer():
    project = load_project_preset(WSE)
    plan = make_plan(project)
    assert project.mapping.pp == 1 and project.mapping.devices == len(plan.hw.devices)  # every block, every layer
    params = sum(op.params for op in build_workload(project.workload).ops())
    flops = 2.0 * params * project.run.inference.prompt_tokens
    wafer_peak = sum(plan.hw.devices[d].compute.peak(project.run.dtype) for d in range(len(plan.hw.devices)))
    wafer = simulate(project, series=False)
    assert wafer.ttft_s >= flops / wafer_peak  # prefill: no faster than the wafer's arithmetic
    pipelined = simulate(with_mapping(project, tp=1, pp=32), series=False)
    assert wafer.ttft_s < pipelined.ttft_s / 4  # a batch-1 pipeline uses one block at a time
    assert wafer.tpot_s < pipelined.tpot_s


def test_wafer_presets_add_up_to_the_wse2_datasheet():
    for name in ("cerebras-wse2", "cerebras-wse2-waferllm"):
        wafer = load_system(name)
        block = wafer.children[0]
        n = block.rows * block.cols
        sram = block.memories[0]
        assert n * sram.capacity_bytes == pytest.approx(40e9, rel=0.05)  # 40 GB on the wafer (S40)
        assert n * sram.bandwidth_bytes_per_s == pytest.approx(20e15, rel=0.01)  # 20 PB/s (S40)


def test_tpu_v4_peak_is_its_matrix_units_at_its_clock():
    chip = load_system("tpu-v4-torus").children[0]
    mxus, side, clock = 2 * 4, 128, 1.05e9  # 2 TensorCores x 4 MXUs of 128 x 128 at 1,050 MHz
    assert chip.compute.peak("bf16") == pytest.approx(mxus * side * side * 2 * clock, rel=0.005)
    assert chip.memories[0].bandwidth_bytes_per_s == 1.2e12 and chip.memories[0].capacity_bytes == 32 * 2**30


def test_a_decode_all_reduce_on_a_chip_mesh_is_latency_bound():
    project = load_project_preset(T3000)
    plan = make_plan(project)
    hidden = project.workload.hidden
    step = project.run.inference.batch * hidden * 2  # one decode step's activations, bf16
    n = project.mapping.tp
    ic = project.hardware.interconnect
    t_step = plan.tp_time(0, 0, "all-reduce", step)
    t_tiny = plan.tp_time(0, 0, "all-reduce", step / 32)
    assert t_step >= 2 * (n - 1) / n * step / ic.link_bandwidth_bytes_per_s  # the bandwidth floor
    assert t_step >= (n - 1) * ic.link_latency_s  # a ring's steps each cross a link
    assert t_tiny > 0.3 * t_step  # 1/32 of the bytes is far from 1/32 of the time: latency dominates
    assert t_step < 1e-3  # and a decode all-reduce stays in the tens of microseconds


@pytest.mark.parametrize(
    "name",
    [
        "wormhole-n300-llama3.1-8b-inference",
        "wormhole-t3000-llama2-70b-inference",
        "wormhole-galaxy-llama3-70b-inference",
        "blackhole-galaxy-llama3-70b-inference",
        "blackhole-p150-llama3.1-8b-inference",
    ],
)
def test_tiled_serving_presets_fit_and_decode_above_their_floors(name):
    project = with_inference(load_project_preset(name), output_tokens=3)
    r = simulate(project, series=False)
    assert r.oom is None
    plan = make_plan(project)
    dev = plan.stages[0].dev
    step_ops = inference_graph(project.workload, 1, 2, 1, True).ops()
    floor = params_on_device(step_ops, project.mapping.tp) * plan.weight_bytes / dev.local_dram.bandwidth_bytes_per_s
    assert r.tpot_s >= floor
    assert math.isfinite(r.ttft_s) and r.ttft_s > r.tpot_s


def test_a_blackhole_dram_sharded_decode_matmul_is_held_back_by_its_one_reader_per_bank():
    """tt-metal's DRAM-sharded matmul on Blackhole, one reader core per bank (its default), uses 55 % of the
    DRAM's 512 GB/s; two or three readers per bank reach 90 % (tt-metal PR #54242). The preset states the 90 %
    as the DRAM side's efficiency and one reader per bank; the 55 % must follow from the structure: each of
    the 8 workers also computes N / 8 columns, so Llama 3.1 8B's FF1 (k 4096, n 14336, bfp4 LoFi, batch 32) is
    bound by the workers' arithmetic, not the DRAM. By hand: 448 columns / 8 = 56 per worker, sub-blocks of
    1 × 8 (no padding), a LoFi tile-MAC max(2·32³ / 4096, (576 + 2048 / 8) / 102 B per cycle) + 4 = 20
    cycles, 128 K-tiles: 128 × 56 × 20 cycles at 1.35 GHz = 106.2 µs, above the 71.7 µs the bytes take at
    0.9 × 512 GB/s."""
    chip_c = load_system("blackhole-p150").children[0]
    chip = grid_chip(chip_c.compute, chip_c.memories[0])
    g = chip_c.compute.grid
    assert g.dram_banks == 8 and g.dram_readers_per_bank == 1 and chip_c.memories[0].efficiency == 0.9
    m, k, n = 32, 4096, 14336
    weights = k * n * 576 / 1024  # bfp4 tile: 512 B of 4-bit mantissas + 64 B of shared exponents
    mac = max(2 * 32**3 / 4096, (576 + 2048 / 8) / 102) + 4
    compute = 128 * (448 // 8) * mac / 1.35e9
    assert compute == pytest.approx(106.2e-6, rel=1e-3)
    sharded = gemm_on_grid(chip, m, k, n, "bf16", "bfp4", "bf16", "LoFi", "1d", b_sharded=True)
    assert sharded.split.kind == "1d_in0" and sharded.split.cores == 8 and sharded.bound == "compute"
    assert compute < sharded.seconds < compute + 10e-6
    assert weights / (0.9 * 512e9) < compute
    share = weights / sharded.seconds / 512e9
    assert 0.5 < share < 0.7  # the PR's 55 % for the layer's matmuls together


def test_published_decode_figures_cite_a_source_and_measure_the_gap_by_hand():
    """benchmarks/calibrate_tiled_llm.py prints Tenstorrent's published t/s/u beside ours: every figure names a
    source it lists, and the time per token it implies beyond our TPOT is 1/published − TPOT."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from calibrate_tiled_llm import CONFIGS, SOURCES, Published, published_cells

    cited = [c.published for c in CONFIGS if c.published is not None]
    assert cited
    for pub in cited:
        assert pub.tsu and all(t > 0 for t in pub.tsu)
        assert all(s.split()[0] in SOURCES for s in pub.sources)
    # 25 t/s/u is 40 ms per token: 10 ms beyond a 30 ms TPOT; a 20-25 range spans 10..20 ms
    assert published_cells(Published((25.0,), ("PERF",)), 0.030) == ("25", "+10.0 ms")
    assert published_cells(Published((20.0, 25.0), ("PERF", "README")), 0.030) == ("20-25", "+10.0..+20.0 ms")
    assert published_cells(None, 0.030) == ("—", "—")
    # 2,700 t/s/u is 370.4 µs per token: 170.4 µs beyond a 200 µs TPOT (below a millisecond: in µs)
    assert published_cells(Published((2700.0,), ("WaferLLM",)), 200e-6) == ("2700", "+170.4 µs")
