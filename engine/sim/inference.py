"""Inference without an event queue: the request's phases (``engine.sim.inference_phases``) through the
pipeline by recurrence, with uncontended collectives and sends — the analytic engine's answer, which
the event engine (``engine.sim.inference_engine``) matches with contention switched off.

Time to first token (TTFT): until every sequence of the batch has its first generated token, i.e. the end
of the last micro-batch's first decode step. Time per output token (TPOT): the decode time after the
prefill, divided by the number of output tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilewright.engine.analytic.engine import pass_parts
from tilewright.engine.perf.collectives import Collective
from tilewright.engine.plan.passes import ChunkPass
from tilewright.engine.plan.plan import Plan, scaled
from tilewright.engine.results.result import MemoryTrack, Result, memory_verdict
from tilewright.engine.results.timeline import Timeline
from tilewright.engine.sim.inference_phases import InferencePhases, inference_phases


@dataclass
class RequestTimes:
    """What both inference engines measure: phase ends and the busiest stage's time breakdown."""

    end: float = 0.0
    prefill_end: float = 0.0  # the last micro-batch leaves the last stage's prefill
    first_token: float = 0.0  # the last micro-batch leaves the last stage's first decode step
    flops: float = 0.0  # per device, summed over every pass of every stage
    breakdown: dict[str, float] = field(default_factory=dict)


def pipeline_send(plan: Plan, phases: InferencePhases, r: int, tokens: int, replica: int = 0) -> Collective:
    """Stage ``r``'s send of one micro-batch's ``tokens`` per sequence to stage r + 1."""
    return scaled(plan.p2p(r, replica, False), phases.p2p_scale(tokens))


def phase_pass(phases: InferencePhases, r: int, p: int) -> ChunkPass:
    """Phase 0 is the prefill; phase p ≥ 1 is decode step p − 1."""
    return phases.prefill[r] if p == 0 else phases.decode(r, p - 1)


def inference_result(
    plan: Plan, phases: InferencePhases, times: RequestTimes, memory: list[MemoryTrack], *,
    engine: str, timeline: Timeline, links=(), events: int = 0, lane_devices=None,
    critical: list[tuple[str, float, float]] | None = None, notes: tuple[str, ...] = (),
) -> Result:
    project = plan.project
    m = project.mapping
    new = phases.decode_steps
    peak_row, oom = memory_verdict(memory)
    flops = times.flops * m.tp
    return Result(
        project=project.name,
        mode="infer",
        engine=engine,
        iteration_time_s=times.end,
        samples_per_iteration=phases.batch,
        tokens_per_sample=max(new, 1),
        model_flops_per_iteration=flops,
        hardware_flops_per_iteration=flops,
        devices=m.tp * m.pp,
        peak_flops_per_device=plan.stages[0].dev.peak_flops,
        memory_breakdown_bytes=peak_row,
        time_breakdown_s=times.breakdown,
        events=events,
        ttft_s=times.first_token if new else times.prefill_end,
        tpot_s=(times.end - times.prefill_end) / new if new else 0.0,
        oom=oom,
        timeline=timeline,
        link_utilisation=list(links),
        memory=memory,
        notes=list(plan.notes) + [
            f"inference: {phases.micro_batches} micro-batch(es) of {phases.micro_batch} sequence(s) in flight"
        ] + list(notes),
        critical_path=critical or [("request", 0.0, times.end)],
        lane_devices=dict(lane_devices or {}),
    )


def simulate_inference(plan: Plan) -> Result:
    """The analytic inference engine."""
    phases = inference_phases(plan)
    pp, mbs, n = plan.pp, phases.micro_batches, phases.decode_steps
    tl = Timeline()
    lanes = [tl.lane(f"stage {r}", "compute") for r in range(pp)]
    sends = [
        {tokens: pipeline_send(plan, phases, r, tokens).time(plan.hw) for tokens in (phases.prompt, 1)}
        for r in range(pp - 1)
    ]
    free = [0.0] * pp
    arrive: dict[tuple[int, int, int], float] = {}
    last = pp - 1
    acc = {k: 0.0 for k in ("compute", "memory_stall", "tp_comm", "pp_comm", "bubble")}
    times = RequestTimes()
    for p in range(1 + n):
        passes = [phase_pass(phases, r, p) for r in range(pp)]
        parts = [pass_parts(plan, r, ps) for r, ps in enumerate(passes)]
        times.flops += mbs * sum(ps.flops for ps in passes)
        for mb in range(mbs):
            for r in range(pp):
                dep = arrive[(p, mb, r - 1)] if r > 0 else (arrive[(p - 1, mb, last)] if p > 0 else 0.0)
                start = max(free[r], dep)
                dur, comp, stall, comm = parts[r]
                end = start + dur
                if r == last:
                    acc["compute"] += comp
                    acc["memory_stall"] += stall
                    acc["tp_comm"] += comm
                    if dep > free[r]:  # waited: the send's share is pp_comm, the rest is bubble
                        sent = dep - (sends[r - 1][phases.prompt if p == 0 else 1] if r > 0 else 0.0)
                        c = min(dep - free[r], max(0.0, dep - max(sent, free[r])))
                        acc["pp_comm"] += c
                        acc["bubble"] += dep - free[r] - c
                name = "prefill" if p == 0 else f"decode token {p}"
                tl.add(lanes[r], start, dur, "compute", name, r, mb, -1)
                free[r] = end
                arrive[(p, mb, r)] = end + (sends[r][phases.prompt if p == 0 else 1] if r < last else 0.0)
        if p == 0:
            times.prefill_end = free[last]
        if p == 1:
            times.first_token = free[last]
    times.end = free[last]
    acc["bubble"] += max(0.0, times.end - sum(acc.values()))
    times.breakdown = acc
    memory = []
    for r, st in enumerate(plan.stages):
        kv = phases.kv_bytes_per_token[r] * mbs * (phases.prompt + n)
        row = {"weights": st.state.weights, "gradients": 0.0, "optimizer": 0.0, "activations": 0.0,
               "kv_cache": kv, "workspace": workspace(plan, phases, r)}
        node = plan.hw.devices[st.groups[0][0]].node
        memory.append(MemoryTrack(node, st.capacity, [0.0, times.end], {k: [v, v] for k, v in row.items()}))
    return inference_result(plan, phases, times, memory, engine="analytic", timeline=tl)


def workspace(plan: Plan, phases: InferencePhases, r: int) -> float:
    """The stage's largest op workspace, for one micro-batch of the request."""
    return plan.stages[r].workspace * phases.micro_batch / max(plan.micro_batch, 1)
