"""Parallelism search: the fastest tp × pp × dp × micro-batch × interleave × recompute × sequence
parallelism × ZeRO-1 × placement for a model, system, device budget and global batch, then (second
stage, ``extended``) expert and context parallelism, ZeRO-2/3, FSDP and optimizer offload around the best
candidates of the first stage and the fastest that missed memory — and, for a mixture-of-experts model, per
expert-parallel degree the fastest that fits once its routed experts are spread over that many ranks
(``moe``: the first stage times ep 1 only, and ep must divide dp, so seeds at ep 1 never reach the degrees
large MoE models are trained with).

Calculon (Isaev et al., SC'23) evaluates every point of this space with its analytic model; this search
walks the same space but (1) rejects by memory before timing — closed-form state and activation bytes
(``estimate.Estimator.memory``), with the micro-batch loop stopping at the first size that fits nowhere,
since activations grow with it; (2) times the survivors from cached per-layer costs and linear
collective models instead of planning each one (``estimate``); (3) skips a candidate whose
communication-free pipeline time already exceeds the worst of the current best list (branch and
bound); and (4) re-simulates only the top k with the event engine, so the ranking the user sees is
checked by the simulator with contention.

What the project's mapping says besides the parallelism (formats, fidelity, spatial split policy, fusion,
memory levels) is kept and costed as the engines cost it, so on chips with a grid of cores the ranking
is the analytic engine's, and each kept candidate carries its per-chip splits (``spatial_splits``). Only
training is searched: an inference project is refused.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field, replace
from itertools import count
from typing import Any

from tilewright.engine.errors import InputError, Problem
from tilewright.engine.hardware import elaborate
from tilewright.engine.ir.mapping import PlacementStrategy, Recompute
from tilewright.engine.ir.project import EngineKind, Mode, Project
from tilewright.engine.jobs import CancelFn, ProgressFn, Reporter
from tilewright.engine.plan.cuda_graphs import problems
from tilewright.engine.plan.residency import resolve
from tilewright.engine.results.result import Result
from tilewright.engine.search.op_settings import fusion_allows
from tilewright.engine.search.parallel.candidate import Candidate, replicas
from tilewright.engine.search.parallel.estimate import Chunks, Estimator
from tilewright.engine.search.parallel.extended import (
    Extensions,
    Planner,
    default_extensions,
    exact_evaluator,
    variants,
    with_recipes,
)
from tilewright.engine.search.parallel.moe import ExpertBound, MoESeeds, moe_experts
from tilewright.engine.search.space import Space, recompute_options, tensor_options
from tilewright.engine.workloads import build_workload
from tilewright.engine.workloads.graph import WorkloadGraph

SOURCE = "command line"
REPORT_EVERY_S = 0.5
SEEDS = 3  # second stage: variants of this many kept candidates and as many that missed memory


@dataclass
class Ranked:
    candidate: Candidate
    iteration_time_s: float  # fast estimate (the analytic engine's model)
    peak_memory_bytes: float
    event: Result | None = None
    spatial_splits: list[dict] = field(default_factory=list)  # grid devices: each forward op's split per stage


@dataclass
class SearchResult:
    ranked: list[Ranked]
    global_batch: int
    devices: int
    space: int = 0  # candidates before pruning
    evaluated: int = 0  # memory computed
    feasible: int = 0  # fit in memory
    timed: int = 0  # iteration time estimated (the rest were bounded out)
    extended: int = 0  # second-stage candidates (ep, cp, ZeRO-2/3, FSDP, offload, overlap) timed analytically
    wall_time_s: float = 0.0
    search_time_s: float = 0.0  # enumeration and ranking, before re-simulation
    notes: list[str] = field(default_factory=list)


def build_space(project: Project, devices: int, global_batch: int, blocks: int, est: Estimator) -> Space:
    spec = project.workload
    space = Space(
        devices=devices,
        global_batch=global_batch,
        blocks=blocks,
        tps=[t for t in tensor_options(spec, devices) if fusion_allows(est.workload, est.settings.fused, t)],
        recomputes=graph_recomputes(project, est.workload, recompute_options(spec)),
        seq_len=getattr(spec, "seq_len", None),
    )
    # Search the tensor degrees nearest the innermost domain (a DGX node, a die) first: the best mappings
    # are usually there, and finding them early tightens the bound that skips the rest.
    first = est.hw.devices[0].node.rsplit("/", 1)[0]
    domain = sum(1 for d in est.hw.devices if d.node.rsplit("/", 1)[0] == first)
    space.tps.sort(key=lambda t: (abs(math.log2(t / domain)), t))
    # Placement strategies only differ on grids (``engine.plan.placement``); elsewhere row-major is all.
    if not any(d.coord for d in est.hw.devices):
        space.placements = [PlacementStrategy.row_major]
    else:
        space.placements = list(PlacementStrategy)
    return space


def graph_recomputes(project: Project, workload: WorkloadGraph, options: list[Recompute]) -> list[Recompute]:
    """The recomputation choices ``mapping.cuda_graph_scope`` permits (``plan.cuda_graphs.problems``, which
    ``plan.checks`` applies): none under 'full_iteration', no full recomputation beside a partial scope, no
    default selective recomputation (core_attn) beside 'attn'. Problems the scope has whatever the choice
    are the checks' to report, not a reason to drop every choice."""
    scope = project.mapping.cuda_graph_scope
    if not scope:
        return options
    layers = [workload.layer_ops(i) for i in workload.block_layers]
    base = set(problems(scope, layers, True, Recompute.none.value, None))
    return [rc for rc in options if set(problems(scope, layers, True, rc.value, None)) <= base]


def _validate(project: Project, devices: int, global_batch: int) -> None:
    if devices < 1:
        raise InputError(SOURCE, Problem("--devices", f"{devices} must be at least 1"))
    if global_batch < 1:
        raise InputError(SOURCE, Problem("--global-batch", f"{global_batch} must be at least 1"))


def _check_levels(project: Project, est: Estimator) -> None:
    """``mapping.memory_levels`` must name memories the devices reach: refused before the walk, which would
    otherwise stop at the first candidate."""
    if not est.levels:
        return
    try:
        resolve(project.mapping, est.hw, 0, est.dev, {})
    except ValueError as exc:
        where, _, reason = str(exc).partition(": ")
        raise InputError(project.name or SOURCE, Problem(where, reason)) from None


class _Best:
    """The ``keep`` fastest candidates so far; its worst time is the bound others must beat."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.heap: list[tuple[float, int, Ranked]] = []
        self._n = count()

    @property
    def bound(self) -> float:
        return -self.heap[0][0] if len(self.heap) >= self.keep else float("inf")

    def offer(self, r: Ranked) -> None:
        item = (-r.iteration_time_s, next(self._n), r)
        if len(self.heap) < self.keep:
            heapq.heappush(self.heap, item)
        elif r.iteration_time_s < -self.heap[0][0]:
            heapq.heapreplace(self.heap, item)

    def sorted(self) -> list[Ranked]:
        return [r for _, _, r in sorted(self.heap, key=lambda t: (-t[0], t[1]))]


def search(
    project: Project,
    devices: int,
    global_batch: int,
    *,
    top: int = 3,
    keep: int = 20,
    resimulate: bool = True,
    progress: ProgressFn | None = None,
    cancel: CancelFn | None = None,
    extensions: Extensions | None = None,
    narrow: dict[str, Any] | None = None,
) -> SearchResult:
    """Rank every legal mapping of ``project``'s model on ``devices`` devices (at most) of its system, then
    re-simulate the best ``top`` on the event engine (``resimulate``). ``extensions``: what the second
    stage varies (None: ``extended.default_extensions`` — ep for MoE models, cp from 8k tokens, ZeRO 0–3,
    FSDP, the optimizer in host memory when the node has one); ``narrow``: that default space narrowed by
    ``default_extensions``' keyword lists (``eps``, ``cps``, ``zeros``, ``offload``), as the CLI's flags say.

    ``progress(fraction, text)``: the walk over the space takes one share of the bar and each re-simulation
    one more. ``cancel()`` is checked between (tp, pp) groups of candidates and inside each re-simulation;
    it stops the search with ``Cancelled``."""
    _validate(project, devices, global_batch)
    if project.run.mode is not Mode.train:
        raise InputError(
            SOURCE,
            Problem(
                "run.mode",
                "search ranks training mappings; this project's run.mode is "
                f"'{project.run.mode.value}' (set it to 'train')",
            ),
        )
    start = time.perf_counter()
    report = Reporter(progress, cancel)
    sims = top if resimulate else 0
    walk = report.part(0.0, 1.0 / (1 + sims))
    try:
        hw = elaborate(project.hardware, devices_needed=devices)
    except ValueError as exc:
        raise InputError(SOURCE, Problem("--devices", str(exc))) from None
    workload = build_workload(project.workload)
    est = Estimator(project, hw, workload)
    _check_levels(project, est)
    space = build_space(project, devices, global_batch, len(workload.block_layers), est)
    result = SearchResult([], global_batch, devices, space=space.size())
    walk(0.0, f"search: {result.space:,} candidates in the space, {len(hw.devices):,} devices elaborated")
    best = _Best(max(keep, top))
    ext = extensions if extensions is not None else default_extensions(project, hw, est.dev, **(narrow or {}))
    ext = with_recipes(ext, workload)
    # seeds that missed memory: the fastest, and the fastest with dp ≥ 2 (where ep, cp and sharding apply)
    misses = (_Best(SEEDS), _Best(SEEDS)) if ext.active else None
    experts = moe_experts(project.workload)
    bound = ExpertBound(est, experts)
    # MoE: per expert-parallel degree, the fastest candidate that fits with its experts spread (``moe``)
    moe = MoESeeds(bound, ext.eps) if experts and any(e > 1 for e in ext.eps) else None
    first = report.part(0.0, 1.0 / (1 + sims) * (0.8 if ext.active else 1.0))
    recipes = (ext.recipes, _Best(SEEDS)) if ext.recipes else None
    _walk(space, est, best, result, first, start, misses, moe, recipes)
    planner = Planner(workload, {devices: hw})  # the second stage's and the re-simulations' plans
    ranked = _refine(best.sorted(), est, global_batch)
    if ext.active:
        second = report.part(0.8 / (1 + sims), 1.0 / (1 + sims))
        moe_seeds = moe.seeds() if moe is not None else []
        if moe_seeds:
            result.notes.append(
                "expert-parallel seeds (fastest that fit with the routed experts over ep ranks): "
                + ", ".join(c.label() for c in moe_seeds)
            )
        fitting = recipes[1].sorted() if recipes is not None else []
        if fitting:
            result.notes.append("recompute-module candidates that fit where the default selective recomputation "
                                "does not: " + ", ".join(r.candidate.label() for r in fitting))
        ranked = _extend(project, ext, ranked, _seeds(misses), result, second, moe_seeds, bound,
                         [r.candidate for r in fitting], planner)
    result.ranked = ranked[: best.keep]
    for r in result.ranked:
        r.spatial_splits = est.spatial_splits(r.candidate)
    result.search_time_s = time.perf_counter() - start
    walk(
        1.0,
        f"search: {result.evaluated:,} evaluated, {result.feasible:,} fit in memory, {result.timed:,} timed "
        f"(+{result.extended:,} in the second stage) in {result.search_time_s:.1f} s",
    )
    if resimulate:
        _resimulate(project, result, top, report.part(1.0 / (1 + sims), 1.0), planner)
    result.wall_time_s = time.perf_counter() - start
    return result


def _walk(
    space: Space,
    est: Estimator,
    best: _Best,
    result: SearchResult,
    report: Reporter,
    start: float,
    misses: tuple[_Best, _Best] | None = None,
    moe: MoESeeds | None = None,
    recipes: tuple[list[tuple[str, ...]], _Best] | None = None,
) -> None:
    """The first stage. ``misses``: where to keep the candidates that fit nowhere, by their
    communication-free time (the second stage's seeds for sharding, ep, cp and offload); ``moe``: where to
    keep, per ep degree, the fastest that fit with their routed experts spread over that many ranks (a
    larger micro-batch is tried while any candidate fits so); ``recipes``: the recompute-module lists to try
    and where to keep the fastest candidates that miss memory with the default selective recomputation but
    fit with one of those lists (``_recipe_fits``; planned by the second stage)."""
    gb = space.global_batch
    capacity = est.capacity
    last_report = start
    counts = space.counts()
    total = max(result.space, 1)
    walked = 0  # candidates of the (tp, sp, rc, pp) groups done so far, for the fraction
    for ti, tp in enumerate(space.tps):
        for sp in space.sequence_parallel(tp):
            for rc in space.recomputes:
                tables: dict[int, tuple] = {}  # micro-batch → layer table: the row-major tensor group is fixed
                for pp in space.pps(tp):
                    chunked: dict[tuple[int, int], Chunks] = {}  # (micro-batch, v) → chunks, at this pp
                    report.check()
                    now = time.perf_counter()
                    if now - last_report > REPORT_EVERY_S:
                        last_report = now
                        report(
                            walked / total,
                            f"search: tp {tp} ({ti + 1}/{len(space.tps)}), pp {pp}: {result.evaluated:,} evaluated, "
                            f"{result.feasible:,} fit, best {_fmt(best)} [{now - start:.1f} s]",
                        )
                    walked += counts[(tp, pp)]
                    for dp in space.dps(tp, pp):
                        orders = space.rank_orders if pp > 1 and dp > 1 else space.rank_orders[:1]
                        zeros = space.zeros if dp > 1 else [0]
                        dense_done = False  # a micro-batch the dense walk would have stopped at was passed
                        for mb in space.micro_batches(dp):
                            m = gb // (dp * mb)
                            fits = dense_fits = False
                            for v in space.interleaves(pp, m):
                                c0 = Candidate(tp, pp, dp, mb, v, rc, sp, 0)
                                chunks = chunked.get((mb, v))
                                if chunks is None:
                                    if mb not in tables:
                                        tables[mb] = est.layer_table(c0)
                                    table, key = tables[mb]
                                    chunks = chunked[(mb, v)] = est.chunks(table, key, pp, v)
                                layouts = len(orders) * len(space.placements)
                                fitting = _fitting(c0, m, zeros, est, chunks, capacity, result, layouts)
                                lower = est.lower_bound(c0, m, chunks)  # without any communication
                                if moe is not None and moe.offer(c0, m, chunks, lower):
                                    fits = True
                                if not fitting and recipes is not None and rc is Recompute.selective:
                                    # a list re-runs the attention core and more (or MLA's cheaper up
                                    # projections instead): no faster than c0 without communication, so
                                    # pruned by the same bound as the kept candidates
                                    if lower < min(best.bound, recipes[1].bound):
                                        for r in _recipe_fits(c0, m, est, recipes[0]):
                                            recipes[1].offer(r)
                                if not fitting:
                                    # the seeds that missed memory are the dense walk's, whatever MoE walks on
                                    if misses is not None and not dense_done:
                                        miss = Ranked(c0, lower, 0.0)
                                        misses[0].offer(miss)
                                        if dp > 1:
                                            misses[1].offer(miss)
                                    continue
                                fits = dense_fits = True
                                # without any communication: if that is already slower than the worst
                                # kept, no ZeRO setting or rank order of this candidate can enter the list
                                # (with memory_levels the residency, resolved per ZeRO setting, changes it)
                                if lower >= best.bound and len(space.placements) == 1 and not est.levels:
                                    continue
                                for zero, need in fitting:
                                    _time_layouts(c0, chunks, lower, m, zero, need, space, orders, est, best, result)
                            dense_done = dense_done or not dense_fits
                            if not fits:
                                break  # activations grow with the micro-batch: larger ones fit nowhere either


def _fitting(
    c0: Candidate,
    m: int,
    zeros: list[int],
    est: Estimator,
    chunks: Chunks,
    capacity: float,
    result: SearchResult,
    layouts: int,
) -> list[tuple[int, float]]:
    """(zero, bytes) of the ZeRO settings under which ``c0`` fits. Memory does not depend on placement,
    so one evaluation covers every layout of the candidate (counted as such)."""
    result.evaluated += len(zeros) * layouts
    out = []
    if est.levels:  # mapping.memory_levels: each level against its own capacity
        for zero in zeros:
            ok, need = est.fits(replace(c0, zero=zero), m, chunks)
            if ok:
                out.append((zero, need))
        result.feasible += len(out) * layouts
        return out
    parts = est.memory_parts(c0, m, chunks)
    for zero in zeros:
        per = est.state_bytes_per_param(zero, replicas(c0))
        edge = est.edge_weights(c0, zero)  # bf16 edge layers' weights (``Estimator.edge_bytes``)
        need = max(p * per + rest + e for (p, rest), e in zip(parts, edge, strict=True))
        if need <= capacity:
            out.append((zero, need))
    result.feasible += len(out) * layouts
    return out


def _recipe_fits(c0: Candidate, m: int, est: Estimator, recipes: list[tuple[str, ...]]) -> list[Ranked]:
    """``c0`` (selective recomputation of the default modules, missing memory) with each recompute-module list
    under which it fits (ZeRO-1 with dp > 1), ranked by its communication-free time: the layer table's stored
    activations and selective pass with those modules (``layer_table``), the state as ``_fitting`` counts it.
    Not with ``memory_levels`` (each level's own capacity: the second stage's plans decide)."""
    if est.levels:
        return []
    out = []
    for modules in recipes:
        c = replace(c0, recompute_modules=modules, zero=1 if c0.dp > 1 else 0)
        table, key = est.layer_table(c)
        chunks = est.chunks(table, key, c.pp, c.interleave)
        need = est.memory(c, m, chunks)
        if need <= est.capacity:
            out.append(Ranked(c, est.lower_bound(c, m, chunks), need))
    return out


def _time_layouts(
    c0: Candidate,
    chunks0: Chunks,
    bound0: float,
    m: int,
    zero: int,
    need: float,
    space: Space,
    orders: list[str],
    est: Estimator,
    best: _Best,
    result: SearchResult,
) -> None:
    """Time ``c0`` with ``zero`` under each placement; an alternative placement is kept only if it is
    strictly faster than the default (on a switched cluster most are exact ties)."""
    reference = None
    for strategy in space.placements:
        if not est.comm.distinct(strategy, c0.tp * c0.dp):
            continue
        for order in orders:
            c = Candidate(
                c0.tp,
                c0.pp,
                c0.dp,
                c0.micro_batch,
                c0.interleave,
                c0.recompute,
                c0.sequence_parallel,
                zero,
                strategy,
                order,
            )
            chunks, bound = chunks0, bound0
            if strategy is not PlacementStrategy.row_major:  # the tensor group may sit elsewhere
                table, key = est.layer_table(c)
                chunks = est.chunks(table, key, c.pp, c.interleave)
            # residency (memory_levels) and, on a grid, each stage's own tensor group change the times
            chunks = est.timed_chunks(c, m, chunks)
            if chunks is not chunks0:
                bound = est.lower_bound(c, m, chunks)
            if bound >= best.bound:
                continue
            t = est.iteration_time(c, m, chunks)
            result.timed += 1
            if reference is None:
                reference = t
            elif t >= reference * (1 - 1e-9):
                continue
            best.offer(Ranked(c, t, need))


def _refine(ranked: list[Ranked], est: Estimator, global_batch: int) -> list[Ranked]:
    """Re-time the kept candidates with the analytic engine's pipeline recurrence instead of the closed
    form (exact for unbalanced stages too), and re-sort."""
    for r in ranked:
        c = r.candidate
        m = c.micro_batches(global_batch)
        table, key = est.layer_table(c)
        chunks = est.timed_chunks(c, m, est.chunks(table, key, c.pp, c.interleave))
        r.iteration_time_s = est.exact_time(c, m, chunks)
    return sorted(ranked, key=lambda r: r.iteration_time_s)


def _seeds(misses: tuple[_Best, _Best] | None) -> list[Ranked]:
    if misses is None:
        return []
    out = misses[0].sorted()
    return out + [r for r in misses[1].sorted() if r.candidate not in {o.candidate for o in out}]


def _extend(
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
    """The second stage (``extended``): every variant of the fastest ``SEEDS`` kept candidates and of the
    fastest ``SEEDS`` that missed memory (and as many with dp ≥ 2), and (MoE) of each ep degree's seed at
    that degree (``moe``), timed by the plan and the analytic engine; those that fit join the ranking.
    Variants whose memory lower bound (``moe.ExpertBound.may_fit``) exceeds the device are not planned.
    ``extra``: candidates planned as they are (the first stage's recompute-module lists that fit, ``_walk``).
    First-stage candidates the user's restrictions exclude (``Extensions.allows``) leave it."""
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
    report(1.0, f"search: second stage, {len(todo)} candidates timed")
    return sorted(out, key=lambda r: r.iteration_time_s)


def _may_fit(c: Candidate, bound: ExpertBound, global_batch: int) -> bool:
    """``c`` may fit by its memory lower bound (its dense layout's activations and the plan's state)."""
    est = bound.est
    table, key = est.layer_table(c)
    chunks = est.chunks(table, key, c.pp, c.interleave)
    return bound.may_fit(c, c.micro_batches(global_batch), chunks)


def _fmt(best: _Best) -> str:
    if not best.heap:
        return "none yet"
    r = max(best.heap, key=lambda item: item[0])[2]
    return f"{r.iteration_time_s:.3f} s ({r.candidate.label()})"


def _resimulate(
    project: Project, result: SearchResult, top: int, report: Reporter, planner: Planner | None = None
) -> None:
    """The top ``top`` on the event engine, planned on the search's graphs (``Planner``) and without per-link
    series (the search reads the iteration time and memory only)."""
    from tilewright.engine.simulate import simulate

    planner = planner or Planner(build_workload(project.workload))

    run = project.run.model_copy(update={"engine": EngineKind.event})
    n = min(top, len(result.ranked))
    for i, r in enumerate(result.ranked[:top]):
        text = f"search: event engine {i + 1}/{n}: {r.candidate.label()}"
        part = report.part(i / n, (i + 1) / n)
        part(0.0, text)
        mapping = r.candidate.mapping(result.global_batch, project.mapping)
        p = project.model_copy(update={"mapping": mapping, "run": run})
        r.event = simulate(p, planner.plan(p), progress=None if report.silent else _keep_text(part, text),
                           cancel=report.cancelled, series=False)
    head = result.ranked[:top]
    head.sort(key=lambda r: r.event.iteration_time_s if r.event else r.iteration_time_s)
    result.ranked[:top] = head


def _keep_text(report: Reporter, text: str) -> ProgressFn:
    """The simulation's fractions under the search's own text (which candidate is being confirmed)."""

    def progress(fraction: float, _text: str = "") -> None:
        report(fraction, text)

    return progress


def result_json(result: SearchResult) -> dict:
    rows = []
    for r in result.ranked:
        row = r.candidate.as_json()
        row.update(
            iteration_time_s=r.iteration_time_s,
            samples_per_s=result.global_batch / r.iteration_time_s if r.iteration_time_s > 0 else 0.0,
            peak_memory_bytes=r.peak_memory_bytes,
        )
        if r.spatial_splits:
            row["spatial_splits"] = r.spatial_splits
        if r.event is not None:
            row["event_iteration_time_s"] = r.event.iteration_time_s
            row["event_samples_per_s"] = result.global_batch / r.event.iteration_time_s
            row["event_peak_memory_bytes"] = r.event.peak_memory_bytes
            row["event_oom"] = r.event.oom is not None
        rows.append(row)
    return {
        "candidates": rows,
        "devices": result.devices,
        "global_batch": result.global_batch,
        "space": result.space,
        "evaluated": result.evaluated,
        "feasible": result.feasible,
        "timed": result.timed,
        "extended": result.extended,
        "search_time_s": result.search_time_s,
        "wall_time_s": result.wall_time_s,
        "notes": result.notes,
    }
