"""The Galaxy's decode physics: 2-D tensor-parallel GEMM shapes, and the DRAM prefetcher of tt-metal's
models/demos/llama3_70b_galaxy (``WeightPlacement.prefetched``).

A 2-D tensor-parallel weight is cut along both its dimensions, so its GEMM on each chip has a K ``rows`` or
``cols`` times shorter than a 1-D cut's. A prefetched decode matmul runs on the ring of the prefetcher's
receiver cores with its weight already in L1 — its time does not depend on the DRAM — and a layer is never
faster than its weights' stream; a prefill, and the LM head, read their weights as DRAM-sharded.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from tilewright.engine.io.presets import load_project_preset, load_system
from tilewright.engine.ir.mapping import WeightPlacement
from tilewright.engine.ir.project import EngineKind, Project
from tilewright.engine.perf.op_cost import op_time, runtime_programs_extra
from tilewright.engine.perf.spatial import device_chip, gemm_on_grid
from tilewright.engine.perf.spatial_cost import GemmProblem, GemmTerms, floor_seconds, pipeline
from tilewright.engine.perf.spatial_op import PREFETCH_RECEIVERS_PER_BANK, prefetch_ring
from tilewright.engine.plan.inference_phases import decode_context, inference_phases, prefetch_stream_s, sampling_tile
from tilewright.engine.plan.passes import forward_pass
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads.transformer_inference import inference_graph

GALAXY = "wormhole-galaxy-llama3-70b-inference"
BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def with_weights(project: Project, weights: WeightPlacement) -> Project:
    spatial = project.mapping.spatial.model_copy(update={"weights": weights})
    return project.model_copy(update={"mapping": project.mapping.model_copy(update={"spatial": spatial})})


def with_inference(project: Project, **inference) -> Project:
    inf = project.run.inference.model_copy(update=inference)
    return project.model_copy(update={"run": project.run.model_copy(update={"inference": inf})})


def decode_op(project: Project, name: str, batch: int = 32, keys: int = 129):
    graph = inference_graph(project.workload, 1, keys, batch, True, 32)
    return next(op for op in graph.layer_ops(3) if op.name.endswith("." + name))


def kernel_s(project: Project, name: str, tp_axes=(4, 8), batch: int = 32) -> float:
    """An op's time in a decode step without the runtime's further programs."""
    plan = make_plan(project)
    dev = plan.stages[0].dev
    op = decode_op(project, name, batch)
    t = op_time(op, dev, batch, project.mapping.tp, False, False, plan.elem_bytes, formats=plan.formats,
                spatial=project.mapping.spatial, tp_axes=tp_axes)
    return t.busy_s - runtime_programs_extra(op, dev.compute)


def test_a_2d_tensor_parallel_gemm_is_cut_along_both_dimensions_of_its_weight():
    """On the 4 × 8 mesh QKV's weight (hidden × (heads + 2 kv_heads) · head_dim) is cut K over the 4 rows and N
    over the 8 cols, WO's (hidden × hidden) K over the 8 and N over the 4: the op costs the grid GEMM of that
    shape; the 1-D cut (K whole for QKV) is slower, its activations 4 times longer."""
    project = with_weights(load_project_preset(GALAXY), WeightPlacement.sharded)
    w = project.workload
    chip = device_chip(make_plan(project).stages[0].dev)
    head_dim = w.hidden // w.heads
    qkv_n = (w.heads + 2 * w.kv_heads) * head_dim
    cases = (("qkv", w.hidden / 4, qkv_n / 8), ("out_proj", w.hidden / 8, w.hidden / 4))
    for name, k, n in cases:
        expected = gemm_on_grid(chip, 32, k, n, "bf16", "bfp8", "bf16", "HiFi2", "auto", None, (True, True, True),
                                True).seconds
        assert kernel_s(project, name) == pytest.approx(expected, rel=1e-12)
    assert kernel_s(project, "qkv", tp_axes=None) > 1.5 * kernel_s(project, "qkv")


def test_the_prefetch_ring_has_as_many_cores_as_receivers_on_any_grid():
    """The ring is the bank readers' receivers (2 per bank), no more: on a Blackhole (8 banks, a 10 × 11 grid)
    16 cores in 2 rows of 8 — rounding up to whole rows of 11 gave the ring matmul 22 cores it does not have."""
    for name, banks in (("blackhole-galaxy-llama3-70b-inference", 8), (GALAXY, 12)):
        chip = device_chip(make_plan(load_project_preset(name)).stages[0].dev)
        assert chip.dram_banks == banks
        rows, cols = prefetch_ring(chip)
        assert rows * cols == banks * PREFETCH_RECEIVERS_PER_BANK
        assert rows <= chip.rows and cols <= chip.cols and rows == math.ceil(rows * cols / chip.cols)


def test_a_prefetched_decode_matmul_runs_on_the_ring_from_l1_whatever_the_dram():
    """With the weights prefetched, FF2 in a decode step is the ring GEMM (12 banks × 2 receivers = 24 cores,
    A passed around the ring, A, B and C in L1): the DRAM's bandwidth does not change it, while the same op
    DRAM-sharded slows with it."""
    project = load_project_preset(GALAXY)
    chip = device_chip(make_plan(project).stages[0].dev)
    assert prefetch_ring(chip) == (3, 8) and chip.dram_banks * PREFETCH_RECEIVERS_PER_BANK == 24
    w = project.workload
    k, n = w.ffn / 8, w.hidden / 4  # FF2 is row-parallel
    ring = gemm_on_grid(chip, 32, k, n, "bf16", "bfp8", "bf16", "HiFi2", "1d", (3, 8), (False, False, False),
                        False, True)
    assert kernel_s(project, "mlp_down") == pytest.approx(ring.seconds, rel=1e-12)

    slow = slow_dram(project)
    assert kernel_s(slow, "mlp_down") == pytest.approx(kernel_s(project, "mlp_down"), rel=1e-12)
    sharded, slow_sharded = (with_weights(p, WeightPlacement.sharded) for p in (project, slow))
    assert kernel_s(slow_sharded, "mlp_down") > 2 * kernel_s(sharded, "mlp_down")


def slow_dram(project: Project, scale: float = 0.1) -> Project:
    """The project with every chip's DRAM ``scale`` times as fast."""
    hw = project.hardware.model_dump(mode="json")
    for chip in hw["children"]:
        for mem in chip["memories"]:
            mem["bandwidth_bytes_per_s"] *= scale
    return project.model_copy(update={"hardware": type(project.hardware).model_validate(hw)})


def test_prefill_and_the_lm_head_read_their_weights_as_dram_sharded():
    """The runtime prefetches in decode only, and the projections of the layers only: a prefill's matmul (many
    tile rows) and the LM head cost exactly what they cost DRAM-sharded."""
    project = load_project_preset(GALAXY)
    sharded = with_weights(project, WeightPlacement.sharded)
    assert kernel_s(project, "mlp_up", batch=128) == kernel_s(sharded, "mlp_up", batch=128)
    plan, plan_s = make_plan(project), make_plan(sharded)
    head = next(op for op in inference_graph(project.workload, 1, 129, 32, True, 32).ops()
                if op.name == "head.logits")
    times = [op_time(head, p.stages[0].dev, 32, 32, False, False, p.elem_bytes, formats=p.formats,
                     spatial=pr.mapping.spatial, tp_axes=(4, 8)).busy_s
             for p, pr in ((plan, project), (plan_s, sharded))]
    assert times[0] == times[1]


def test_the_ring_passes_activations_faster_than_a_multicast_and_its_floor_stays_a_bound():
    """A's blocks handed core to core (unicast, one hop) arrive faster than one sender's multicast to the
    line; the split choice's lower bound (``floor_seconds``) stays below every ring split's time."""
    chip = device_chip(make_plan(load_project_preset(GALAXY)).stages[0].dev).with_grid(3, 8)
    for k, n in ((2048, 1280), (3584, 2048), (1024, 2048)):
        ring = GemmProblem(32, k, n, "bf16", "bfp8", "bf16", "HiFi2", False, False, False, a_ring=True)
        mcast = GemmProblem(32, k, n, "bf16", "bfp8", "bf16", "HiFi2", False, False, False)
        g_ring, g_mcast = GemmTerms(chip, ring), GemmTerms(chip, mcast)
        for cols in (8, 16, 24):
            per_n = math.ceil(math.ceil(n / 32) / cols)
            for block_k in (1, 2, 4, 8):
                args = ("1d_in0", 1, cols, 1, per_n, block_k, 1, per_n, 1, min(per_n, 8), 1)
                t_ring, t_mcast = pipeline(g_ring, *args)[0], pipeline(g_mcast, *args)[0]
                assert t_ring < t_mcast
                assert floor_seconds(g_ring, "1d_in0", 1, cols, 1, per_n, 1) <= t_ring * (1 + 1e-12)


def test_a_layer_is_never_faster_than_its_prefetched_weights_stream():
    """With a DRAM 100 times slower the prefetcher binds: each decode layer then lasts exactly its weights'
    bytes (params / tp in their formats) at the bank-adjacent rate, ops and collectives hidden behind it."""
    project = with_inference(slow_dram(load_project_preset(GALAXY), 0.01), output_tokens=3)
    plan = make_plan(project)
    ph = inference_phases(plan)
    ps = ph.samples[min(ph.samples)][0]
    w, f = project.workload, plan.formats
    head_dim = w.hidden // w.heads
    layer_bytes = (w.hidden * (w.heads + 2 * w.kv_heads) * head_dim * f.for_op("qkv").weight_bytes
                   + w.hidden * w.hidden * f.for_op("out_proj").weight_bytes
                   + 2 * w.hidden * w.ffn * f.for_op("mlp_up").weight_bytes
                   + w.ffn * w.hidden * f.for_op("mlp_down").weight_bytes) / 32
    mem = project.hardware.children[0].memories[0]
    expected = layer_bytes / (mem.bandwidth_bytes_per_s * mem.efficiency)
    layer = ps.segments[3].layer
    graph = inference_graph(w, 1, min(ph.samples), 32, True, sampling_tile(plan.stages[0].dev.compute))
    assert prefetch_stream_s(plan, 0, graph.layer_ops(layer), 32, f) == pytest.approx(expected, rel=1e-9)
    spent = sum(s.busy_s + (plan.tp_time(0, 0, *s.comm) if s.comm else 0.0) for s in ps.segments
                if s.layer == layer)
    assert spent == pytest.approx(expected, rel=1e-9)
    # and with the preset's DRAM it does not bind: the layer is its ops and collectives
    fast = make_plan(with_inference(load_project_preset(GALAXY), output_tokens=3))
    graph = inference_graph(w, 1, 129, 32, True, 32)
    ops = graph.layer_ops(layer)
    alone = forward_pass([ops], decode_context(fast, 0, 32))
    assert prefetch_stream_s(fast, 0, ops, 32, fast.formats) < alone.busy_s


def with_sram_weights(project: Project) -> Project:
    """The project with an SRAM level beside each chip's DRAM (as large as the DRAM, a hypothetical chip) that
    ``mapping.memory_levels`` puts the weights in."""
    hw = project.hardware.model_dump(mode="json")
    for chip in hw["children"]:
        dram = chip["memories"][0]
        chip["memories"].append({"name": "l1", "kind": "sram", "capacity_bytes": dram["capacity_bytes"],
                                 "bandwidth_bytes_per_s": 100 * dram["bandwidth_bytes_per_s"]})
    levels = {**project.mapping.memory_levels, "weights": "l1"}
    return project.model_copy(update={"hardware": type(project.hardware).model_validate(hw),
                                      "mapping": project.mapping.model_copy(update={"memory_levels": levels})})


def test_weights_held_in_sram_have_no_prefetch_stream_to_wait_for():
    """Weights that ``mapping.memory_levels`` keeps in SRAM are read from L1 by the matmuls (``spatial_op.
    prefetched`` is false for them), so no layer waits for a DRAM stream of them: under a DRAM slow enough for
    the prefetcher to bind (the test above), each decode layer is back to its ops and collectives."""
    project = with_inference(slow_dram(load_project_preset(GALAXY), 0.01), output_tokens=3)
    plans = {name: make_plan(p) for name, p in (("dram", project), ("sram", with_sram_weights(project)))}
    w = project.workload
    graph = inference_graph(w, 1, 129, 32, True, 32)
    layer = graph.block_layers[3]
    ops = graph.layer_ops(layer)
    assert prefetch_stream_s(plans["dram"], 0, ops, 32, plans["dram"].formats) > 0
    sram = plans["sram"]
    assert sram.stages[0].residency is not None and sram.stages[0].residency.residency.at("weights") == "sram"
    assert prefetch_stream_s(sram, 0, ops, 32, sram.formats) == 0.0
    ps = inference_phases(sram).samples[129][0]
    alone = forward_pass([ops], decode_context(sram, 0, 32))
    spent = sum(s.busy_s for s in ps.segments if s.layer == layer)
    assert spent == pytest.approx(sum(s.busy_s for s in alone.segments), rel=1e-12)


def test_both_engines_time_the_prefetched_galaxy_alike():
    project = with_inference(load_project_preset(GALAXY), output_tokens=4)
    runs = {kind: simulate(project.model_copy(update={"run": project.run.model_copy(update={"engine": kind})}),
                           series=False) for kind in (EngineKind.analytic, EngineKind.event)}
    analytic, event = runs[EngineKind.analytic], runs[EngineKind.event]
    assert event.tpot_s == pytest.approx(analytic.tpot_s, rel=1e-6)
    assert event.ttft_s == pytest.approx(analytic.ttft_s, rel=1e-6)


def test_the_galaxy_project_models_llama3_70b_galaxy_and_its_batch_1_row_tt_transformers():
    """The preset prefetches and runs the demo's programs per op; calibrate_tiled_llm's batch-1 Galaxy row
    (tt-transformers) is the system's compute with DRAM-interleaved weights (its TG branches)."""
    project = load_project_preset(GALAXY)
    assert project.mapping.spatial.weights is WeightPlacement.prefetched
    compute = project.hardware.children[0].compute
    system = load_system("wormhole-galaxy").children[0].compute
    assert compute.programs_by_op["attention"] == 3 and system.programs_by_op["attention"] == 8
    sys.path.insert(0, str(BENCH))
    try:
        from calibrate_tiled_llm import CONFIGS, configured
    finally:
        sys.path.remove(str(BENCH))
    tt = [c for c in CONFIGS if c.project == GALAXY and c.tt_transformers]
    assert [c.batch for c in tt] == [1]
    p = configured(tt[0])
    assert p.mapping.spatial.weights is WeightPlacement.interleaved  # tt-transformers' TG branches
    assert p.hardware.children[0].compute == system


def test_a_reported_split_is_read_back_on_the_2d_cut():
    """The studio's traffic view rebuilds a reported split's GEMM (``split_problem``): on the 4 × 8 mesh with
    QKV's K over the 4 rows and N over the 8 cols, as the engine costed it."""
    from tilewright.engine.perf.spatial_cost import Split
    from tilewright.engine.results.split_traffic import split_problem

    project = load_project_preset(GALAXY)
    w = project.workload
    op = decode_op(project, "qkv")
    p = split_problem(project, op, Split("1d_in0", 1, 12, 1, 4, 2, 1, 4, 1, 4), True, 32)
    head_dim = w.hidden // w.heads
    assert (p.k, p.n) == (w.hidden // 4, (w.heads + 2 * w.kv_heads) * head_dim // 8)
