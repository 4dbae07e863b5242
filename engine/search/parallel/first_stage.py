"""The search's first stage: the walk over the dense space (tp, pp, dp, micro-batch, interleave, recompute,
sequence parallelism, ZeRO 0/1, placement) with the fast evaluator (``estimate``): memory first, time only
for what fits and may beat the kept list, and the re-timing of what it kept with the pipeline recurrence.
On the way it keeps the second stage's seeds (``second_stage``): the candidates that missed memory, per
expert-parallel degree the fastest that fit (``moe``), and the recompute-module lists that fit."""

from __future__ import annotations

import math
import time
from dataclasses import replace

from tilewright.engine.ir.mapping import PlacementStrategy, Recompute
from tilewright.engine.ir.project import Project
from tilewright.engine.jobs import Reporter
from tilewright.engine.perf.recompute import changes_nothing
from tilewright.engine.plan.cuda_graphs import problems
from tilewright.engine.search.op_settings import fusion_allows
from tilewright.engine.search.parallel.candidate import Candidate, dense, replicas
from tilewright.engine.search.parallel.estimate import Estimator
from tilewright.engine.search.parallel.moe import MoESeeds
from tilewright.engine.search.parallel.ranking import Best, Ranked, SearchResult
from tilewright.engine.search.parallel.stage_sums import Chunks
from tilewright.engine.search.space import Space, recompute_options, tensor_options
from tilewright.engine.workloads.graph import WorkloadGraph

REPORT_EVERY_S = 0.5


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
    if Recompute.selective in space.recomputes:
        blocks_ops = [est.workload.layer_ops(i) for i in est.workload.block_layers]
        space.selective_idle = changes_nothing(blocks_ops, est.settings.fused, None)
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


def walk_space(
    space: Space,
    est: Estimator,
    best: Best,
    result: SearchResult,
    report: Reporter,
    start: float,
    misses: tuple[Best, Best] | None = None,
    moe: MoESeeds | None = None,
    recipes: tuple[list[tuple[str, ...]], Best] | None = None,
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
                                c0 = dense(tp, pp, dp, mb, v, rc, sp, 0)
                                chunks = chunked.get((mb, v))
                                if chunks is None:
                                    if mb not in tables:
                                        tables[mb] = est.layer_table(c0)
                                    table, key = tables[mb]
                                    chunks = chunked[(mb, v)] = est.chunks(table, key, pp, v)
                                layouts = len(orders) * len(space.placements)
                                fitting = _fitting(c0, m, zeros, est, chunks, capacity, result, layouts)
                                lower = est.lower_bound(c0, m, chunks)  # without any communication
                                idle = rc is Recompute.selective and space.selective_idle
                                if moe is not None and not idle and moe.offer(c0, m, chunks, lower):
                                    fits = True
                                if not fitting and recipes is not None and rc is Recompute.selective:
                                    # a list re-runs the attention core and more (or MLA's cheaper up
                                    # projections instead): no faster than c0 without communication, so
                                    # pruned by the same bound as the kept candidates
                                    if lower < min(best.bound, recipes[1].bound):
                                        for r in _recipe_fits(c0, m, est, recipes[0]):
                                            recipes[1].offer(r)
                                if idle:  # the same run as without recomputation, walked for the lists above
                                    fits = fits or bool(fitting)
                                    continue
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
    best: Best,
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


def refine(ranked: list[Ranked], est: Estimator, global_batch: int) -> list[Ranked]:
    """Re-time the kept candidates with the analytic engine's pipeline recurrence instead of the closed
    form (exact for unbalanced stages too), and re-sort."""
    for r in ranked:
        c = r.candidate
        m = c.micro_batches(global_batch)
        table, key = est.layer_table(c)
        chunks = est.timed_chunks(c, m, est.chunks(table, key, c.pp, c.interleave))
        r.iteration_time_s = est.exact_time(c, m, chunks)
    return sorted(ranked, key=lambda r: r.iteration_time_s)


def _fmt(best: Best) -> str:
    if not best.heap:
        return "none yet"
    r = max(best.heap, key=lambda item: item[0])[2]
    return f"{r.iteration_time_s:.3f} s ({r.candidate.label()})"
