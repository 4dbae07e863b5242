"""Parallelism search on chips with a grid of cores (Wormhole, Blackhole meshes): the fast evaluator costs
each op as the engines do (spatial split over a chip's cores, per-tensor formats, residency), so its
times and ranking agree with the analytic engine, and the chosen candidate reports its splits."""

from __future__ import annotations

import json

import pytest
from scipy.stats import spearmanr
from tilewright.engine.cli import main
from tilewright.engine.errors import InputError
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Project, RunSettings
from tilewright.engine.ir.mapping import Mapping, PlacementStrategy, Recompute
from tilewright.engine.ir.project import EngineKind, Mode
from tilewright.engine.plan.checks import check_project
from tilewright.engine.plan.timing import dram_floor
from tilewright.engine.search.comm import Layout
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.search.parallel.estimate import Estimator
from tilewright.engine.search.parallel.first_stage import build_space
from tilewright.engine.search.parallel.search import search
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

from tests.factories import wafer

# Small enough to search and simulate in a second, large enough that a chip's 2-D split and the
# pipeline both matter: 16 heads, so tp may span up to 16 chips.
GPT = GPTSpec(name="gpt-tiled", layers=8, hidden=1024, heads=16, seq_len=512, vocab=8192)
TOLERANCE = 0.005  # estimator vs analytic engine, relative (measured ≤ 0.03 % on these presets and wafers)


def _project(system: str, **mapping) -> Project:
    return Project(
        name="t", hardware=load_system(system), workload=GPT, run=RunSettings(dtype="bf16"), mapping=Mapping(**mapping)
    )


def _engine(project: Project, c: Candidate, batch: int):
    p = project.model_copy(
        update={
            "mapping": c.mapping(batch, project.mapping),
            "run": project.run.model_copy(update={"engine": EngineKind.analytic}),
        }
    )
    assert not check_project(p), check_project(p)
    return p, simulate(p)


def _spread(ranked: list, n: int = 8) -> list:
    """``n`` candidates spread over the ranked list (near-ties at its head would make ranks arbitrary)."""
    step = max(1, len(ranked) // n)
    return ranked[::step][:n]


CASES = {
    "t3000": ("wormhole-t3000", 8, 32, {}),
    "t3000-bfp8-weights": ("wormhole-t3000", 8, 32, {"formats": {"weights": "bfp8"}}),
    "galaxy": ("blackhole-galaxy", 32, 64, {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_estimator_times_and_ranks_like_the_analytic_engine(case: str):
    system, devices, batch, mapping = CASES[case]
    project = _project(system, **mapping)
    result = search(project, devices, batch, top=0, keep=40, resimulate=False)
    picked = _spread(result.ranked)
    assert len(picked) == 8
    est, eng = [], []
    for r in picked:
        _, out = _engine(project, r.candidate, batch)
        assert out.oom is None
        assert r.iteration_time_s == pytest.approx(out.iteration_time_s, rel=TOLERANCE), r.candidate.label()
        est.append(r.iteration_time_s)
        eng.append(out.iteration_time_s)
    assert spearmanr(est, eng).statistic >= 0.9


def test_weight_format_reaches_the_estimate():
    """bfp8 weights (≈ 1.06 B per element) move fewer bytes than bf16 ones: a memory-bound candidate gets
    faster, by what the engine says."""
    c = Candidate(2, 2, 2, 1)
    times = {}
    for name, mapping in (("bf16", {}), ("bfp8", {"formats": {"weights": "bfp8"}})):
        project = _project("wormhole-t3000", **mapping)
        hw = elaborate(project.hardware, devices_needed=8)
        est = Estimator(project, hw, build_workload(project.workload))
        m = c.micro_batches(32)
        table, key = est.layer_table(c)
        times[name] = est.exact_time(c, m, est.chunks(table, key, c.pp, c.interleave))
        _, out = _engine(project, c, 32)
        assert times[name] == pytest.approx(out.iteration_time_s, rel=TOLERANCE)
    assert times["bfp8"] < times["bf16"]


def test_tp_spans_chips_up_to_the_head_count_and_splits_are_reported():
    """On 32 Blackhole chips tp may use every chip the heads allow (16), however many cores each chip
    has; each kept candidate reports how every stage splits its forward ops over a chip's cores, exactly
    the rows the engine's plan reports for that mapping."""
    project = _project("blackhole-galaxy")
    hw = elaborate(project.hardware, devices_needed=32)
    est = Estimator(project, hw, build_workload(project.workload))
    space = build_space(project, 32, 64, len(est.blocks), est)
    assert max(space.tps) == GPT.heads
    result = search(project, 32, 64, top=0, keep=12, resimulate=False)
    assert any(r.candidate.tp > 1 for r in result.ranked)
    for r in result.ranked[:3]:
        c = r.candidate
        plan = make_plan(project.model_copy(update={"mapping": c.mapping(64, project.mapping)}))
        assert r.spatial_splits == plan.spatial_splits()
        assert {row["where"] for row in r.spatial_splits} == {f"stage {s}, forward" for s in range(c.pp)}
        assert all("2-D" in row["split"] or "1-D" in row["split"] or "K" in row["split"] for row in r.spatial_splits)


def test_estimate_never_beats_the_dram_traffic_it_implies():
    """A Wormhole chip streams every op's DRAM bytes through its GDDR6: no candidate's iteration can be
    shorter than stage 0's bytes over that bandwidth. On a wafer whose tiles share DRAM ports, no
    candidate beats the busiest port link's bytes (the engines' DRAM floor)."""
    project = _project("wormhole-t3000")
    result = search(project, 8, 32, top=0, keep=10, resimulate=False)
    for r in result.ranked:
        plan = make_plan(project.model_copy(update={"mapping": r.candidate.mapping(32, project.mapping)}))
        st = plan.stages[0]
        per_micro_batch = sum(seg.local_bytes for ps in st.passes.values() for seg in ps.segments)
        assert per_micro_batch > 0
        assert r.iteration_time_s >= plan.micro_batches * per_micro_batch / st.dev.dram_bandwidth
    wp = Project(name="w", hardware=wafer(), workload=GPT, run=RunSettings(dtype="fp16"))
    result = search(wp, 64, 16, top=0, keep=10, resimulate=False)
    assert result.ranked
    for r in result.ranked:
        plan = make_plan(wp.model_copy(update={"mapping": r.candidate.mapping(16, wp.mapping)}))
        assert r.iteration_time_s >= dram_floor(plan)[0] * (1 - 1e-9)


@pytest.mark.parametrize("level", ["sram", "auto"])
def test_memory_levels_decide_traffic_and_capacity_as_in_the_engine(level: str):
    """Weights held in the tiles' SRAM (``memory_levels``, named or chosen by ``auto``) skip the DRAM
    ports, and a level's capacity is checked on its own: every candidate kept fits its SRAM, and times
    agree with the engine."""
    small = GPTSpec(name="gpt-small", layers=4, hidden=512, heads=8, seq_len=256, vocab=4096)
    wp = Project(
        name="w",
        hardware=wafer(),
        workload=small,
        run=RunSettings(dtype="fp16"),
        mapping=Mapping(memory_levels={"weights": level}),
    )
    plain = Project(name="w", hardware=wafer(), workload=small, run=RunSettings(dtype="fp16"))
    result = search(wp, 64, 16, top=0, keep=10, resimulate=False)
    assert result.ranked
    for r in result.ranked[:4]:
        p, out = _engine(wp, r.candidate, 16)
        assert out.oom is None
        assert r.iteration_time_s == pytest.approx(out.iteration_time_s, rel=TOLERANCE)
        _, unplaced = _engine(plain, r.candidate, 16)
        assert out.iteration_time_s != pytest.approx(unplaced.iteration_time_s, rel=1e-6)
        plan = make_plan(p)
        sram = plan.stages[0].residency.levels["sram"].capacity
        weights = plan.stages[0].params * plan.weight_bytes
        if r.candidate.zero >= 3:  # the search's second stage: ZeRO-3/FSDP shard the weights over dp
            weights /= r.candidate.dp
        assert weights <= sram


def test_search_refuses_an_inference_project():
    project = _project("wormhole-t3000")
    project = project.model_copy(update={"run": project.run.model_copy(update={"mode": Mode.infer})})
    with pytest.raises(InputError, match="run.mode"):
        search(project, 8, 32, resimulate=False)


def _candidate(row: dict) -> Candidate:
    """A ranked candidate back from its JSON row."""
    return Candidate(
        row["tp"],
        row["pp"],
        row["dp"],
        row["micro_batch"],
        row["interleave"],
        Recompute(row["recompute"]),
        row["sequence_parallel"],
        row["zero"],
        PlacementStrategy(row["placement"]),
        row["rank_order"],
    )


def _exact(project: Project, c: Candidate, devices: int, batch: int) -> float:
    est = Estimator(project, elaborate(project.hardware, devices_needed=devices), build_workload(project.workload))
    table, key = est.layer_table(c)
    return est.exact_time(c, c.micro_batches(batch), est.chunks(table, key, c.pp, c.interleave))


def test_cli_keeps_the_projects_formats_and_reports_splits(tmp_path, capsys):
    """A project's formats reach the search (its mapping's parallelism does not: the search chooses it);
    the JSON carries the chosen candidate's splits and the text shows #1's."""
    project = _project("wormhole-t3000", tp=2, pp=2, dp=2, global_batch=32, formats={"weights": "bfp8"})
    path = tmp_path / "p.json"
    path.write_text(json.dumps(project.model_dump(mode="json")))
    # no overlapped gradient reduction, no ZeRO-2/3 or FSDP: the fast evaluator (``_exact``) times first-stage
    # candidates only
    assert main(
        ["search", str(path), "--no-simulate", "--quiet", "--json", "--list", "3", "--no-overlap", "--zero", "0,1"]
    ) == 0
    best = json.loads(capsys.readouterr().out)["candidates"][0]
    assert best["spatial_splits"] and not best["overlap_grad_reduce"]
    c = _candidate(best)
    bfp8 = _exact(_project("wormhole-t3000", formats={"weights": "bfp8"}), c, 8, 32)
    assert best["iteration_time_s"] == pytest.approx(bfp8, rel=1e-12)
    assert bfp8 != pytest.approx(_exact(_project("wormhole-t3000"), c, 8, 32), rel=1e-6)
    assert main(["search", str(path), "--no-simulate", "--quiet", "--list", "3"]) == 0
    assert "spatial split of each forward op" in capsys.readouterr().out


def test_cli_unreachable_memory_level_is_exit_2(tmp_path, capsys):
    project = _project("wormhole-t3000", tp=2, pp=2, dp=2, global_batch=32, memory_levels={"weights": "nowhere"})
    path = tmp_path / "p.json"
    path.write_text(json.dumps(project.model_dump(mode="json")))
    assert main(["search", str(path), "--no-simulate", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "mapping.memory_levels.weights" in err and "nowhere" in err


@pytest.mark.parametrize("kind", ["all-reduce", "reduce-scatter"])
def test_concurrent_gradient_reductions_take_the_engines_algorithm(kind: str):
    """Four data-parallel groups of 8 chips reduce at once on the Galaxy's 4 × 8 mesh. The engine picks each
    group's algorithm as if it were alone and then shares the links (``Plan.dp_collective``); the search's
    cached lines must follow that pick, not the one that would be cheapest under sharing."""
    zero = 1 if kind == "reduce-scatter" else 0
    project = _project("blackhole-galaxy", tp=4, pp=1, dp=8, global_batch=64, zero=zero)
    plan = make_plan(project)
    est = Estimator(project, plan.hw, build_workload(project.workload))
    groups = est.comm.dp_groups(Layout(project.mapping.placement, project.mapping.rank_order), 4, 1, 8, 0)
    for chunk, nbytes in plan.stages[0].grad_bytes.items():
        engine = plan.dp_collective(0, chunk).time(plan.hw)
        assert est.comm.concurrent_time(kind, groups, nbytes) == pytest.approx(engine, rel=1e-9)
