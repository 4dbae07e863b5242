"""Parallelism search: the fast evaluator against the analytic engine, pruning, brute force, bad input."""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest
from tilewright.engine.cli import main
from tilewright.engine.engines.analytic.engine import AnalyticEngine
from tilewright.engine.errors import InputError
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Project, RunSettings
from tilewright.engine.ir.mapping import PlacementStrategy, Recompute, Schedule
from tilewright.engine.ir.project import EngineKind
from tilewright.engine.perf.collectives import collective
from tilewright.engine.plan.checks import check_project
from tilewright.engine.plan.schedules import stage_order
from tilewright.engine.search.comm import CommModel
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.search.parallel.estimate import Estimator
from tilewright.engine.search.parallel.extended import exact_evaluator
from tilewright.engine.search.parallel.inflight import peak_activation
from tilewright.engine.search.parallel.search import search
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

from tests.factories import cluster, small_gpt, wafer

GPT = GPTSpec(name="gpt-test", layers=8, hidden=512, heads=8, seq_len=256, vocab=4096)


def _template(hardware=None, workload=GPT, dtype="bf16") -> Project:
    return Project(name="t", hardware=hardware or cluster(nodes=2), workload=workload, run=RunSettings(dtype=dtype))


def _fast(project: Project, devices: int, c: Candidate, batch: int) -> tuple[float, float, float]:
    """(closed-form time, recurrence time, memory) from the search's evaluator."""
    hw = elaborate(project.hardware, devices_needed=devices)
    est = Estimator(project, hw, build_workload(project.workload))
    m = c.micro_batches(batch)
    table, key = est.layer_table(c)
    chunks = est.chunks(table, key, c.pp, c.interleave)
    return est.iteration_time(c, m, chunks), est.exact_time(c, m, chunks), est.memory(c, m, chunks)


CASES = [
    Candidate(2, 2, 4, 1),
    Candidate(4, 2, 2, 2, 2, Recompute.selective, True, 1),
    Candidate(1, 4, 4, 1, 1, Recompute.full),
    Candidate(8, 1, 2, 4, zero=1),
    Candidate(2, 4, 2, 1, 2, Recompute.full, True, 0, rank_order="tp-pp-dp"),
    Candidate(2, 8, 1, 1, 1, Recompute.none),  # pp = layers
    Candidate(4, 1, 4, 2, 1, Recompute.full, True, 1),
]


@pytest.mark.parametrize("c", CASES, ids=[c.label() for c in CASES])
def test_fast_evaluator_agrees_with_the_analytic_engine(c: Candidate):
    """Same layer costs, collectives and memory as a plan. The closed-form pipeline used for ranking is
    within a few percent on this deliberately unbalanced toy (its head is as costly as a block; measured
    worst 1.1 %); the recurrence that refines the kept candidates agrees to < 0.1 %."""
    batch = 16
    project = _template()
    ranked, refined, mem = _fast(project, 16, c, batch)
    p = project.model_copy(update={"mapping": c.mapping(batch)})
    assert check_project(p) == []
    r = AnalyticEngine().run(make_plan(p))
    assert ranked == pytest.approx(r.iteration_time_s, rel=0.03)
    assert refined == pytest.approx(r.iteration_time_s, rel=1e-3)
    assert mem == pytest.approx(r.peak_memory_bytes, rel=1e-6)


PARAM_GATHER_CASES = [
    Candidate(8, 1, 2, 4, zero=1),
    Candidate(2, 2, 4, 1, zero=1),
    Candidate(1, 4, 4, 1, 1, Recompute.full, zero=1),
    Candidate(4, 1, 4, 2, 1, Recompute.full, True, 1),
    Candidate(4, 2, 2, 2, 2, Recompute.selective, True, 1),
]


@pytest.mark.parametrize("c", PARAM_GATHER_CASES, ids=[c.label() for c in PARAM_GATHER_CASES])
def test_fast_evaluator_hides_the_post_step_gather_as_the_engine_does(c: Candidate):
    """ZeRO-1 with Megatron's ``overlap_param_gather`` (the template's flag, as the search merges it): the
    evaluator charges the first bucket and what the first micro-batch's forward cannot hide of the rest,
    by the plan's rule (``plan.param_gather``), and agrees with the engine as tightly as without it. The
    flag must change the answer wherever there is a gather to hide."""
    batch = 16
    base = _template()
    project = base.model_copy(update={"mapping": base.mapping.model_copy(update={"overlap_param_gather": True})})
    ranked, refined, _ = _fast(project, 16, c, batch)
    plain, _, _ = _fast(base, 16, c, batch)
    p = project.model_copy(update={"mapping": c.mapping(batch, project.mapping)})
    assert p.mapping.overlap_param_gather and check_project(p) == []
    plan = make_plan(p)
    r = AnalyticEngine().run(plan)
    assert ranked == pytest.approx(r.iteration_time_s, rel=0.03)
    assert refined == pytest.approx(r.iteration_time_s, rel=1e-3)
    hidden = max(plan.zero_gather(s).time(plan.hw) - sum(x.time(plan.hw) for x in plan.zero_gather_exposed(s))
                 for s in range(c.pp))
    assert hidden > 0
    assert plain - ranked == pytest.approx(hidden, rel=0.05)


LARGER = GPTSpec(name="gpt-1k", layers=8, hidden=1024, heads=16, seq_len=1024, vocab=8192)


@pytest.mark.parametrize("workload", [GPT, LARGER], ids=["host-bound", "mixed"])
@pytest.mark.parametrize("fused_loss", [False, True])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_fast_evaluator_agrees_with_the_analytic_engine_on_a_dgx(tp: int, fused_loss: bool, workload: GPTSpec):
    """tp × dp = 8 GPUs of a DGX A100, whose NVLink names NCCL's protocols: a small GPT's tensor-parallel
    all-reduces (256 KiB) run LL/LL128, not the Simple protocol a 1 GiB reading of the collective gives
    (which made search 2.5 % / 6 % / 15 % slower than the engine at tp 2 / 4 / 8). The larger GPT has
    host-bound and device-bound segments side by side, which a chunk's one pass merges across layer
    boundaries (tp > 1) or into one segment (tp 1: search was 1.9 % slow). The evaluator times the same
    ops, collectives and optimizer step as the plan, and pp 1 has no closed-form approximation, so only
    summation order separates them: 1e-6 leaves room for that and for nothing else."""
    batch = 16
    project = _template(hardware=load_system("dgx-a100"), workload=workload)
    c = Candidate(tp, 1, 8 // tp, 1)
    mapping = c.mapping(batch).model_copy(update={"fused_cross_entropy": fused_loss})
    p = project.model_copy(update={"mapping": mapping})
    assert check_project(p) == []
    hw = elaborate(p.hardware, devices_needed=8)
    est = Estimator(p, hw, build_workload(p.workload))
    m = c.micro_batches(batch)
    table, key = est.layer_table(c)
    chunks = est.timed_chunks(c, m, est.chunks(table, key, c.pp, c.interleave))
    r = AnalyticEngine().run(make_plan(p))
    assert est.iteration_time(c, m, chunks) == pytest.approx(r.iteration_time_s, rel=1e-6)
    assert est.exact_time(c, m, chunks) == pytest.approx(r.iteration_time_s, rel=1e-6)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_collective_model_follows_the_protocol_the_engine_picks(tp: int):
    """Across message sizes from 256 B to 2 GiB (crossing NCCL's LL → LL128 → Simple choices), the search's
    cached collective lines give what the engine's decomposition gives."""
    hw = elaborate(load_system("dgx-a100"), devices_needed=8)
    comm = CommModel(hw)
    group = tuple(range(tp))
    rng = random.Random(tp)
    for nbytes in [2.0**k for k in range(8, 32)] + [rng.uniform(1e3, 1e8) for _ in range(40)]:
        for kind in ("all-reduce", "all-gather", "reduce-scatter"):
            want = collective(hw, kind, list(group), nbytes).time(hw)
            assert comm.collective_time(kind, group, nbytes) == pytest.approx(want, rel=1e-9), (kind, nbytes)


def test_layers_of_one_pass_share_the_segment_across_their_boundary():
    """A host-bound layer tail followed by a device-bound head: one segment in the plan's pass, so its
    time is max of the sums, less than the two maxima; a tail closed by a collective joins nothing, nor
    does a head that no collective closes (its segment runs on into a third layer, which pairs cannot
    express)."""
    from tilewright.engine.plan.passes import ChunkPass, Segment
    from tilewright.engine.search.layer_table import join_seconds

    def seg(device: float, host: float, comm=None) -> Segment:
        s = Segment(label="x", layer=0, busy_s=device, compute_s=device, flops=1.0, dram_bytes=0.0, host_s=host,
                    comm=comm)
        s.close()
        return s

    first = ChunkPass("F", [seg(5.0, 1.0, ("all-reduce", 8.0)), seg(1.0, 4.0)])
    second = ChunkPass("F", [seg(6.0, 1.0, ("all-reduce", 8.0))])
    assert join_seconds(first, second, 0.0) == pytest.approx(max(1.0 + 6.0, 4.0 + 1.0) - 4.0 - 6.0)
    assert join_seconds(second, first, 0.0) == 0.0
    assert join_seconds(first, ChunkPass("F", [seg(6.0, 1.0)]), 0.0) == 0.0  # its segment runs on
    assert join_seconds(ChunkPass("F", [seg(1.0, 4.0)]), second, 0.0) == pytest.approx(7.0 - 4.0 - 6.0)


def test_fast_evaluator_on_an_sram_only_wafer():
    """Tiles stream from edge DRAM over the NoC; placement strategies order a grid differently."""
    project = _template(hardware=wafer(), workload=small_gpt(), dtype="fp16")
    for c in (Candidate(4, 2, 2, 1), Candidate(2, 2, 4, 1, placement=PlacementStrategy.snake),
              Candidate(4, 1, 4, 1, placement=PlacementStrategy.block)):
        ranked, refined, mem = _fast(project, 64, c, 16)
        r = AnalyticEngine().run(make_plan(project.model_copy(update={"mapping": c.mapping(16)})))
        assert ranked == pytest.approx(r.iteration_time_s, rel=0.03), c.label()
        assert refined == pytest.approx(r.iteration_time_s, rel=0.01), c.label()
        assert mem == pytest.approx(r.peak_memory_bytes, rel=1e-6)


def _walk_peak(schedule, pp, m, v, r, act, transient):
    """The analytic engine's way: walk the stage's schedule."""
    live = peak = 0.0
    for step in stage_order(schedule, r, pp, m, v):
        if step.kind == "F":
            live += act[step.chunk]
            peak = max(peak, live)
        else:
            peak = max(peak, live + transient)
            live -= act[step.chunk]
    return peak


@pytest.mark.parametrize("seed", range(5))
def test_closed_form_in_flight_activations_match_the_schedule_walk(seed: int):
    rng = random.Random(seed)
    for _ in range(200):
        schedule = rng.choice(list(Schedule))
        pp = rng.randint(2 if schedule is Schedule.interleaved else 1, 8)
        v = rng.randint(2, 4) if schedule is Schedule.interleaved else 1
        m = pp * rng.randint(1, 5) if schedule is Schedule.interleaved else rng.randint(1, 20)
        r = rng.randrange(pp)
        act = np.array([rng.random() for _ in range(v)])
        transient = rng.choice([0.0, rng.random()])
        want = _walk_peak(schedule, pp, m, v, r, act, transient)
        assert peak_activation(schedule, pp, m, v, r, act, transient) == pytest.approx(want, abs=1e-12)


def _all_candidates(devices: int, batch: int):
    for tp, pp, dp in itertools.product([1, 2, 4, 8], [1, 2, 4], [1, 2, 4, 8, 16]):
        if tp * pp * dp > devices or batch % dp:
            continue
        for mb in [d for d in (1, 4) if (batch // dp) % d == 0]:
            for rc in Recompute:
                for sp in [False, True] if tp > 1 else [False]:
                    for zero in [0, 1] if dp > 1 else [0]:
                        yield Candidate(tp, pp, dp, mb, 1, rc, sp, zero)


def test_search_finds_the_brute_force_optimum_of_a_small_space():
    """Every non-interleaved candidate through make_plan + the analytic engine; the search's best must
    be within 1 % of the best that fits (the search also tries interleaving, so it may be better)."""
    batch, devices = 16, 16
    project = _template(hardware=cluster(nodes=2), workload=small_gpt())
    best_time = float("inf")
    for c in _all_candidates(devices, batch):
        p = project.model_copy(update={"mapping": c.mapping(batch)})
        if check_project(p):
            continue
        r = AnalyticEngine().run(make_plan(p))
        if r.oom is None:
            best_time = min(best_time, r.iteration_time_s)
    result = search(project, devices, batch, top=0, resimulate=False)
    assert result.ranked
    assert result.ranked[0].iteration_time_s <= best_time * 1.01
    assert result.feasible <= result.evaluated <= result.space


def test_memory_pruning_keeps_exactly_what_fits():
    """A model that only fits when split: no candidate the search keeps runs out of memory, and its
    memory figure is the analytic engine's."""
    big = GPTSpec(name="gpt-big", layers=8, hidden=8192, heads=64, seq_len=2048, vocab=51200)  # ~6.9 B params
    project = _template(hardware=cluster(nodes=2), workload=big)
    result = search(project, 16, 16, top=0, keep=5, resimulate=False)
    assert result.ranked and result.feasible < result.evaluated
    for r in result.ranked:
        p = project.model_copy(update={"mapping": r.candidate.mapping(16)})
        a = AnalyticEngine().run(make_plan(p))
        assert a.oom is None
        assert r.peak_memory_bytes == pytest.approx(a.peak_memory_bytes, rel=1e-6)
        assert r.candidate.tp * r.candidate.pp > 1  # 6.9 B params × 16 B do not fit one 80 GB device


def test_top_k_is_re_simulated_on_the_event_engine():
    project = _template(workload=small_gpt())
    result = search(project, 8, 8, top=2, keep=4)
    assert [r.event is not None for r in result.ranked] == [True, True, False, False]
    for r in result.ranked[:2]:
        assert r.event.engine == "event"
        assert r.event.iteration_time_s == pytest.approx(r.iteration_time_s, rel=0.25)
    # the second stage and the re-simulation plan on the graph the walk timed candidates on (``extended.Planner``,
    # shapes and routes cached on it), without link series: exactly what a run of the mapping from scratch gives
    event = project.run.model_copy(update={"engine": EngineKind.event})
    for r in result.ranked[:2]:
        alone = simulate(project.model_copy(update={"mapping": r.candidate.mapping(8, project.mapping), "run": event}))
        assert r.event.iteration_time_s == alone.iteration_time_s
        assert r.event.peak_memory_bytes == alone.peak_memory_bytes
    fresh = exact_evaluator(project, 8)  # its own workload and graph
    second = [r for r in result.ranked if r.candidate.extended]
    assert second
    for r in second:
        timed = fresh(r.candidate)
        assert (r.iteration_time_s, r.peak_memory_bytes) == (timed.iteration_time_s, timed.peak_memory_bytes)


def test_bad_input_is_an_input_error():
    project = _template(hardware=cluster(nodes=2, growable=False))
    with pytest.raises(InputError, match="--devices"):
        search(project, 64, 16, resimulate=False)  # 16 devices in the system
    with pytest.raises(InputError, match="--devices"):
        search(project, 0, 16, resimulate=False)
    with pytest.raises(InputError, match="--global-batch"):
        search(project, 8, 0, resimulate=False)


def test_cli_json(capsys):
    argv = ["search", "--system", "dgx-a100", "--model", "gpt", "--layers", "4", "--hidden", "512", "--heads", "8",
            "--seq-len", "256", "--vocab", "4096", "--devices", "16", "--global-batch", "16", "--top", "1", "--json",
            "--quiet"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"candidates", "evaluated", "feasible", "wall_time_s"} <= set(data)
    first = data["candidates"][0]
    for key in ("tp", "pp", "dp", "micro_batch", "interleave", "recompute", "sequence_parallel", "zero",
                "iteration_time_s", "samples_per_s", "peak_memory_bytes", "event_iteration_time_s"):
        assert key in first
    # every candidate has every key: null where it was not re-simulated (``--top 1``) or has no grid splits
    assert all(set(c) == set(first) for c in data["candidates"]), [set(c) ^ set(first) for c in data["candidates"]]
    assert first["event_iteration_time_s"] > 0 and first["event_oom"] is False
    rest = data["candidates"][1:]
    assert rest and all(c[k] is None for c in rest for k in ("event_iteration_time_s", "event_samples_per_s",
                                                             "event_peak_memory_bytes", "event_oom"))
    assert all(c["spatial_splits"] is None for c in data["candidates"])  # GPUs: no split over a chip's cores
    times = [c["iteration_time_s"] for c in data["candidates"][1:]]
    assert times == sorted(times)


def test_cli_list_must_be_positive(capsys):
    """``--list 0`` printed one row (the best is always printed): refused, naming the flag, as ``--top`` is."""
    argv = ["search", "--system", "dgx-a100", "--model", "gpt", "--layers", "2", "--hidden", "512", "--heads", "8",
            "--seq-len", "256", "--vocab", "4096", "--devices", "8", "--global-batch", "8", "--quiet"]
    for bad in ("0", "-3"):
        assert main([*argv, "--list", bad]) == 2
        assert "--list" in capsys.readouterr().err


def test_cli_bad_input_exit_2(capsys):
    assert main(["search", "--system", "dgx-a100", "--model", "nope", "--devices", "8", "--global-batch", "8"]) == 2
    assert main(["search", "--system", "hypar-array-16", "--model", "vgg-a", "--devices", "32",
                 "--global-batch", "32", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and "--devices" in err and "Traceback" not in err
