"""The analytic engine's Gantt: one lane per stage, one slice per step of the recurrence's log, so the
Gantt and the canvas activity work without an event queue (no per-segment slices, no link lanes)."""

from __future__ import annotations

from collections.abc import Mapping

from tilewright.engine.plan.passes import ChunkPass
from tilewright.engine.plan.plan import Plan
from tilewright.engine.plan.steps import StepRow, phase_name
from tilewright.engine.results.text import counted
from tilewright.engine.results.timeline import Timeline

Log = list[tuple[int, StepRow, float, float]]
GATHER_NOISE = 1e-9  # of the stage's end: a weight gather shorter than this is rounding, not a slice to draw


def stage_lanes(tl: Timeline, plan: Plan) -> tuple[list[int], dict[str, list[str]]]:
    """A compute lane per stage, and the devices each stands for."""
    devices = plan.hw.devices
    lanes, lane_devices = [], {}
    for r, st in enumerate(plan.stages):
        nodes = [devices[d].node for g in st.groups for d in g]
        lanes.append(tl.lane(f"stage {r}", "compute", detail=counted(len(nodes), "device")))
        lane_devices[f"stage {r}"] = nodes
    return lanes, lane_devices


def _pass_label(ps: ChunkPass | None, kind: str) -> str:
    segs = ps.segments if ps is not None else []
    return f"{segs[0].label}…{segs[-1].last_label or segs[-1].label} {kind}" if segs else kind


def training_timeline(
    tl: Timeline, lanes: list[int], plan: Plan, parts: Mapping[tuple, tuple[float, ...]], log: Log,
    reduced_at: list[float], ends: list[float], ready: list[float] | None = None,
    tied: tuple[float, float, tuple[int, ...]] = (0.0, 0.0, ()),
) -> None:
    """Each pass as a slice (a backward split into its recompute and backward parts), then the wait for
    the gradient reduction, the tied embedding's all-reduce (``tied``: start, end, its stages; ``ready``:
    when each stage may step), the optimizer step and the ZeRO weight gather."""
    ready = ready if ready is not None else reduced_at
    labels: dict[tuple[int, int, str], tuple[str, float]] = {}
    for r, st in enumerate(plan.stages):
        for c in st.chunk_layers:
            for kind in ("F", "R", "B"):
                labels[(r, c, kind)] = (_pass_label(st.passes.get((c, kind)), kind), parts[(r, c, kind)][0])
    last = [0.0] * len(plan.stages)
    blocking = plan.pipeline.blocking  # a stage held by its sends (plan.pipeline_p2p)
    for r, row, start, end in log:
        last[r] = max(last[r], end)
        held = plan.p2p(row.send[0], 0, row.send[1]).time(plan.hw) if blocking and row.send is not None else 0.0
        if held > 0:
            tl.add(lanes[r], end, held, "pp_comm", "pipeline send (blocking)", r, row.micro_batch, -1)
            last[r] = max(last[r], end + held)
        if row.kind == "F":
            tl.add(lanes[r], start, end - start, "compute", labels[(r, row.chunk, "F")][0], r, row.micro_batch, -1)
            continue
        label_r, dur_r = labels[(r, row.chunk, "R")]
        if dur_r > 0:
            tl.add(lanes[r], start, dur_r, "recompute", label_r, r, row.micro_batch, -1)
        tl.add(lanes[r], start + dur_r, end - start - dur_r, "compute", labels[(r, row.chunk, "B")][0], r,
               row.micro_batch, -1)
    for r, st in enumerate(plan.stages):
        lost = sum(plan.dp_overlap_loss(r, c) for c in st.chunk_layers)  # as the event engine's ``_tail``
        if lost > 0:
            tl.add(lanes[r], last[r], lost, "compute", "backward slowed beside the gradient reduction", r, -1, -1)
        if reduced_at[r] > last[r] + lost:
            tl.add(lanes[r], last[r] + lost, reduced_at[r] - last[r] - lost, "dp_comm", "gradient reduction", r,
                   -1, -1)
        if r in tied[2]:
            tl.add(lanes[r], tied[0], tied[1] - tied[0], "dp_comm", "tied embedding all-reduce", r, -1, -1)
        if st.optimizer_s > 0:
            tl.add(lanes[r], ready[r], st.optimizer_s, "optimizer", "optimizer step", r, -1, -1)
        gather = ends[r] - ready[r] - st.optimizer_s
        if gather > GATHER_NOISE * max(ends[r], 1e-30):  # a difference of sums: without a gather it is ~1e-18 s
            tl.add(lanes[r], ready[r] + st.optimizer_s, gather, "dp_comm", "ZeRO weight gather", r, -1, -1)


def inference_timeline(tl: Timeline, lanes: list[int], duration: Mapping[tuple, float], log: Log) -> None:
    """Each prefill and decode step of each micro-batch as a slice."""
    for r, row, start, _end in log:
        tl.add(lanes[r], start, duration[row.dkey], "compute", phase_name(row.phase), r, row.micro_batch, -1)
