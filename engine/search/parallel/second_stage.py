"""The search's second stage run: which first-stage candidates seed it, their variants planned and timed by
the analytic engine (``extended``: what it varies and how a variant is timed), and those that fit merged
into the ranking."""

from __future__ import annotations

from dataclasses import replace

from tilewright.engine.ir.project import Project
from tilewright.engine.jobs import Reporter
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.search.parallel.extended import (
    Extensions,
    Planner,
    exact_evaluator,
    micro_batch_steps,
    overlap_twins,
    variants,
    zero_steps,
)
from tilewright.engine.search.parallel.moe import ExpertBound
from tilewright.engine.search.parallel.ranking import Best, Ranked, SearchResult

SEEDS = 3  # variants of this many kept candidates and as many that missed memory
# rounds around the best SEEDS ranked (``extended.overlap_twins``, ``zero_steps``, ``micro_batch_steps``), while new
# candidates reach them: each round's best may lack another overlap option or take another ZeRO or micro-batch step
POLISH_ROUNDS = 4


def missed_seeds(misses: tuple[Best, Best] | None) -> list[Ranked]:
    """The seeds that missed memory, from the first stage's two lists (``search``): the fastest, then the
    fastest with dp ≥ 2 not among them (where ep, cp and sharding apply)."""
    if misses is None:
        return []
    out = misses[0].sorted()
    return out + [r for r in misses[1].sorted() if r.candidate not in {o.candidate for o in out}]


def extend(
    project: Project,
    ext: Extensions,
    ranked: list[Ranked],
    missed: list[Ranked],
    result: SearchResult,
    report: Reporter,
    moe_seeds: list[Candidate] | None = None,
    bound: ExpertBound | None = None,
    extra: list[Candidate] | None = None,
    planner: Planner | None = None,
) -> list[Ranked]:
    """Every variant (``extended.variants``) of the fastest ``SEEDS`` kept candidates and of the fastest
    ``SEEDS`` that missed memory (and as many with dp ≥ 2), and (MoE) of each ep degree's seed at that degree
    (``moe``), timed by the plan and the analytic engine; those that fit join the ranking. Variants whose
    memory lower bound (``moe.ExpertBound.may_fit``) exceeds the device are not planned. ``extra``:
    candidates planned as they are (the first stage's recompute-module lists that fit,
    ``first_stage.walk_space``). First-stage candidates the user's restrictions exclude
    (``Extensions.allows``) leave it. Last, the best ``SEEDS`` ranked are tried with each overlap option they lack
    and at the neighbouring ZeRO stages and micro-batches (``extended.overlap_twins``, ``zero_steps``,
    ``micro_batch_steps``), round after round while that brings new candidates to the top."""
    evaluate = exact_evaluator(project, result.global_batch, planner)
    seeds = [(r.candidate, True, ext) for r in ranked[:SEEDS]] + [(r.candidate, False, ext) for r in missed]
    for s in moe_seeds or []:  # at its own degree only: the others have their own seeds
        seeds.append((s, True, replace(ext, eps=[s.ep], cps=[1], offload=None)))
    todo: list[Candidate] = []
    seen = {r.candidate for r in ranked}
    for c in extra or []:
        if c not in seen:
            seen.add(c)
            todo.append(c)
    for seed, fits, narrowed in seeds:
        for c in variants(seed, narrowed, project.workload, fits):
            if c not in seen:
                seen.add(c)
                if bound is None or _may_fit(c, bound, result.global_batch):
                    todo.append(c)
    out = [r for r in ranked if ext.allows(r.candidate)]
    for i, c in enumerate(todo):
        report.check()
        report(i / max(len(todo), 1), f"search: second stage {i + 1}/{len(todo)}: {c.label()}")
        timed = evaluate(c)
        result.extended += 1
        if timed is not None and timed.fits:
            out.append(Ranked(c, timed.iteration_time_s, timed.peak_memory_bytes))
    out.sort(key=lambda r: r.iteration_time_s)
    polished: set[Candidate] = set()
    around = 0  # candidates timed around the best
    for _ in range(POLISH_ROUNDS):  # the best so far with each overlap option they lack and the next micro-batches
        heads = [r.candidate for r in out[:SEEDS] if r.candidate not in polished]
        if not heads:  # the best are those polished already
            break
        polished.update(heads)
        for t in around_best(heads, ext, result.global_batch, seen):
            report.check()
            report(1.0, f"search: second stage, around the best: {t.label()}")
            seen.add(t)
            timed = evaluate(t)
            result.extended += 1
            around += 1
            if timed is not None and timed.fits:
                out.append(Ranked(t, timed.iteration_time_s, timed.peak_memory_bytes))
        out.sort(key=lambda r: r.iteration_time_s)
    report(1.0, f"search: second stage, {len(todo) + around} candidates timed")
    return out


def _may_fit(c: Candidate, bound: ExpertBound, global_batch: int) -> bool:
    """``c`` may fit by its memory lower bound (its dense layout's activations and the plan's state)."""
    est = bound.est
    table, key = est.layer_table(c)
    chunks = est.chunks(table, key, c.pp, c.interleave)
    return bound.may_fit(c, c.micro_batches(global_batch), chunks)


def around_best(heads: list[Candidate], ext: Extensions, global_batch: int, seen: set[Candidate]) -> list[Candidate]:
    """The candidates next to ``heads`` not timed yet (``seen``): each with an overlap option it lacks, at the
    neighbouring ZeRO stages and micro-batches (``extended.overlap_twins``, ``zero_steps``, ``micro_batch_steps``),
    each once — one head's twin may be another's step."""
    near = (t for c in heads
            for t in (*overlap_twins(c, ext), *zero_steps(c, ext), *micro_batch_steps(c, global_batch)))
    return list(dict.fromkeys(t for t in near if t not in seen))
