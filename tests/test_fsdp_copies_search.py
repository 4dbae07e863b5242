"""PyTorch FSDP2's copies (``mapping.fsdp_copies``, ``plan.sharding``) in the parallelism search and on the
command line.

The search times ZeRO-3 and FSDP candidates by planning them (``search.parallel.extended``: its fast evaluator's
layer table carries no per-layer gathers at all), so the copies reach the search through the mapping a candidate
builds from the project's (``Candidate.mapping``), kept where the candidate gathers weights and dropped where it
does not. The CLI's ``search`` keeps the field of a project file and takes ``--fsdp-copies``; ``run`` takes
``--fsdp-copies`` with ``--fsdp`` or ``--zero 3`` and refuses it (exit 2) where nothing is gathered.
Expected times are the analytic engine's own run of each mapping, never numbers written here.
"""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.search.parallel.extended import exact_evaluator
from tilewright.engine.search.parallel.search import search

from tests.agreement import assert_search_matches_engine, assert_search_plans_as_engine, engine_result

GPT = GPTSpec(name="gpt-fsdp", layers=4, hidden=1024, heads=16, seq_len=512, vocab=8192)
BATCH = 16


def _project(**mapping: object) -> Project:
    m = {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "global_batch": BATCH} | mapping
    return Project(name="fsdp", hardware=load_system("dgx-h100"), workload=GPT, mapping=Mapping(**m),
                   run=RunSettings(dtype="bf16", mode="train", engine="analytic", contention=False))


FSDP = [Candidate(1, 1, 8, 2, fsdp=True), Candidate(1, 2, 4, 1, fsdp=True),
        Candidate(1, 1, 8, 1, zero=3, sequence_parallel=False)]


@pytest.mark.parametrize("copies", [False, True], ids=["flat-buffers", "fsdp2-copies"])
@pytest.mark.parametrize("c", FSDP, ids=lambda c: c.label())
def test_a_gathering_candidate_is_timed_as_the_engine_runs_it(c: Candidate, copies: bool):
    """The search's evaluator of ZeRO-3/FSDP candidates against the analytic engine on the same project, with the
    project's ``fsdp_copies`` on and off: same time and memory, and the mapping the search runs carries the field."""
    p = assert_search_plans_as_engine(_project(), c, fsdp_copies=copies)
    assert p.mapping.zero == 3 and p.mapping.fsdp_copies is copies


def test_the_copies_cost_the_search_what_they_cost_the_engine():
    """One FSDP candidate with and without the copies: the search's times differ by the engine's difference, a
    positive one (memory-bound kernels on the compute stream), and neither peak moves (the copies hold no buffer
    beyond the gathered layer the engine already counts)."""
    c = FSDP[0]
    search_s = {copies: exact_evaluator(_project(fsdp_copies=copies), BATCH)(c) for copies in (False, True)}
    engine = {copies: engine_result(assert_search_plans_as_engine(_project(), c, fsdp_copies=copies))
              for copies in (False, True)}
    grew = engine[True].iteration_time_s - engine[False].iteration_time_s
    assert grew > 0
    assert search_s[True].iteration_time_s - search_s[False].iteration_time_s == pytest.approx(grew, rel=1e-9)
    assert search_s[True].peak_memory_bytes == pytest.approx(search_s[False].peak_memory_bytes, rel=1e-12)


@pytest.mark.parametrize("zero", [0, 1])
@pytest.mark.parametrize("copies", [False, True], ids=["flat-buffers", "fsdp2-copies"])
def test_the_fast_evaluator_stays_exact_where_nothing_is_gathered(zero: int, copies: bool):
    """First-stage candidates (ZeRO 0/1, the fast evaluator's) of a project asking for the copies: they gather
    no weights, so the copies change nothing, and the evaluator still times them as the engine does."""
    assert_search_matches_engine(_project(fsdp_copies=copies), Candidate(1, 2, 4, 1, zero=zero), keep_base=True)


def test_a_candidate_keeps_the_copies_only_where_it_gathers():
    """``Candidate.mapping`` carries the project's ``fsdp_copies`` to FSDP and ZeRO-3 candidates and drops it
    elsewhere, where it would be an idle field in the mapping the search shows."""
    base = _project(fsdp_copies=True).mapping
    assert Candidate(1, 1, 8, 1, fsdp=True).mapping(BATCH, base).fsdp_copies
    assert Candidate(1, 1, 8, 1, zero=3).mapping(BATCH, base).fsdp_copies
    for zero in (0, 1, 2):
        assert not Candidate(1, 1, 8, 1, zero=zero).mapping(BATCH, base).fsdp_copies
    assert not Candidate(1, 1, 8, 1, fsdp=True).mapping(BATCH, _project().mapping).fsdp_copies


def test_the_ranking_prices_the_copies():
    """A whole search narrowed to FSDP: every ranked candidate's time is the engine's on the mapping it shows,
    that mapping has the copies, and each candidate is slower than in the same search without them — a host-bound
    one too (mb 1 at 512 tokens, which the search's micro-batch steps rank): its layers' span, not their device
    time, covers FSDP's gathers and reduce-scatters (``PassBuilder.next_layer``), so copies in the idle device
    time hide nothing more."""
    narrow = {"zeros": ["fsdp"], "offload": False, "overlap": False}
    on = search(_project(fsdp_copies=True), 8, BATCH, top=0, resimulate=False, narrow=narrow)
    off = search(_project(), 8, BATCH, top=0, resimulate=False, narrow=narrow)
    assert on.ranked and {r.candidate for r in on.ranked} == {r.candidate for r in off.ranked}
    without = {r.candidate: r.iteration_time_s for r in off.ranked}
    base = _project(fsdp_copies=True)
    for r in on.ranked:
        assert r.candidate.fsdp
        mapping = r.candidate.mapping(BATCH, base.mapping)
        assert mapping.fsdp_copies
        want = engine_result(base.model_copy(update={"mapping": mapping}))
        assert r.iteration_time_s == pytest.approx(want.iteration_time_s, rel=1e-9)
        plain = engine_result(_project().model_copy(update={"mapping": r.candidate.mapping(BATCH, _project().mapping)}))
        assert without[r.candidate] == pytest.approx(plain.iteration_time_s, rel=1e-9)
        assert r.iteration_time_s > without[r.candidate]


# -- the command line --------------------------------------------------------------------------------
RUN = ["run", "--system", "dgx-h100", "--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads", "16",
       "--seq-len", "512", "--vocab", "8192", "--tp", "1", "--pp", "1", "--dp", "8", "--global-batch", "16",
       "--engine", "analytic", "--json", "--quiet"]


def _time(capsys, *flags: str) -> float:
    assert main([*RUN, *flags]) == 0
    return json.loads(capsys.readouterr().out)["iteration_time_s"]


@pytest.mark.parametrize("sharding", [["--fsdp"], ["--zero", "3"]], ids=["fsdp", "zero3"])
def test_run_flag_sets_the_field(capsys, sharding: list[str]):
    """``--fsdp-copies`` is ``--set mapping.fsdp_copies=true``: the same time, longer than without it, at 4k
    tokens per sample and at 512, where the run waits for the host most of the time: the copies fill the device's
    idle time there, and a host-bound layer's cover of FSDP's overlapped collectives is its span, not its device
    time (``PassBuilder.next_layer``), so they cost their launches and hide nothing more."""
    for tokens in ("4096", "512"):
        longer = ("--seq-len", tokens)
        flag = _time(capsys, *sharding, *longer, "--fsdp-copies")
        assert flag == pytest.approx(_time(capsys, *sharding, *longer, "--set", "mapping.fsdp_copies=true"),
                                     rel=1e-12)
        assert flag > _time(capsys, *sharding, *longer)


@pytest.mark.parametrize("flags", [[], ["--zero", "1"], ["--zero", "2"], ["--fsdp", "--mode", "infer"]],
                         ids=["zero0", "zero1", "zero2", "inference"])
def test_run_refuses_the_flag_where_nothing_is_gathered(capsys, flags: list[str]):
    assert main([*RUN, *flags, "--fsdp-copies"]) == 2
    assert "--fsdp-copies" in capsys.readouterr().err


SEARCH = ["search", "--system", "dgx-h100", "--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads", "16",
          "--seq-len", "512", "--vocab", "8192", "--devices", "8", "--global-batch", "16", "--no-simulate", "--json",
          "--quiet", "--no-offload", "--no-overlap"]


def _ranked(capsys, *flags: str) -> dict[tuple, float]:
    assert main([*SEARCH, *flags]) == 0
    rows = json.loads(capsys.readouterr().out)["candidates"]
    return {(r["tp"], r["pp"], r["dp"], r["micro_batch"], r["fsdp"]): r["iteration_time_s"] for r in rows}


def test_search_flag_prices_the_copies(capsys):
    """``search --fsdp-copies`` ranks the same FSDP candidates, each slower by its copies."""
    on, off = _ranked(capsys, "--zero", "fsdp", "--fsdp-copies"), _ranked(capsys, "--zero", "fsdp")
    assert on and on.keys() == off.keys()
    assert all(on[k] > off[k] for k in on)


def test_search_keeps_the_project_files_copies(tmp_path, capsys):
    """A project file with ``fsdp_copies`` searched: its FSDP candidates are priced with the copies, as the
    flag prices them (the field is one of the mapping's kept fields, not a degree the search chooses)."""
    path = tmp_path / "fsdp.json"
    path.write_text(_project(fsdp=True, fsdp_copies=True).model_dump_json())
    assert main(["search", str(path), "--devices", "8", "--no-simulate", "--json", "--quiet", "--no-offload",
                 "--no-overlap", "--zero", "fsdp"]) == 0
    rows = json.loads(capsys.readouterr().out)["candidates"]
    by_flag = _ranked(capsys, "--zero", "fsdp", "--fsdp-copies")
    assert {(r["tp"], r["pp"], r["dp"], r["micro_batch"], r["fsdp"]): r["iteration_time_s"] for r in rows} == \
        pytest.approx(by_flag, rel=1e-12)


@pytest.mark.parametrize("zeros", ["0,1", "1,2"])
def test_search_refuses_the_flag_without_gathering_candidates(capsys, zeros: str):
    assert main([*SEARCH, "--zero", zeros, "--fsdp-copies"]) == 2
    assert "--fsdp-copies" in capsys.readouterr().err
