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

import time
from dataclasses import replace
from typing import Any

from tilewright.engine.errors import InputError, Problem
from tilewright.engine.hardware import elaborate
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.jobs import CancelFn, ProgressFn, Reporter
from tilewright.engine.perf.recompute import changes_nothing, reruns_flash
from tilewright.engine.plan.framework_host import host_framework
from tilewright.engine.plan.residency import resolve
from tilewright.engine.search.parallel.estimate import Estimator
from tilewright.engine.search.parallel.extended import Extensions, Planner, default_extensions, with_recipes
from tilewright.engine.search.parallel.first_stage import build_space, refine, walk_space
from tilewright.engine.search.parallel.moe import ExpertBound, MoESeeds, moe_experts
from tilewright.engine.search.parallel.ranking import Best, Ranked, SearchResult
from tilewright.engine.search.parallel.resimulate import resimulate_top
from tilewright.engine.search.parallel.second_stage import SEEDS, extend, missed_seeds
from tilewright.engine.workloads import build_workload
from tilewright.engine.workloads.graph import WorkloadGraph

SOURCE = "command line"


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


# Why no candidate of the default selective recomputation is listed beside its twin without recomputation.
IDLE_SELECTIVE_NOTE = (
    "selective recomputation (core_attn) not listed: the attention is fused (mapping.fusion attention → softmax, "
    "or the context-parallel ring's blockwise kernel), and a flash kernel stores no scores and recomputes them "
    "in its own backward, so each such candidate is its recompute-none twin (Megatron-LM's flash path skips the "
    "checkpoint; Megatron-Core's re-runs the kernel's forward for no memory saved, slower still)"
)


def _without_idle_recipes(ext: Extensions, est: Estimator, result: SearchResult) -> Extensions:
    """``ext`` without the module lists that change nothing here (``perf.recompute.changes_nothing``: only the
    fused attention core, or modules the model lacks): their candidates would be the recompute-none ones."""
    if not ext.recipes:
        return ext
    layers = [est.workload.layer_ops(i) for i in est.workload.block_layers]
    idle = [r for r in ext.recipes if changes_nothing(layers, est.settings.fused, r)]
    if not idle:
        return ext
    result.notes.append("recompute-module lists not tried, as they re-run nothing a fused attention kernel does "
                        "not already: " + "; ".join(",".join(r) for r in idle))
    return replace(ext, recipes=[r for r in ext.recipes if r not in idle])


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
    workload: WorkloadGraph | None = None,
) -> SearchResult:
    """Rank every legal mapping of ``project``'s model on ``devices`` devices (at most) of its system, then
    re-simulate the best ``top`` on the event engine (``resimulate``). ``extensions``: what the second
    stage varies (None: ``extended.default_extensions`` — ep for MoE models, cp from 8k tokens, ZeRO 0–3,
    FSDP, the optimizer in host memory when the node has one); ``narrow``: that default space narrowed by
    ``default_extensions``' keyword lists (``eps``, ``cps``, ``zeros``, ``offload``), as the CLI's flags say.
    ``workload``: ``project.workload``'s graph when the caller has built it already (None: built here), so a
    caller that searches one model several times (``import-hf`` growing a system) builds it once.

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
    if workload is None:
        workload = build_workload(project.workload)
    est = Estimator(project, hw, workload)
    _check_levels(project, est)
    space = build_space(project, devices, global_batch, len(workload.block_layers), est)
    result = SearchResult([], global_batch, devices, space=space.size())
    walk(0.0, f"search: {result.space:,} candidates in the space, {len(hw.devices):,} devices elaborated")
    best = Best(max(keep, top))
    ext = extensions if extensions is not None else default_extensions(project, hw, est.dev, **(narrow or {}))
    ext = with_recipes(ext, workload)
    if not ext.devices:  # the budget a context ring may fill beyond a seed's devices (``extended.context_shapes``)
        ext = replace(ext, devices=devices)
    ext = _without_idle_recipes(ext, est, result)
    if space.selective_idle:
        result.notes.append(IDLE_SELECTIVE_NOTE)
    # seeds that missed memory: the fastest, and the fastest with dp ≥ 2 (where ep, cp and sharding apply)
    misses = (Best(SEEDS), Best(SEEDS)) if ext.active else None
    experts = moe_experts(project.workload)
    bound = ExpertBound(est, experts)
    # MoE: per expert-parallel degree, the fastest candidate that fits with its experts spread (``moe``)
    moe = MoESeeds(bound, ext.eps) if experts and any(e > 1 for e in ext.eps) else None
    first = report.part(0.0, 1.0 / (1 + sims) * (0.8 if ext.active else 1.0))
    recipes = (ext.recipes, Best(SEEDS)) if ext.recipes else None
    walk_space(space, est, best, result, first, start, misses, moe, recipes)
    planner = Planner(workload, {devices: hw})  # the second stage's and the re-simulations' plans
    ranked = refine(best.sorted(), est, global_batch)
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
        ranked = extend(project, ext, ranked, missed_seeds(misses), result, second, moe_seeds, bound,
                        [r.candidate for r in fitting], planner)
    result.ranked = _collapse_idle_selective(ranked, est, result)[: best.keep]
    if (note := _precision_note(project, result.ranked)) is not None:
        result.notes.append(note)
    for r in result.ranked:
        r.spatial_splits = est.spatial_splits(r.candidate)
    result.search_time_s = time.perf_counter() - start
    walk(
        1.0,
        f"search: {result.evaluated:,} evaluated, {result.feasible:,} fit in memory, {result.timed:,} timed "
        f"(+{result.extended:,} in the second stage) in {result.search_time_s:.1f} s",
    )
    if resimulate:
        resimulate_top(project, result, top, report.part(1.0 / (1 + sims), 1.0), planner)
    result.wall_time_s = time.perf_counter() - start
    return result


def _collapse_idle_selective(ranked: list[Ranked], est: Estimator, result: SearchResult) -> list[Ranked]:
    """``ranked`` with each selective-recomputation candidate that changes nothing (``changes_nothing``: every op
    its modules touch runs in a fused attention kernel, ``mapping.fusion``'s or the context ring's) given as its
    recompute-none twin, which it is (dropped where that twin is ranked already, and under Megatron-Core, where it is
    slower than the twin). The first stage never ranks
    them (``Space.selective_idle``); the second stage's context-parallel variants of its seeds can be them."""
    from tilewright.engine.ir.mapping import Recompute
    from tilewright.engine.plan.context import flash_fused

    layers = [est.workload.layer_ops(i) for i in est.workload.block_layers]
    # under Megatron-Core the candidate re-runs the flash forward (``reruns_flash``): slower than its twin, dropped
    slower = reruns_flash(host_framework(est.settings.host_framework, est.dev.compute, True))
    seen: set = set()
    out: list[Ranked] = []
    collapsed = False
    for r in ranked:
        c = r.candidate
        if c.recompute is Recompute.selective and changes_nothing(
            layers, est.settings.fused | flash_fused(layers, c.cp, est.settings.fused), c.recompute_modules
        ):
            collapsed = True
            if slower:
                continue
            c = replace(c, recompute=Recompute.none, recompute_modules=None)
            r = replace(r, candidate=c)
        if c in seen:
            continue
        seen.add(c)
        out.append(r)
    if collapsed and IDLE_SELECTIVE_NOTE not in result.notes:
        result.notes.append(IDLE_SELECTIVE_NOTE)
    return out


def _precision_note(project: Project, ranked: list[Ranked]) -> str | None:
    """What the ranked candidates run of the project's Adam precision (``candidate.precision_fields``): the
    project's moments and master copy under a sharded optimizer, fp32 at ZeRO 0 (which the table does not
    show); None when the project keeps them in fp32."""
    m = project.mapping
    if m.optimizer_moments == "fp32" and m.optimizer_master == "fp32":
        return None
    text = f"Adam's moments {m.optimizer_moments}, master {m.optimizer_master} (the project's) under ZeRO ≥ 1"
    if any(r.candidate.zero == 0 for r in ranked):
        text += ("; ZeRO-0 candidates keep them in fp32: Megatron-Core runs its precision-aware optimizer only "
                 "with the distributed optimizer")
    return text

