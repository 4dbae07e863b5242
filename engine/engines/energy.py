"""Energy of one iteration or request, from the hardware IR's figures and what the program moves.

The traffic is counted from the plan once, for both engines (contention changes when bytes move, never
how many): every pass a stage runs (its FLOPs, the bytes its devices move to and from their own memory,
the bytes they stream from remote DRAM ports), every tensor-parallel collective and DRAM stream on its
links (the part of a context ring its attention hides too, ``Segment.hidden``), every pipeline send,
gradient reduction and ZeRO gather. These are the transfers the event engine puts on its flow network
(per device, ``aggregate=False``: tests/test_energy.py checks the two agree).

- links: bytes on each directed link × its pJ/bit × 8, split into on-chip/on-wafer (``noc``) and the
  rest (``links``); memory channels are left out here — their energy is the memory's pJ/byte;
- memory: bytes a device moves to/from its own memory × that memory's pJ/byte (its DRAM, else its SRAM),
  bytes streamed from a remote DRAM port × that port's pJ/byte, and the optimizer step's reads and writes;
- compute: FLOPs × pJ/FLOP in the run's format where the IR gives one (``Compute.energy_pj_per_flop``: the
  energy a FLOP adds above the idle draw), else not reported;
- static: every device the run uses draws its idle power (``Compute.idle_power_w``) for the whole iteration or
  request, busy or waiting (a pipeline bubble, a collective, the host's launches all cost it);
- host: every instance of a component that holds those devices and computes nothing itself (a DGX node: its
  CPUs, NVSwitches, NICs, fans) draws its own ``power_w`` for the whole run. That figure is the rated
  maximum a preset states (the node's share of the system's maximum), so this part is an upper bound.

The last two are powers, not counts: their joules are the power × the time the engine measured
(``Energy.lasting``), so they follow each engine's own timing while everything else is shared.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

from tilewright.engine.ir.hardware import Memory, MemoryKind
from tilewright.engine.perf.collectives import Collective
from tilewright.engine.plan.passes import ChunkPass
from tilewright.engine.plan.program import Program
from tilewright.engine.plan.residency import cpu_steps
from tilewright.engine.plan.sharding import spans_replicas
from tilewright.engine.results.result import ENERGY_PARTS, LASTING_PARTS, Energy

PJ = 1e-12


@dataclass
class Traffic:
    """What one iteration moves and computes, summed over every device that runs it."""

    link_bytes: dict[int, float] = field(default_factory=dict)  # per directed link
    local_bytes: list[float] = field(default_factory=list)  # per stage: to/from the devices' own memory
    remote_bytes: list[float] = field(default_factory=list)  # per stage: streamed from remote DRAM ports
    flops: list[float] = field(default_factory=list)  # per stage
    devices: list[list[int]] = field(default_factory=list)  # per stage: the devices that run it


class _Usage:
    """Bytes per member of each link-usage pattern, expanded to links once at the end."""

    def __init__(self) -> None:
        self.by_pattern: dict[int, tuple[dict[int, float], float]] = {}

    def add(self, usage: dict[int, float], nbytes: float) -> None:
        if nbytes > 0 and usage:
            held = self.by_pattern.get(id(usage))
            self.by_pattern[id(usage)] = (usage, (held[1] if held else 0.0) + nbytes)

    def collective(self, coll: Collective, times: float = 1.0) -> None:
        for ph in coll.phases:
            self.add(ph.usage, ph.bytes_per_member * times)

    def links(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for usage, nbytes in self.by_pattern.values():
            for lk, u in usage.items():
                out[lk] = out.get(lk, 0.0) + u * nbytes
        return out


def stage_runs(program: Program, r: int) -> list[tuple[ChunkPass, int]]:
    """Each distinct pass stage ``r`` runs in the iteration (or request), with how many times it runs it."""
    runs: Counter[int] = Counter()
    passes: dict[int, ChunkPass] = {}
    for pre, ps, _grow, _free in program.work(r):
        for p in (pre, ps):
            if p is not None:
                runs[id(p)] += 1
                passes[id(p)] = p
    return [(passes[key], n) for key, n in runs.items()]


def device_traffic(program: Program, r: int, runs: list[tuple[ChunkPass, int]] | None = None
                   ) -> tuple[float, float, float]:
    """What one device of stage ``r`` moves and computes in the iteration (or request): bytes to and from
    its own memory (its DRAM, else its SRAM; with a training iteration's optimizer step), bytes streamed
    from remote DRAM ports, FLOPs. The count energy prices and a local DRAM port's row reports."""
    st = program.plan.stages[r]
    local = remote = flops = 0.0
    for ps, n in stage_runs(program, r) if runs is None else runs:
        for seg in ps.segments:
            local += n * seg.local_bytes
            remote += n * seg.dram_bytes
            flops += n * seg.flops
    if program.train:
        bandwidth = st.dev.dram_bandwidth
        optimizer = st.optimizer_s * bandwidth if math.isfinite(bandwidth) else 0.0
        if st.residency is not None and cpu_steps(st.dev, st.residency):
            optimizer = 0.0  # the host's CPUs step it (plan.host_step); the copies' 8 B per parameter left out
        if st.dev.local_dram is not None:
            local += optimizer
        else:
            remote += optimizer
    return local, remote, flops


def iteration_traffic(program: Program) -> Traffic:
    plan = program.plan
    replicas = range(plan.dp) if program.train else range(1)  # inference runs one tensor group per stage
    usage = _Usage()
    out = Traffic()
    for r, st in enumerate(plan.stages):
        members = [d for j in replicas for d in st.groups[j]]
        devices = len(members)
        out.devices.append(members)
        runs = stage_runs(program, r)
        local, remote, flops = device_traffic(program, r, runs)
        for ps, n in runs:
            for seg in ps.segments:
                for j in replicas:
                    if seg.comm and (j == replicas[0] or not spans_replicas(seg.comm[0])):  # one for all replicas
                        usage.collective(plan.tp_collective(r, j, seg.comm[0], seg.comm[1]), n)
                    for kind, nbytes in seg.hidden if j == replicas[0] else ():  # the ring behind its kernels
                        usage.collective(plan.tp_collective(r, j, kind, nbytes), n)
                    if seg.dram_bytes > 0:
                        usage.add(plan.dram_usage(r, j), n * seg.dram_bytes)
        sends = Counter(row.send for row in program.table[r] if row.send is not None)
        for key, n in sends.items():
            for j in replicas:
                usage.collective(program.send(key, j, None), n)
        if program.train:
            for chunk in st.chunk_layers:
                for part in plan.dp_buckets(r, chunk):
                    usage.collective(part)
            usage.collective(plan.zero_gather(r))
        out.local_bytes.append(local * devices)
        out.remote_bytes.append(remote * devices)
        out.flops.append(flops * devices)
    if program.train:
        usage.collective(plan.tied_collective())  # the tied embedding's all-reduce, once (``plan.tied``)
    out.link_bytes = usage.links()
    return out


def _sram(memories: tuple[Memory, ...]) -> Memory | None:
    sram = [m for m in memories if m.kind is MemoryKind.sram]
    return max(sram, key=lambda m: m.capacity_bytes) if sram else None


def _figure(what: str, value: float, unit: str) -> str:
    return f"{what}: {value:g} {unit}" + ("" if value else " (no figure in the hardware IR: counts as 0)")


def iteration_energy(program: Program, traffic: Traffic | None = None, time_s: float | None = None) -> Energy:
    """The iteration's (or request's) energy; with ``time_s`` (the engine's measured end) the constant-power
    parts too (``static``, ``host``), else those stay None. The counted part is a pure function of the plan,
    so it is computed once per plan and mode and kept on the plan: a search or benchmark that re-runs one
    plan pays for it once (walking every replica's collectives costs more than the analytic recurrence)."""
    if traffic is not None:
        hit = _energy(program, traffic)
    else:
        key = f"_iteration_energy_{'train' if program.train else 'infer'}"
        hit = program.plan.__dict__.get(key)
        if hit is None:
            hit = program.plan.__dict__[key] = _energy(program, iteration_traffic(program))
    return hit if time_s is None else hit.lasting(time_s)


def _instance_component(node: str) -> str:
    """The component path of a hardware graph node ("dgx-a100/node[3]" → "dgx-a100/node")."""
    return re.sub(r"\[\d+\]", "", node)


def _lasting_power(program: Program, traffic: Traffic, sources: dict[str, None]) -> dict[str, float | None]:
    """W drawn whatever the devices do: each used device's idle power (``static``), and each distinct instance
    of a non-computing component holding them (``host``) at its own ``power_w``; None where no figure."""
    hw = program.plan.hw
    static: float | None = None
    hosts: dict[str, float] = {}
    seen: set[str] = set()
    for members in traffic.devices:
        for d in members:
            device = hw.devices[d]
            idle = device.compute.idle_power_w
            if idle is not None:
                static = (static or 0.0) + idle
                sources[f"static {device.path}: idle {idle:g} W per device"] = None
            parts = device.node.split("/")
            for k in range(len(parts) - 1, 0, -1):  # the nearest holder with a power figure, once: a system's
                inst = "/".join(parts[:k])  # own figure would contain its nodes', so farther ones are not added
                if inst in seen:
                    break
                comp = hw.root.find(_instance_component(inst))
                if comp is not None and comp.compute is None and comp.power_w:
                    seen.add(inst)
                    hosts[inst] = comp.power_w
                    sources[f"host {comp.name}: {comp.power_w:g} W per instance (its rated maximum)"] = None
                    break
    if static is None:
        sources["static: no idle power in the hardware IR (not reported)"] = None
    return {"static": static, "host": sum(hosts.values()) if hosts else None}


def _energy(program: Program, traffic: Traffic) -> Energy:
    plan = program.plan
    parts: dict[str, float | None] = dict.fromkeys(ENERGY_PARTS, 0.0)
    sources: dict[str, None] = {}  # ordered, without repeats
    has_compute_figure = False
    for r, st in enumerate(plan.stages):
        device = plan.hw.devices[st.groups[0][0]]
        dev = st.dev
        per_flop = dev.compute.flop_energy_pj(dev.dtype)
        if per_flop is not None:
            has_compute_figure = True
            parts["compute"] = (parts["compute"] or 0.0) + traffic.flops[r] * per_flop * PJ
            sources[_figure(f"compute {device.path} ({dev.dtype.value})", per_flop, "pJ/FLOP")] = None
        own = dev.local_dram or _sram(device.memories)
        if own is not None and traffic.local_bytes[r]:
            part = "sram" if own.kind is MemoryKind.sram else "dram"
            parts[part] = (parts[part] or 0.0) + traffic.local_bytes[r] * own.energy_pj_per_byte * PJ
            sources[_figure(f"{part.upper()} {own.name} ({own.kind.value}) of {device.path}",
                            own.energy_pj_per_byte, "pJ/byte")] = None
        if dev.remote_dram is not None and traffic.remote_bytes[r]:
            mem = dev.remote_dram
            parts["dram"] = (parts["dram"] or 0.0) + traffic.remote_bytes[r] * mem.energy_pj_per_byte * PJ
            sources[_figure(f"DRAM {mem.name} ({mem.kind.value}) ports", mem.energy_pj_per_byte, "pJ/byte")] = None
    if not has_compute_figure:
        parts["compute"] = None
        sources["compute: no energy per FLOP in the hardware IR (not reported)"] = None
    for lk, nbytes in sorted(traffic.link_bytes.items()):
        link = plan.hw.links[lk]
        if link.kind == "memory" or nbytes <= 0:
            continue
        part = "noc" if link.kind == "noc" else "links"
        parts[part] = (parts[part] or 0.0) + nbytes * 8 * link.energy_pj_per_bit * PJ
        sources[_figure(f"{link.kind} links of {link.level}", link.energy_pj_per_bit, "pJ/bit")] = None
    power = _lasting_power(program, traffic, sources)
    for k in LASTING_PARTS:
        parts[k] = None
    return Energy(by_part=parts, sources=list(sources), power_w=power)
