"""The analytic engine: the event engine's quantities from the same plan, without an event queue.

Per stage and chunk, forward and backward (+ recompute) times come from the plan with uncontended
collectives and DRAM streams; ``engine.analytic.pipeline`` resolves the schedule; each stage then waits
for its chunks' data-parallel reductions (started at each chunk's last backward), steps the optimizer
and, with ZeRO, gathers the weights. With contention switched off this is the event engine's answer
(tested within 0.5 %), and is what search evaluates. Its timeline has one slice per pass per stage (and
the stage's reduction and optimizer tail) so the Gantt and the canvas activity work; it has no link
series (no flows are simulated).
"""

from __future__ import annotations

from tilewright.engine.analytic.pipeline import run_pipeline
from tilewright.engine.plan.passes import ChunkPass
from tilewright.engine.plan.plan import Plan
from tilewright.engine.results.result import MemoryTrack, Result, memory_verdict
from tilewright.engine.results.timeline import Timeline
from tilewright.engine.sim.schedules import Step, stage_order


def pass_parts(plan: Plan, r: int, ps: ChunkPass | None) -> tuple[float, float, float, float]:
    """(duration, compute, memory stall, tp comm) of one pass, uncontended."""
    if ps is None:
        return 0.0, 0.0, 0.0, 0.0
    comm = sum(plan.tp_time(r, 0, *seg.comm) for seg in ps.segments if seg.comm)
    busy = sum(plan.segment_seconds(r, seg) for seg in ps.segments) if ps.has_dram else ps.busy_s
    return busy + comm, ps.compute_s, busy - ps.compute_s, comm


def _peak_activations(plan: Plan, r: int) -> float:
    """Walk the stage's schedule: +activations at each forward, − at each backward."""
    st = plan.stages[r]
    live = peak = 0.0
    recompute = any(k[1] == "R" for k in st.passes)
    for step in stage_order(plan.schedule, r, plan.pp, plan.micro_batches, plan.chunks):
        if step.kind == "F":
            live += st.act_bytes[step.chunk]
            peak = max(peak, live)
        else:
            peak = max(peak, live + (st.transient_bytes if recompute else 0.0))
            live -= st.act_bytes[step.chunk]
    return peak


def _pass_label(ps: ChunkPass | None, kind: str) -> str:
    segs = ps.segments if ps is not None else []
    return f"{segs[0].label}…{segs[-1].label} {kind}" if segs else kind


def _timeline(
    plan: Plan, log: list[tuple[int, Step, float, float]], reduced_at: list[float], ends: list[float]
) -> tuple[Timeline, dict[str, list[str]]]:
    """One lane per stage: each pass as a slice (a backward split into its recompute and backward
    parts), then the wait for the gradient reduction and the optimizer step."""
    tl = Timeline()
    devices = plan.hw.devices
    lanes, lane_devices = [], {}
    for r, st in enumerate(plan.stages):
        nodes = [devices[d].node for g in st.groups for d in g]
        lanes.append(tl.lane(f"stage {r}", "compute", detail=f"{len(nodes)} devices"))
        lane_devices[f"stage {r}"] = nodes
    labels: dict[tuple[int, int, str], tuple[str, float]] = {}
    for r, st in enumerate(plan.stages):
        for c in st.chunk_layers:
            for kind in ("F", "R", "B"):
                ps = st.passes.get((c, kind))
                labels[(r, c, kind)] = (_pass_label(ps, kind), pass_parts(plan, r, ps)[0])
    last = [0.0] * len(plan.stages)
    for r, step, start, end in log:
        first_layer = -1
        last[r] = max(last[r], end)
        if step.kind == "F":
            tl.add(lanes[r], start, end - start, "compute", labels[(r, step.chunk, "F")][0], r, step.micro_batch,
                   first_layer)
            continue
        label_r, dur_r = labels[(r, step.chunk, "R")]
        if dur_r > 0:
            tl.add(lanes[r], start, dur_r, "recompute", label_r, r, step.micro_batch, first_layer)
        tl.add(lanes[r], start + dur_r, end - start - dur_r, "compute", labels[(r, step.chunk, "B")][0], r,
               step.micro_batch, first_layer)
    for r, st in enumerate(plan.stages):
        if reduced_at[r] > last[r]:
            tl.add(lanes[r], last[r], reduced_at[r] - last[r], "dp_comm", "gradient reduction", r, -1, -1)
        if st.optimizer_s > 0:
            tl.add(lanes[r], reduced_at[r], st.optimizer_s, "optimizer", "optimizer step", r, -1, -1)
        gather = ends[r] - reduced_at[r] - st.optimizer_s
        if gather > 0:
            tl.add(lanes[r], reduced_at[r] + st.optimizer_s, gather, "dp_comm", "ZeRO weight gather", r, -1, -1)
    return tl, lane_devices


def analytic_result(plan: Plan, timeline: bool = True) -> Result:
    """The analytic result; ``timeline=False`` skips the per-pass slices (search and benchmarks)."""
    project = plan.project
    m, v, pp = plan.micro_batches, plan.chunks, plan.pp
    per_stage = []
    totals = {"compute": 0.0, "recompute": 0.0, "tp_comm": 0.0, "memory_stall": 0.0}
    for r, st in enumerate(plan.stages):
        f = b = 0.0
        parts = {"compute": 0.0, "recompute": 0.0, "tp_comm": 0.0, "memory_stall": 0.0}
        for c in st.chunk_layers:
            for kind in ("F", "R", "B"):
                dur, comp, stall, comm = pass_parts(plan, r, st.passes.get((c, kind)))
                if kind == "F":
                    f += dur
                else:
                    b += dur
                parts["recompute" if kind == "R" else "compute"] += comp
                parts["memory_stall"] += stall
                parts["tp_comm"] += comm
        per_stage.append((f, b, parts))
    duration = {}
    for r, st in enumerate(plan.stages):
        for c in st.chunk_layers:
            duration[(r, c, "F")] = pass_parts(plan, r, st.passes.get((c, "F")))[0]
            duration[(r, c, "B")] = (
                pass_parts(plan, r, st.passes.get((c, "R")))[0] + pass_parts(plan, r, st.passes.get((c, "B")))[0]
            )
    send = {}
    for vs in range(plan.virtual_stages - 1):
        send[(vs, False)] = plan.p2p(vs, 0, False).time(plan.hw)
        send[(vs, True)] = plan.p2p(vs, 0, True).time(plan.hw)
    log: list[tuple[int, Step, float, float]] | None = [] if timeline else None
    stages = run_pipeline(plan.schedule, pp, m, v, duration, send, log)
    finishes, reduced_at = [], []
    for r, st in enumerate(plan.stages):
        reduced = stages[r].finish
        for c in st.chunk_layers:
            early, late = plan.dp_buckets(r, c)
            reduced = max(
                reduced,
                stages[r].last_backward_start[c] + early.time(plan.hw),
                stages[r].last_backward[c] + late.time(plan.hw),
            )
        reduced_at.append(reduced)
        finishes.append(reduced + st.optimizer_s + plan.zero_gather(r).time(plan.hw))
    tail_stage = max(range(pp), key=lambda r: finishes[r])
    total = finishes[tail_stage]
    st0 = plan.stages[tail_stage]
    slowest = max(range(pp), key=lambda r: per_stage[r][0] + per_stage[r][1])
    breakdown = {k: m * per_stage[tail_stage][2][k] for k in totals}
    breakdown["pp_comm"] = stages[tail_stage].waits["pp_comm"]
    zero_gather = plan.zero_gather(tail_stage).time(plan.hw)
    breakdown["dp_comm"] = reduced_at[tail_stage] - stages[tail_stage].finish + zero_gather
    breakdown["optimizer"] = st0.optimizer_s
    breakdown["bubble"] = max(0.0, total - sum(breakdown.values()))
    memory = []
    for r, st in enumerate(plan.stages):
        row = {
            "weights": st.state.weights, "gradients": st.state.gradients, "optimizer": st.state.optimizer,
            "activations": _peak_activations(plan, r), "kv_cache": 0.0, "workspace": st.workspace,
        }
        node = plan.hw.devices[st.groups[0][0]].node
        memory.append(MemoryTrack(node, st.capacity, [0.0], {k: [val] for k, val in row.items()}))
    peak_row, oom = memory_verdict(memory)
    tl, lane_devices = _timeline(plan, log, reduced_at, finishes) if log is not None else (Timeline(), {})
    mapping = project.mapping
    return Result(
        project=project.name,
        mode="train",
        engine="analytic",
        iteration_time_s=total,
        samples_per_iteration=mapping.global_batch,
        tokens_per_sample=plan.workload.tokens_per_sample,
        model_flops_per_iteration=plan.model_flops,
        hardware_flops_per_iteration=plan.hardware_flops,
        devices=mapping.devices,
        peak_flops_per_device=plan.stages[0].dev.peak_flops,
        memory_breakdown_bytes=peak_row,
        time_breakdown_s=breakdown,
        oom=oom,
        memory=memory,
        timeline=tl,
        lane_devices=lane_devices,
        notes=list(plan.notes),
        critical_path=[(f"stage {slowest} sets the pace", 0.0, total)],
    )
