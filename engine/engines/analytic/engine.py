"""The analytic engine: the event engine's quantities from the same plan, without an event queue.

Every pass is timed uncontended (``engine.plan.timing.pass_parts``) and the program's step table is
resolved by the one recurrence (``engine.plan.recurrence``). Training then waits, per stage, for its
chunks' data-parallel reductions (after the stage's schedule, chunk after chunk, or with ``overlap_grad_reduce``
from each chunk's last backward: ``plan.replica_sync.gradients_reduced``), steps the optimizer and, with
ZeRO, gathers the weights. With contention switched off this is the event engine's answer (the agreement
tests measure it), and it is what search evaluates. It simulates no flows, so it has no link series.
"""

from __future__ import annotations

from collections import Counter

from tilewright.engine.engines.analytic.timeline import inference_timeline, stage_lanes, training_timeline
from tilewright.engine.engines.result_builder import Measurement, build_result, close_breakdown, constant_memory
from tilewright.engine.jobs import CancelFn, ProgressFn, Reporter
from tilewright.engine.plan.plan import Plan
from tilewright.engine.plan.program import InferenceProgram, TrainingProgram, program_for
from tilewright.engine.plan.recurrence import StageTimes, run_table
from tilewright.engine.plan.replica_sync import gradients_reduced
from tilewright.engine.plan.steps import StepRow
from tilewright.engine.plan.timing import dram_floor, floor_note, pass_parts, pass_replica_comm
from tilewright.engine.results.result import Result
from tilewright.engine.results.timeline import Timeline

PASS_CATEGORIES = ("compute", "recompute", "tp_comm", "memory_stall", "host_wait")
Parts = tuple[float, float, float, float, float]  # duration, compute, memory stall, tp comm, host wait
Log = list[tuple[int, StepRow, float, float]]


class AnalyticEngine:
    """``timeline=False`` skips the per-pass slices and ``energy=False`` the energy walk over every
    replica's traffic (what search and benchmarks evaluate)."""

    name = "analytic"

    def __init__(self, *, timeline: bool = True, energy: bool = True) -> None:
        self.timeline = timeline
        self.energy = energy

    def run(self, plan: Plan, *, progress: ProgressFn | None = None, cancel: CancelFn | None = None) -> Result:
        report = Reporter(progress, cancel)
        if not report.silent:
            report(0.0, "timing the passes")
        program = program_for(plan)
        if isinstance(program, TrainingProgram):
            measured = self._training(program, report)
        else:
            measured = self._inference(program, report)
        if not report.silent:
            report(1.0, "timed")
        return build_result(program, measured, energy=self.energy)

    def _training(self, program: TrainingProgram, report: Reporter) -> Measurement:
        plan = program.plan
        hw, m, pp = plan.hw, plan.micro_batches, plan.pp
        parts: dict[tuple, Parts] = {}
        per_stage = []
        for r, st in enumerate(plan.stages):
            report.check()
            f = b = 0.0
            sums = dict.fromkeys((*PASS_CATEGORIES, "dp_comm", "ep_comm", "cp_comm"), 0.0)
            # the combined 1F1B's unpaired steps (``StepRow.alone``): that share of the micro-batches runs the
            # chunk's alone pass, so the per-micro-batch sums below weigh each pass by the steps that run it
            lone = Counter((row.chunk, row.kind) for row in program.table[r] if row.alone)
            for c in st.chunk_layers:
                for kind in ("F", "R", "B"):
                    share = lone[(c, kind)] / m
                    runs = [((r, c, kind), st.passes.get((c, kind)), 1.0 - share)]
                    if share:
                        runs.append(((r, c, kind, True), st.alone[(c, kind)], share))
                    for key, ps, w in runs:
                        dur, comp, stall, comm, host = parts[key] = pass_parts(plan, r, ps)
                        if kind == "F":
                            f += w * dur
                        else:
                            b += w * dur
                        sums["recompute" if kind == "R" else "compute"] += w * comp
                        sums["memory_stall"] += w * stall
                        sums["host_wait"] += w * host
                        replicas = pass_replica_comm(plan, r, ps)  # ZeRO-2/3, context ring, expert all-to-all
                        sums["tp_comm"] += w * (comm - sum(replicas.values()))
                        for category, seconds in replicas.items():
                            sums[category] += w * seconds
            per_stage.append((f, b, sums))
        duration = {}
        for r, st in enumerate(plan.stages):
            for c in st.chunk_layers:
                duration[(r, c, "F")] = parts[(r, c, "F")][0]
                duration[(r, c, "B")] = parts[(r, c, "R")][0] + parts[(r, c, "B")][0]
                if (r, c, "F", True) in parts:
                    duration[(r, c, "F", True)] = parts[(r, c, "F", True)][0]
                if (r, c, "B", True) in parts:
                    duration[(r, c, "B", True)] = parts[(r, c, "R")][0] + parts[(r, c, "B", True)][0]
        log: Log | None = [] if self.timeline else None
        stages = run_table(program.table, duration, program.send_times(), log, blocking=program.blocking)
        finishes, reduced_at, lost_s = [], [], []
        for r, st in enumerate(plan.stages):
            lost = {c: plan.dp_overlap_loss(r, c) for c in st.chunk_layers}  # SMs the early buckets take
            chunks = []
            for c in st.chunk_layers:
                early, late = plan.dp_buckets(r, c)
                chunks.append((stages[r].last_backward_start[c], stages[r].last_backward[c], early.time(hw),
                               late.time(hw), lost[c]))
            reduced_at.append(gradients_reduced(stages[r].finish, chunks, plan.dp_after_schedule))
            lost_s.append(sum(lost.values()))
        ready, tied = tied_allreduce(plan, reduced_at)
        for r, st in enumerate(plan.stages):
            finishes.append(ready[r] + st.optimizer_s + gather_s(plan, r))
        tail = program.reported_stage(finishes)
        total = finishes[tail]
        slowest = max(range(pp), key=lambda r: per_stage[r][0] + per_stage[r][1])
        breakdown = {k: m * per_stage[tail][2][k] for k in PASS_CATEGORIES}
        notes = []
        floor_s, _ = dram_floor(plan)  # shared DRAM ports: the iteration never beats its busiest DRAM link
        if floor_s > total:
            notes.append(floor_note(plan, total))
            breakdown["memory_stall"] += floor_s - total
            total = floor_s
        breakdown["pp_comm"] = stages[tail].waits["pp_comm"]
        breakdown["compute"] += lost_s[tail]  # the last backwards slowed beside the early buckets
        breakdown["dp_comm"] = (reduced_at[tail] - stages[tail].finish - lost_s[tail] + gather_s(plan, tail)
                                + m * per_stage[tail][2]["dp_comm"] + (tied[1] - tied[0] if tail in tied[2] else 0.0))
        for category in ("ep_comm", "cp_comm"):
            breakdown[category] = m * per_stage[tail][2][category]
        breakdown["optimizer"] = plan.stages[tail].optimizer_s
        close_breakdown(breakdown, total, sum(breakdown.values()))
        memory = [constant_memory(program, r, {"activations": _peak_activations(program, r)}, [0.0])
                  for r in range(pp)]
        tl, lane_devices = Timeline(), {}
        if log is not None:
            lanes, lane_devices = stage_lanes(tl, plan)
            training_timeline(tl, lanes, plan, parts, log, reduced_at, finishes, ready, tied)
        return Measurement(
            engine=self.name, end=total, breakdown=breakdown, memory=memory, timeline=tl,
            lane_devices=lane_devices, critical=[(f"stage {slowest} sets the pace", 0.0, total)], notes=notes,
        )

    def _inference(self, program: InferenceProgram, report: Reporter) -> Measurement:
        plan, ph = program.plan, program.phases
        pp, last, n = plan.pp, plan.pp - 1, ph.decode_steps
        parts: dict[tuple, Parts] = {}
        replicas: dict[int, dict[str, float]] = {}
        for p in range(1 + n):
            report.check()
            for r in range(pp):
                ps = ph.pass_for(r, p)
                parts[(r, p)] = pass_parts(plan, r, ps)
                if r == last:
                    replicas[p] = pass_replica_comm(plan, r, ps)  # the expert all-to-all (``plan.served_experts``)
        duration = {key: part[0] for key, part in parts.items()}
        log: Log | None = [] if self.timeline else None
        ends: dict[tuple, float] = {}
        stages: list[StageTimes] = run_table(program.table, duration, program.send_times(), log, ends)
        end = stages[last].finish
        breakdown = {k: 0.0 for k in ("compute", "memory_stall", "host_wait", "tp_comm", "pp_comm", "bubble")}
        for row in program.table[last]:
            _dur, comp, stall, comm, host = parts[row.dkey]
            breakdown["compute"] += comp
            breakdown["memory_stall"] += stall
            breakdown["host_wait"] += host
            over = replicas[row.dkey[1]]
            breakdown["tp_comm"] += comm - sum(over.values())
            for category, seconds in over.items():
                breakdown[category] = breakdown.get(category, 0.0) + seconds
        waits = stages[last].waits
        breakdown["pp_comm"] += waits.get("pp_comm", 0.0)
        breakdown["bubble"] += waits.get("bubble", 0.0)
        close_breakdown(breakdown, end, sum(breakdown.values()))
        memory = []
        for r in range(pp):
            memory.append(constant_memory(program, r, {"kv_cache": ph.kv_cache_bytes(r)}, [0.0, end]))
        tl, lane_devices = Timeline(), {}
        if log is not None:
            lanes, lane_devices = stage_lanes(tl, plan)
            inference_timeline(tl, lanes, duration, log)
        return Measurement(
            engine=self.name, end=end, breakdown=breakdown, memory=memory, timeline=tl,
            lane_devices=lane_devices, critical=[("request", 0.0, end)],
            phase_ends={name: ends.get(key, 0.0) for name, key in program.phase_ends.items()},
        )


def tied_allreduce(plan: Plan, reduced_at: list[float]) -> tuple[list[float], tuple[float, float, tuple[int, ...]]]:
    """When each stage may step its optimizer, and (start, end, ranks) of the tied embedding's all-reduce
    (``plan.tied``): it starts once the first and the last stage have both reduced their gradients over the
    replicas; a stage without it steps when its own reduction is done."""
    ready = list(reduced_at)
    ranks = plan.tied_ranks()
    if not ranks:
        return ready, (0.0, 0.0, ())
    start = max(reduced_at[r] for r in ranks)
    end = start + plan.tied_collective().time(plan.hw)
    for r in ranks:
        ready[r] = end
    return ready, (start, end, ranks)


def gather_s(plan: Plan, r: int) -> float:
    """Seconds of the post-step weight gather the stage waits for (``Plan.zero_gather_exposed``)."""
    return sum(part.time(plan.hw) for part in plan.zero_gather_exposed(r))


def _peak_activations(program: TrainingProgram, r: int) -> float:
    """Walk the stage's steps: +activations at each forward, − at each backward."""
    st = program.plan.stages[r]
    live = peak = 0.0
    recompute = any(k[1] == "R" for k in st.passes)
    for row in program.table[r]:
        if row.kind == "F":
            live += st.act_bytes[row.chunk]
            peak = max(peak, live)
        else:
            peak = max(peak, live + (st.transient_bytes if recompute else 0.0))
            live -= st.act_bytes[row.chunk]
    return peak
