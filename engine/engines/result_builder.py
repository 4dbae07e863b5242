"""The one place a ``Result`` is built, from what an engine measured on a plan.

Engines differ in timing semantics only; everything else a result carries is decided here, once: the
memory tracks of every stage, the out-of-memory verdict, the bubble that closes a breakdown (rounding
noise reported as 0), every DRAM port's bytes, the metadata (mode, samples, tokens, FLOPs, devices, time
to first token, notes) for training and inference, and the energy of the iteration or request
(``engines.energy``, from the plan: the same for both engines).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilewright.engine.engines.energy import device_traffic, iteration_energy
from tilewright.engine.hardware.model import Link
from tilewright.engine.plan.activation_offload import activation_series, track_split
from tilewright.engine.plan.plan import Plan
from tilewright.engine.plan.program import InferenceProgram, Program
from tilewright.engine.plan.residency import AUTO_ORDER, home_level, level_tracks
from tilewright.engine.results.result import MEMORY_CATEGORIES, MemoryTrack, Result, Series, memory_verdict
from tilewright.engine.results.split_traffic import with_traffic
from tilewright.engine.results.text import counted
from tilewright.engine.results.timeline import Timeline

Columns = tuple[list[float], dict[str, list[float]]]  # times, occupancy by memory category after each


@dataclass
class Measurement:
    """What an engine measured: the end, the reported stage's time breakdown, each stage's memory."""

    engine: str
    end: float
    breakdown: dict[str, float]
    memory: list[Columns]  # per stage
    timeline: Timeline = field(default_factory=Timeline)
    lane_devices: dict[str, list[str]] = field(default_factory=dict)  # compute lane → device node ids
    links: list[Series] = field(default_factory=list)
    critical: list[tuple[str, float, float]] = field(default_factory=list)
    events: int = 0
    phase_ends: dict[str, float] = field(default_factory=dict)  # inference: "prefill", "first_token" → s
    notes: list[str] = field(default_factory=list)


# A breakdown entry below this fraction of the iteration time is the rounding of sums of floats (a bubble
# of 4.48e-12 s in a 3.7 s request): it is reported as 0.
BREAKDOWN_NOISE = 1e-9


def without_noise(breakdown: dict[str, float], end: float) -> dict[str, float]:
    """The breakdown with every entry that is rounding noise (``BREAKDOWN_NOISE`` of ``end``) set to 0."""
    return {k: 0.0 if abs(v) < BREAKDOWN_NOISE * end else v for k, v in breakdown.items()}


def close_breakdown(breakdown: dict[str, float], end: float, busy: float) -> dict[str, float]:
    """What the reported stage does not account for until ``end`` (it accounted for ``busy``) is bubble."""
    breakdown["bubble"] = breakdown.get("bubble", 0.0) + max(0.0, end - busy)
    return breakdown


def format_fallbacks(plan: Plan) -> list[str]:
    """A note for each stage device that runs the run's format on another format's units
    (``Compute.fallback_note``), once per distinct note."""
    notes = [st.dev.compute.fallback_note(st.dev.dtype) for st in plan.stages]
    return list(dict.fromkeys(n for n in notes if n))


def constant_memory(program: Program, r: int, held: dict[str, float], times: list[float]) -> Columns:
    """Stage ``r``'s memory as one level over ``times``: what it holds from the start plus ``held``."""
    row = program.initial_memory(r) | held
    return times, {c: [row.get(c, 0.0)] * len(times) for c in MEMORY_CATEGORIES}


def inference_notes(program: InferenceProgram) -> list[str]:
    ph = program.phases
    inf = program.plan.project.run.inference
    batches = counted(ph.micro_batches, "micro-batch", "micro-batches")
    out = [f"inference: {batches} of {counted(ph.micro_batch, 'sequence')} in flight"]
    ep = program.plan.ep
    if ep > 1:  # plan.served_experts
        out.append(f"expert parallelism: {ep} ranks (data-parallel attention), each running this batch on its own "
                   f"{counted(program.plan.tp * program.plan.pp, 'device')}; the MoE layers route their {ep} × the "
                   f"tokens to the experts, 1/{ep} of them per rank, through two all-to-alls per layer")
    if ph.sequential:
        out.append(f"sequential prefill: the {ph.micro_batch} sequences of a micro-batch are prefilled one after "
                   "another; TTFT is the first one's first token")
    if ph.decoder:
        out.append(f"{inf.attention} attention; KV cache {ph.kv_elem_bytes:g} B per element in pages of "
                   f"{ph.block_tokens} tokens; {counted(ph.decode_steps, 'decode step')} after the prefill")
        context = ph.prompt + ph.decode_steps
        if context > ph.dims.seq_len:
            out.append(f"the context reaches {context} tokens, past the model's {ph.dims.seq_len} (seq_len)")
    return out


def residency_rows(plan: Plan) -> list[dict[str, object]]:
    """Per stage, where its first device keeps each category of state: the levels of
    ``mapping.memory_levels`` when set (one memory track each), else the device's own memory (one track)."""
    rows: list[dict[str, object]] = []
    for r, st in enumerate(plan.stages):
        node = plan.hw.devices[st.groups[0][0]].node
        dev = st.dev
        if st.residency is None:
            if dev.local_dram is not None:
                name, bandwidth = dev.local_dram.name, dev.dram_bandwidth
            elif dev.remote_dram is not None:
                name, bandwidth = f"SRAM + share of {dev.remote_dram.name}", dev.dram_bandwidth
            else:
                name, bandwidth = "SRAM", dev.sram_bandwidth
            levels = [{"level": home_level(dev), "memory": name, "capacity_bytes": st.capacity,
                       "bandwidth_bytes_per_s": bandwidth, "categories": list(AUTO_ORDER), "track": node}]
        else:
            levels = []
            for lv, info in st.residency.levels.items():
                cats = [c for c in AUTO_ORDER if st.residency.placed.get(c) == lv]
                levels.append({"level": lv, "memory": info.memory, "capacity_bytes": info.capacity,
                               "bandwidth_bytes_per_s": info.bandwidth, "categories": cats,
                               "track": f"{node}/{info.memory}"})
        rows.append({"stage": r, "device": node, "memory_levels": dict(plan.project.mapping.memory_levels),
                     "auto": list(st.residency.chosen) if st.residency is not None else [], "levels": levels})
    return rows


def own_dram_bytes(program: Program) -> dict[tuple[str, str], float]:
    """Bytes each device that runs moves to and from its own DRAM over the run, by (device node, memory
    name): the passes' local bytes times the passes its stage runs, and the optimizer step — the count
    energy prices (``energy.device_traffic``). Devices without a local DRAM (SRAM-only, or streaming from
    remote ports, whose flows the link series carry) have none."""
    plan = program.plan
    replicas = range(plan.dp) if program.train else range(1)  # inference runs one tensor group per stage
    out: dict[tuple[str, str], float] = {}
    for r, st in enumerate(plan.stages):
        own = st.dev.local_dram
        if own is None:
            continue
        local = device_traffic(program, r)[0]
        for j in replicas:
            for d in st.groups[j]:
                out[(plan.hw.devices[d].node, own.name)] = local
    return out


def dram_port_rows(program: Program, links: list[Series], end: float) -> list[dict[str, object]]:
    """Every DRAM port's traffic over the run; empty when the engine reports no link series.

    A ported memory's bytes are what its channel pair carried (the link series are fractions of the
    channel's bandwidth: the integral times the bandwidth), read and write apart. A device's own (local)
    DRAM is priced inside each op against the memory's bandwidth, never as flows on its channel, so its
    bytes come from the plan (``own_dram_bytes``) as one total: the cost model does not tell its reads
    from its writes, and ``read_bytes``/``write_bytes`` are None. ``bytes`` is the total either way."""
    if not links or end <= 0:
        return []
    by_link = {(s.src, s.dst): s for s in links}

    def carried(link: Link) -> float:
        s = by_link.get((link.src, link.dst))
        return s.mean(end) * end * link.bandwidth if s is not None else 0.0

    hw = program.plan.hw
    own: dict[tuple[str, str], float] | None = None
    rows: list[dict[str, object]] = []
    for port in hw.memory_ports:
        if port.memory.kind.value == "sram":
            continue
        write, read = hw.links[port.channel_in], hw.links[port.channel_out]
        row: dict[str, object] = {
            "port": port.node,
            "memory": port.memory.name,
            "owner": port.owner,
            "interleave": port.memory.interleave.value if port.memory.ported else "local",
            "read_bandwidth_bytes_per_s": read.bandwidth,
            "write_bandwidth_bytes_per_s": write.bandwidth,
        }
        if port.memory.ported:
            row |= {"read_bytes": carried(read), "write_bytes": carried(write)}
            row["bytes"] = row["read_bytes"] + row["write_bytes"]
        else:
            own = own_dram_bytes(program) if own is None else own
            nbytes = own.get((port.attached[0], port.memory.name), 0.0)  # a local port hangs off its device
            row |= {"read_bytes": None, "write_bytes": None, "bytes": nbytes}
        rows.append(row)
    return rows


def build_result(program: Program, m: Measurement, *, energy: bool = True) -> Result:
    plan = program.plan
    project = plan.project
    mapping = project.mapping
    tracks = []
    for r, (times, columns) in enumerate(m.memory):
        st = plan.stages[r]
        node = plan.hw.devices[st.groups[0][0]].node
        if st.residency is None:
            tracks.append(MemoryTrack(device=node, capacity_bytes=st.capacity, times=times, by_category=columns))
            continue
        split = track_split(st)  # activation offload: the kept layers' share stays on the device
        for lv, (memory, capacity, cats) in zip(st.residency.levels, level_tracks(st.residency), strict=True):
            held = {c: (v if c in cats else [0.0] * len(v)) for c, v in columns.items()}  # one track per level
            if split is not None and "activations" in columns:
                held["activations"] = activation_series(columns["activations"], lv, split)
            tracks.append(MemoryTrack(device=f"{node}/{memory}", capacity_bytes=capacity, times=times,
                                      by_category=held, level=lv))
    peak_row, oom = memory_verdict(tracks)
    if not isinstance(program, InferenceProgram):
        meta = {
            "mode": "train",
            "samples_per_iteration": mapping.global_batch,
            "tokens_per_sample": plan.workload.tokens_per_sample,
            "counts_tokens": plan.workload.dims is not None,  # a CNN's samples are images, not token sequences
            "model_flops_per_iteration": plan.model_flops,
            "hardware_flops_per_iteration": plan.hardware_flops,
            "devices": mapping.devices,
            "notes": format_fallbacks(plan) + list(plan.notes) + m.notes,
            "spatial_splits": with_traffic(project, plan.spatial_splits(), plan.workload),
        }
    else:
        # TTFT: the prefill of the batch's last sequence ends (it produces the first output token), or of its
        # first one when the runtime prefills sequences in turn;
        # TPOT: the rest of the request over its output_tokens − 1 decode steps (None without any).
        ph = program.phases
        steps = ph.decode_steps
        flops = ph.request_flops() * mapping.tp  # the hardware's: padded expert slots run too
        prefill_end = m.phase_ends.get("prefill", 0.0)
        ttft = ph.first_token_s(m.phase_ends.get("first_prefill", 0.0)) if ph.sequential else prefill_end
        meta = {
            "mode": "infer",
            "samples_per_iteration": ph.batch,
            "tokens_per_sample": ph.generated_tokens,
            "model_flops_per_iteration": ph.request_model_flops() * mapping.tp,  # routed experts at top_k
            "hardware_flops_per_iteration": flops,
            "devices": mapping.tp * mapping.pp,
            "ttft_s": ttft,
            "prefill_s": prefill_end,
            "tpot_s": (m.end - prefill_end) / steps if steps else None,
            "notes": format_fallbacks(plan) + list(plan.notes) + inference_notes(program) + m.notes,
            "spatial_splits": with_traffic(project, ph.spatial_splits(), plan.workload),
        }
    return Result(
        project=project.name,
        engine=m.engine,
        iteration_time_s=m.end,
        peak_flops_per_device=plan.stages[0].dev.peak_flops,
        memory_breakdown_bytes=peak_row,
        time_breakdown_s=without_noise(m.breakdown, m.end),
        events=m.events,
        oom=oom,
        timeline=m.timeline,
        link_utilisation=m.links,
        memory=tracks,
        critical_path=m.critical,
        lane_devices=m.lane_devices,
        energy=iteration_energy(program, time_s=m.end) if energy else None,  # a search's candidates skip it
        residency=residency_rows(plan),
        dram_ports=dram_port_rows(program, m.links, m.end),
        **meta,
    )
