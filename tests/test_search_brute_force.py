"""The search against a brute force over the space it claims to vary, on spaces small enough to time every mapping.

The brute force enumerates every mapping of a part of the dimensions the search's docstrings name (tp, pp, dp,
micro-batch, sequence parallelism, ZeRO 0-3 and FSDP, context parallelism, the overlapped gradient reduction and
tensor-parallel overlap, without recomputation, which these models do not need), keeps those ``plan.checks``
accepts (what ``tilewright run`` refuses is not a mapping) and times each with ``build_plan`` and the analytic
engine, as ``make_plan`` and ``run --engine analytic`` do (the workload and system built once, for speed), not with
the search's evaluator. The search's best must be no slower than the best that fits (the search also tries
recomputation, and times with that engine too), and every candidate it ranks must be a mapping the checks accept,
that fits, with the engine's time and memory.
"""

from __future__ import annotations

import itertools

import pytest
from tilewright.engine.engines.analytic.engine import AnalyticEngine
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Project, RunSettings
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.plan.checks import check_project
from tilewright.engine.plan.plan import build_plan
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.search.parallel.extended import Extensions, micro_batch_steps, overlap_twins, zero_steps
from tilewright.engine.search.parallel.search import search
from tilewright.engine.workloads import build_workload

DEVICES = 4


def _project(spec: GPTSpec) -> Project:
    return Project(name="bf", hardware=load_system("dgx-a100"), workload=spec,
                   run=RunSettings(dtype="bf16", engine="analytic"))


def _space(ext: Extensions, batch: int, layers: int):
    """Every candidate of ``ext``'s space without recomputation on at most ``DEVICES`` devices, by arithmetic alone
    (the checks judge the rest)."""
    shard = [(z, False) for z in ext.zeros] + ([(3, True)] if ext.fsdp else [])
    flags = [False, True] if ext.overlap else [False]
    for tp, pp, cp, dp in itertools.product(range(1, DEVICES + 1), range(1, layers + 1), ext.cps,
                                            range(1, DEVICES + 1)):
        if tp * pp * cp * dp > DEVICES or batch % dp:
            continue
        for mb in (d for d in range(1, batch // dp + 1) if (batch // dp) % d == 0):
            for v, sp, (zero, fsdp), ovl_grad, ovl_tp, order in itertools.product(
                    range(1, 9), [False, True], shard, flags, flags, ["tp-dp-pp", "tp-pp-dp"]):
                if (v > 1 and pp == 1) or (order != "tp-dp-pp" and (pp == 1 or dp == 1)):
                    continue
                yield Candidate(tp, pp, dp, mb, v, Recompute.none, sp, zero, rank_order=order, cp=cp, fsdp=fsdp,
                                overlap_grad_reduce=ovl_grad, overlap_tp=ovl_tp)


class _Runs:
    """(iteration time, peak memory) of a candidate's mapping as ``run --engine analytic`` gives them; None where
    the checks refuse it or it runs out of memory."""

    def __init__(self, project: Project, batch: int) -> None:
        self.project, self.batch = project, batch
        self.workload = build_workload(project.workload)
        self.graphs: dict[int, object] = {}
        self.engine = AnalyticEngine(timeline=False, energy=False)

    def __call__(self, c: Candidate) -> tuple[float, float] | None:
        try:
            p = self.project.model_copy(update={"mapping": c.mapping(self.batch, self.project.mapping)})
        except ValueError:
            return None
        if check_project(p, workload=self.workload):
            return None
        n = p.mapping.devices
        if n not in self.graphs:
            self.graphs[n] = elaborate(p.hardware, devices_needed=n)
        r = self.engine.run(build_plan(p, self.graphs[n], self.workload))
        return None if r.oom is not None else (r.iteration_time_s, r.peak_memory_bytes)


def _compare(project: Project, ext: Extensions, batch: int) -> tuple[float, float]:
    """(search's best, brute force's best); asserts each ranked candidate is a fitting mapping with its time."""
    runs = _Runs(project, batch)
    brute = [t for c in dict.fromkeys(_space(ext, batch, project.workload.layers)) if (t := runs(c)) is not None]
    assert brute
    result = search(project, DEVICES, batch, top=0, keep=4, resimulate=False, extensions=ext)
    assert result.ranked
    for r in result.ranked:
        run = runs(r.candidate)
        assert run is not None, f"{r.candidate.label()}: refused by the checks or out of memory"
        assert r.iteration_time_s == pytest.approx(run[0], rel=1e-9), r.candidate.label()
        assert r.peak_memory_bytes == pytest.approx(run[1], rel=1e-9), r.candidate.label()
    return result.ranked[0].iteration_time_s, min(t for t, _ in brute)


def test_long_sequences_find_the_fastest_context_ring():
    """One 16k-token sequence per iteration: dp is 1 (it divides the global batch), so a ring regrouped from the
    seed's replicas never exists; the rings from the tensor group or the idle devices must be reached."""
    spec = GPTSpec(name="long", layers=2, hidden=1024, heads=8, seq_len=16384, vocab=32000)
    ext = Extensions(eps=[1], cps=[1, 2, 4], zeros=[0, 1], fsdp=False, offload=None, overlap=True, recipes=[])
    best, brute = _compare(_project(spec), ext, 1)
    assert best <= brute * (1 + 1e-9)


def test_a_model_that_fits_only_sharded_finds_its_overlapped_reduction():
    """One 32k-wide layer (15 B parameters) whose 2 heads allow tp ≤ 2: on 4 devices it fits only with ZeRO over
    dp 2. The seeds that missed memory got their sharded variants but neither the overlapped gradient reduction
    nor the larger micro-batch the sharding frees memory for (the first stage seeds the smallest that missed)."""
    spec = GPTSpec(name="wide", layers=1, hidden=32768, heads=2, seq_len=2048, vocab=32000)
    ext = Extensions(eps=[1], cps=[1], zeros=[0, 1, 2, 3], fsdp=True, offload=None, overlap=True, recipes=[])
    best, brute = _compare(_project(spec), ext, 4)
    assert best <= brute * (1 + 1e-9)


def test_overlap_twins_add_one_option_where_it_applies():
    """Each twin turns on exactly one option the candidate lacks, only where Megatron-Core runs it, and none with
    the overlap narrowed out."""
    ext = Extensions(eps=[1, 2], overlap=True)
    c = Candidate(2, 2, 2, 1, 2, Recompute.none, True, 1, ep=2)
    twins = overlap_twins(c, ext)
    assert {(t.overlap_grad_reduce, t.overlap_tp, t.overlap_ep, t.delay_wgrad) for t in twins} == {
        (True, False, False, False), (False, True, False, False), (False, False, True, False)}
    assert overlap_twins(Candidate(2, 1, 1, 1, sequence_parallel=False), ext) == []  # no replicas, no sp, no ep
    fsdp = Candidate(1, 1, 4, 1, zero=3, fsdp=True)  # FSDP prefetches whatever the flag says
    assert overlap_twins(fsdp, ext) == []
    ring = Candidate(1, 1, 1, 1, zero=1, cp=2)  # the ring's replicas reduce gradients too
    assert [t.overlap_grad_reduce for t in overlap_twins(ring, ext)] == [True]
    full = Candidate(1, 2, 2, 1, 1, Recompute.full, ep=2)  # Megatron-Core asserts on full recomputation
    assert not any(t.overlap_ep for t in overlap_twins(full, ext))
    assert [t.delay_wgrad for t in overlap_twins(Candidate(1, 1, 2, 1, ep=2, overlap_ep=True), ext)] == [False, True]
    assert overlap_twins(c, Extensions(eps=[1, 2], overlap=False)) == []


def test_micro_batch_steps_are_the_neighbouring_divisors_of_a_replicas_share():
    """12 samples over dp 2: each replica's 6 split into micro-batches of 1, 2, 3 or 6."""
    c = Candidate(1, 1, 2, 2)
    assert [s.micro_batch for s in micro_batch_steps(c, 12)] == [1, 3]
    assert [s.micro_batch for s in micro_batch_steps(Candidate(1, 1, 2, 1), 12)] == [2]
    assert [s.micro_batch for s in micro_batch_steps(Candidate(1, 1, 2, 6), 12)] == [3]
    assert micro_batch_steps(Candidate(1, 1, 1, 1), 1) == []


def test_zero_steps_are_the_neighbouring_stages_the_space_tries():
    """ZeRO-1 among 0-3 steps to 0 and 2, keeping its overlap options; the narrowed list's neighbours only; none for
    FSDP or without replicas (a context ring's are replicas)."""
    ext = Extensions(zeros=[0, 1, 2, 3])
    c = Candidate(1, 1, 4, 1, zero=1, ep=2, overlap_ep=True)
    steps = zero_steps(c, ext)
    assert [s.zero for s in steps] == [0, 2] and all(s.overlap_ep and s.ep == 2 for s in steps)
    assert [s.zero for s in zero_steps(c, Extensions(zeros=[1, 3]))] == [3]
    assert zero_steps(Candidate(1, 1, 4, 1, zero=3, fsdp=True), ext) == []
    assert zero_steps(Candidate(2, 1, 1, 1), ext) == []
    assert [s.zero for s in zero_steps(Candidate(1, 1, 1, 1, cp=2), ext)] == [1]


def test_around_the_best_each_candidate_once() -> None:
    """Three heads whose neighbours overlap (ZeRO-1's overlapped twin is ZeRO-2-with-overlap's ZeRO step, and the
    micro-batch-2 head's step back is the first head): every neighbour not yet timed comes once, the timed ones
    never."""
    from tilewright.engine.search.parallel.second_stage import around_best

    ext = Extensions(eps=[1], cps=[1], zeros=[0, 1, 2], fsdp=False, overlap=True)
    heads = [Candidate(1, 1, 4, 1, 1, Recompute.none, False, 1),
             Candidate(1, 1, 4, 1, 1, Recompute.none, False, 2, overlap_grad_reduce=True),
             Candidate(1, 1, 4, 2, 1, Recompute.none, False, 1)]
    near = around_best(heads, ext, 16, set(heads))
    assert len(near) == len(set(near)) and not set(near) & set(heads)
    every = {t for c in heads for t in (*overlap_twins(c, ext), *zero_steps(c, ext), *micro_batch_steps(c, 16))}
    assert set(near) == every - set(heads)
    assert Candidate(1, 1, 4, 1, 1, Recompute.none, False, 1, overlap_grad_reduce=True) in near
