"""The plain result of a simulation: metrics, a timeline, link and memory series, the critical path."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tilewright.engine.results.text import counted, duration, number
from tilewright.engine.results.timeline import Timeline

HOST_LEVEL = "host"  # ``mapping.memory_levels``' name of the node's host memory
MEMORY_CATEGORIES = ("weights", "gradients", "optimizer", "activations", "kv_cache", "workspace")
TIME_CATEGORIES = (
    "compute", "recompute", "tp_comm", "ep_comm", "cp_comm", "pp_comm", "dp_comm", "bubble", "optimizer",
    "memory_stall", "host_wait",
)
# Where energy goes: arithmetic, SRAM and DRAM accesses, on-chip/on-wafer links (NoC), links between chips,
# nodes and switches; then what is drawn for as long as the run lasts, busy or not: the devices' idle power
# (``static``) and the hosts around them (``host``: a node's CPUs, switches, NICs and fans).
ENERGY_PARTS = ("compute", "sram", "dram", "noc", "links", "static", "host")
#: The parts drawn at a constant power over the whole iteration or request (``Energy.power_w``).
LASTING_PARTS = ("static", "host")
# parts that bound rather than model (the hosts' rated power): reported, left out of the totals and powers
UPPER_BOUND_PARTS = ("host",)


@dataclass
class Series:
    """A piecewise-constant series: ``values[i]`` holds from ``times[i]`` to ``times[i+1]``."""

    name: str
    unit: str
    times: list[float]
    values: list[float]
    capacity: float | None = None
    src: str = ""  # for a link: the graph node ids it joins, so views can find it on the canvas
    dst: str = ""

    def mean(self, end: float) -> float:
        """Time-weighted mean over [0, end] (vectorised: link series of long runs hold ~10⁵ points)."""
        if not self.times or end <= 0:
            return 0.0
        return float(window_means(self.times, self.values, np.array([0.0, end]))[0])


def window_means(times: Sequence[float], values: Sequence[float], edges: np.ndarray) -> np.ndarray:
    """Exact means of a piecewise-constant series (``values[i]`` from ``times[i]`` on, 0 before the
    first point) over the windows [edges[j], edges[j+1]): what coarse link series, ``Series.mean`` and
    the studio's averaged curves all use."""
    widths = np.diff(edges)
    t = np.asarray(times, dtype=float)
    if not len(t):
        return np.zeros(len(widths))
    v = np.asarray(values, dtype=float)
    held = np.diff(np.append(t, max(edges[-1], t[-1]))).clip(min=0.0)
    integral = np.concatenate([[0.0], np.cumsum(v * held)])  # ∫ from times[0] to times[i]
    k = np.searchsorted(t, edges, side="right") - 1
    kk = np.maximum(k, 0)
    at = np.where(k >= 0, integral[kk] + v[kk] * (edges - t[kk]), 0.0)
    return np.divide(np.diff(at), widths, out=np.zeros_like(widths), where=widths > 0)


@dataclass
class OutOfMemory:
    device: str
    need_bytes: float
    capacity_bytes: float

    def as_json(self) -> dict[str, Any]:
        return {"device": self.device, "need_bytes": self.need_bytes, "capacity_bytes": self.capacity_bytes}


@dataclass
class MemoryTrack:
    """Occupancy of one device over time, by category (bytes); with ``mapping.memory_levels`` one track per
    memory level the device keeps state in (``level``: "sram", "dram" or "host"; "" — the device's own memory,
    one track). A "host" track is the node's host memory, the device's share of it: not the accelerator's."""

    device: str
    capacity_bytes: float
    times: list[float]
    by_category: dict[str, list[float]]
    level: str = ""

    @property
    def host(self) -> bool:
        return self.level == HOST_LEVEL

    @property
    def owner(self) -> str:
        """The device the track belongs to: a level's track is named "<device node>/<memory>"."""
        return self.device.rsplit("/", 1)[0] if self.level else self.device

    def totals(self) -> list[float]:
        return self._totals().tolist()

    def _totals(self) -> np.ndarray:
        """Total occupancy at each time point (numpy: tracks of long runs hold ~10⁵ points)."""
        n = len(self.times)
        out = np.zeros(n)
        for vals in self.by_category.values():
            out += np.asarray(vals, dtype=float)[:n]
        return out

    def peak(self) -> float:
        totals = self._totals()
        return float(totals.max()) if totals.size else 0.0

    def peak_breakdown(self) -> dict[str, float]:
        """Occupancy by category at the moment the total peaks (the first such moment)."""
        totals = self._totals()
        if not totals.size:
            return dict.fromkeys(MEMORY_CATEGORIES, 0.0)
        k = int(np.argmax(totals))
        return {c: float(self.by_category[c][k]) if c in self.by_category else 0.0 for c in MEMORY_CATEGORIES}


def memory_verdict(tracks: list[MemoryTrack]) -> tuple[dict[str, float], OutOfMemory | None]:
    """The breakdown of the fullest device, and the worst overflow (the level furthest over its capacity),
    if any — what every engine reports from its memory tracks. Both are about the accelerators' own memory:
    a device's levels (SRAM and DRAM with ``mapping.memory_levels``) add up to its occupancy, each checked
    against its own capacity; host-memory tracks are left to ``host_memory`` (the node's DDR is no device's
    memory, and state offloaded there must not read as the GPU's peak)."""
    own = [t for t in tracks if not t.host]
    if not own:
        return dict.fromkeys(MEMORY_CATEGORIES, 0.0), _worst_overflow([])
    devices = [_together(ts) for ts in _by_owner(own).values()]
    fullest = max(devices, key=lambda t: t.peak())
    return fullest.peak_breakdown(), _worst_overflow(own)


def host_memory(tracks: list[MemoryTrack]) -> tuple[dict[str, float], float, OutOfMemory | None] | None:
    """What the devices keep in their node's host memory (``mapping.memory_levels`` … = "host"): the
    breakdown of the fullest device's share at its peak, that share's capacity, and the worst overflow of
    a share; None when nothing is offloaded."""
    host = [t for t in tracks if t.host]
    if not host:
        return None
    fullest = max(host, key=lambda t: t.peak())
    return fullest.peak_breakdown(), fullest.capacity_bytes, _worst_overflow(host)


def _worst_overflow(tracks: list[MemoryTrack]) -> OutOfMemory | None:
    peaks = [t.peak() for t in tracks]
    over = [i for i, t in enumerate(tracks) if peaks[i] > t.capacity_bytes]
    if not over:
        return None
    worst = max(over, key=lambda i: peaks[i] - tracks[i].capacity_bytes)
    return OutOfMemory(tracks[worst].device, peaks[worst], tracks[worst].capacity_bytes)


def _by_owner(tracks: list[MemoryTrack]) -> dict[str, list[MemoryTrack]]:
    out: dict[str, list[MemoryTrack]] = {}
    for t in tracks:
        out.setdefault(t.owner, []).append(t)
    return out


def _together(tracks: list[MemoryTrack]) -> MemoryTrack:
    """One device's level tracks as one: they share the device's time points (``engines.result_builder``
    masks one set of columns per level), so their categories add up point by point."""
    if len(tracks) == 1:
        return tracks[0]
    n = min(len(t.times) for t in tracks)
    summed: dict[str, list[float]] = {}
    for t in tracks:
        for c, vals in t.by_category.items():
            prev = np.asarray(summed.get(c, np.zeros(n)), dtype=float)
            summed[c] = (prev + np.asarray(vals, dtype=float)[:n]).tolist()
    return MemoryTrack(tracks[0].owner, sum(t.capacity_bytes for t in tracks), tracks[0].times[:n], summed)


@dataclass
class Energy:
    """Energy of one iteration (training) or one request (inference) in joules, by where it is spent,
    from the hardware IR's figures (pJ/byte of memories, pJ/bit of interconnects, pJ/FLOP, the devices' idle
    power and their hosts' power where the IR has them); ``sources`` names every figure used. A part is None
    when the IR gives no figure for it."""

    by_part: dict[str, float | None]
    sources: list[str] = field(default_factory=list)
    # the parts drawn at a constant power whatever the devices do (``LASTING_PARTS``), in W; None: not known.
    # Their joules depend on how long the run lasts, which each engine times itself (``lasting``)
    power_w: dict[str, float | None] = field(default_factory=dict)

    @property
    def total_j(self) -> float:
        """The devices' energy: every known part but the hosts', which is their rated power over the run (an
        upper bound, ``host_j``), so it would swamp what the model counts."""
        return sum(v for k, v in self.by_part.items() if v is not None and k not in UPPER_BOUND_PARTS)

    @property
    def host_j(self) -> float | None:
        """The hosts around the devices at their rated power over the run: at most this much more."""
        return self.by_part.get("host")

    def lasting(self, time_s: float) -> Energy:
        """This energy with the constant-power parts drawn over ``time_s`` (the iteration or request)."""
        timed = {k: None if w is None else w * time_s for k, w in self.power_w.items()}
        return Energy(by_part=self.by_part | timed, sources=list(self.sources), power_w=dict(self.power_w))


@dataclass
class Result:
    project: str
    mode: str
    engine: str
    iteration_time_s: float
    samples_per_iteration: float
    tokens_per_sample: int
    model_flops_per_iteration: float
    hardware_flops_per_iteration: float
    devices: int
    peak_flops_per_device: float
    memory_breakdown_bytes: dict[str, float]
    time_breakdown_s: dict[str, float]
    events: int = 0
    wall_time_s: float = 0.0
    ttft_s: float | None = None  # inference: end of the batch's prefill (the first output token)
    tpot_s: float | None = None  # inference: (e2e − TTFT)/(output_tokens − 1); None with one output token
    prefill_s: float | None = None  # inference: end of the prefill (= TTFT: every sequence arrives at 0)
    oom: OutOfMemory | None = None
    timeline: Timeline = field(default_factory=Timeline)
    link_utilisation: list[Series] = field(default_factory=list)
    memory: list[MemoryTrack] = field(default_factory=list)
    critical_path: list[tuple[str, float, float]] = field(default_factory=list)
    lane_devices: dict[str, list[str]] = field(default_factory=dict)  # compute lane → device node ids
    notes: list[str] = field(default_factory=list)
    energy: Energy | None = None
    # grid devices: per stage and phase, each matmul's split over the cores (where, op, count, split)
    spatial_splits: list[dict[str, Any]] = field(default_factory=list)
    # per stage: the memory levels its first device keeps state in (``mapping.memory_levels``, else its own
    # memory) — stage, device, memory_levels (as set), levels [{level, memory, capacity_bytes,
    # bandwidth_bytes_per_s, categories, track}] ("track": the ``memory`` track of that level's occupancy)
    residency: list[dict[str, Any]] = field(default_factory=list)
    # event engine: every DRAM port's traffic over the run — port, memory, owner, interleave, bytes (read +
    # written), read_bytes, write_bytes (None for a device's own DRAM: its traffic is priced inside each op,
    # one total), read_bandwidth_bytes_per_s, write_bandwidth_bytes_per_s (empty: no link series)
    dram_ports: list[dict[str, Any]] = field(default_factory=list)
    # whether a sample is a sequence of tokens (a transformer's); a CNN's or an MLP's samples are images or
    # rows, and a "tokens/s" or "J/token" of them would be the samples' figure under another name
    counts_tokens: bool = True

    @property
    def peak_memory_bytes(self) -> float:
        return sum(self.memory_breakdown_bytes.values())

    @property
    def host_memory(self) -> tuple[dict[str, float], float, OutOfMemory | None] | None:
        """State offloaded to the node's host memory (``results.result.host_memory``), reported apart from
        the device's peak; None when nothing is offloaded."""
        return host_memory(self.memory)

    @property
    def host_oom(self) -> OutOfMemory | None:
        """The worst overflow of a device's share of its node's host memory (not the device's own)."""
        host = self.host_memory
        return host[2] if host is not None else None

    @property
    def mfu(self) -> float:
        denom = self.iteration_time_s * self.devices * self.peak_flops_per_device
        return self.model_flops_per_iteration / denom if denom > 0 else 0.0

    @property
    def hfu(self) -> float:
        denom = self.iteration_time_s * self.devices * self.peak_flops_per_device
        return self.hardware_flops_per_iteration / denom if denom > 0 else 0.0

    def metrics_json(self) -> dict[str, Any]:
        t = self.iteration_time_s
        out: dict[str, Any] = {
            "iteration_time_s": t,
            "samples_per_s": self.samples_per_iteration / t if t > 0 else 0.0,
        }
        if self.counts_tokens:
            out["tokens_per_s"] = self.samples_per_iteration * self.tokens_per_sample / t if t > 0 else 0.0
        out |= {
            "model_flops_per_iteration": self.model_flops_per_iteration,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "devices": self.devices,
            "peak_memory_bytes": self.peak_memory_bytes,
            "memory_breakdown_bytes": {k: self.memory_breakdown_bytes.get(k, 0.0) for k in MEMORY_CATEGORIES},
            "time_breakdown_s": {k: self.time_breakdown_s.get(k, 0.0) for k in TIME_CATEGORIES},
            "events": self.events,
            "wall_time_s": self.wall_time_s,
            "engine": self.engine,
            "mode": self.mode,
        }
        if self.mode == "infer":
            out |= self.inference_metrics()
        if self.energy is not None:
            e, tokens = self.energy.total_j, self.samples_per_iteration * self.tokens_per_sample
            out["energy_j"] = e
            out["energy_breakdown_j"] = {k: self.energy.by_part.get(k) for k in ENERGY_PARTS}
            out["average_power_w"] = e / t if t > 0 else 0.0
            # what one device draws on average, to hold against its TDP (the hosts are not in ``e``)
            out["average_power_per_device_w"] = e / t / self.devices if t > 0 and self.devices else 0.0
            if self.energy.host_j is not None:
                out["host_energy_upper_bound_j"] = self.energy.host_j
            if self.counts_tokens:  # inference: per output token (the batch's requests × their output tokens)
                out["energy_per_token_j"] = e / tokens if tokens > 0 else 0.0
            else:
                out["energy_per_sample_j"] = e / self.samples_per_iteration if self.samples_per_iteration else 0.0
            if self.mode == "infer":  # energy_j is the whole batch's (every request runs at once): one request's
                n = self.samples_per_iteration
                out["energy_per_request_j"] = e / n if n > 0 else 0.0
            out["energy_sources"] = list(self.energy.sources)
        if self.oom is not None:
            out["oom"] = self.oom.as_json()
        host = self.host_memory
        if host is not None:  # offloaded state, apart from the device's peak (peak_memory_bytes)
            row, capacity, over = host
            out["host_peak_memory_bytes"] = sum(row.values())
            out["host_memory_capacity_bytes"] = capacity
            out["host_memory_breakdown_bytes"] = row
            if over is not None:
                out["host_oom"] = over.as_json()
        if self.spatial_splits:
            out["spatial_splits"] = list(self.spatial_splits)
        out["notes"] = list(self.notes)
        return out

    def inference_metrics(self) -> dict[str, Any]:
        """Latencies of the batch (every sequence arrives at 0): ``ttft_s`` the first output token,
        ``prefill_s`` the prefill's end, ``tpot_s`` per later output token, ``e2e_s`` the last token;
        tokens/s per user = 1/TPOT (None without decode steps), per device = batch · output tokens / e2e /
        devices."""
        e2e, tokens = self.iteration_time_s, self.samples_per_iteration * self.tokens_per_sample
        return {
            "ttft_s": self.ttft_s,
            "prefill_s": self.prefill_s,
            "tpot_s": self.tpot_s,
            "e2e_s": e2e,
            "tokens_per_s_per_user": 1.0 / self.tpot_s if self.tpot_s else None,
            "tokens_per_s_per_device": tokens / e2e / self.devices if e2e > 0 and self.devices else 0.0,
        }

    def summary_text(self) -> str:
        """The text ``tilewright run`` prints: every number through ``text.number`` (one style: 3–4
        significant digits, thousands separators, no exponents for ordinary magnitudes)."""
        m = self.metrics_json()
        gib = 2**30
        lines = [
            f"{self.project} — {self.mode}, {self.engine} engine, {counted(self.devices, 'device')}",
            f"  iteration time   {duration(m['iteration_time_s'])}",
            f"  throughput       {number(m['samples_per_s'])} samples/s"
            + (f", {number(m['tokens_per_s'])} tokens/s" if "tokens_per_s" in m else ""),
            f"  MFU / HFU        {100 * m['mfu']:.1f} % / {100 * m['hfu']:.1f} %"
            # model FLOPs count every s² attention pair (PaLM's and Megatron's convention); a causal or windowed
            # flash kernel computes only the pairs its mask keeps, so its hardware FLOPs can be fewer
            + (" (MFU counts every attention pair, HFU only those the masked flash kernels compute)"
               if m["hfu"] < m["mfu"] else ""),
            f"  peak memory      {number(m['peak_memory_bytes'] / gib)} GiB (largest device)",
        ]
        if "host_peak_memory_bytes" in m:
            held = ", ".join(f"{k} {number(v / gib)} GiB" for k, v in m["host_memory_breakdown_bytes"].items() if v)
            lines.append(f"  host memory      {number(m['host_peak_memory_bytes'] / gib)} GiB of "
                         f"{number(m['host_memory_capacity_bytes'] / gib)} GiB per device, offloaded "
                         f"({held or 'nothing held'})")
        if self.mode == "infer":
            tpot = "— (one output token)" if self.tpot_s is None else duration(self.tpot_s)
            user = "" if self.tpot_s is None else f", {number(m['tokens_per_s_per_user'])} tokens/s per user"
            lines.append(f"  TTFT / TPOT      {duration(self.ttft_s or 0.0)} / {tpot}{user}")
            lines.append(f"  per device       {number(m['tokens_per_s_per_device'])} output tokens/s")
        parts = ", ".join(f"{k} {duration(v)}" for k, v in m["time_breakdown_s"].items() if v > 0)
        lines.append(f"  time breakdown   {parts}")
        if self.energy is not None and not any(self.energy.by_part.values()):
            lines.append("  energy           not known: the hardware IR has no energy figures "
                         "(pJ/byte, pJ/bit, pJ/FLOP, idle W)")
        elif self.energy is not None:
            lines += self._energy_lines(m)
        if self.oom:
            lines.append(
                f"  OUT OF MEMORY    {self.oom.device}: needs {number(self.oom.need_bytes / gib)} GiB, "
                f"has {number(self.oom.capacity_bytes / gib)} GiB"
            )
        if "host_oom" in m:
            over = m["host_oom"]
            lines.append(
                f"  HOST MEMORY FULL {over['device']}: needs {number(over['need_bytes'] / gib)} GiB, "
                f"has {number(over['capacity_bytes'] / gib)} GiB"
            )
        lines.append(f"  simulated in     {number(m['wall_time_s'], 3)} s ({counted(self.events, 'event')})")
        lines += [f"  note             {n}" for n in self.notes[:4]]
        if len(self.notes) > 4:
            lines.append(f"  note             … and {len(self.notes) - 4} more (all of them: run --json, key "
                         "\"notes\"; run --csv, metrics.csv rows notes.N)")
        for sp in self.spatial_splits:
            traffic = f" ({traffic_note(sp['traffic'])} per op)" if sp.get("traffic") else ""
            lines.append(f"  split            {sp['where']}: {sp['count']} × {sp['op']}: {sp['split']}{traffic}")
        return "\n".join(lines)


    def _energy_lines(self, m: dict[str, Any]) -> list[str]:
        """The energy lines of ``summary_text``: an inference batch's energy and its per-request share, and
        every power qualified by the parts it counts (a part the IR has no figure for is left out of it)."""
        if self.mode == "infer":
            n = self.samples_per_iteration
            per = (f"J per batch of {counted(round(n), 'request')} ({number(m['energy_per_request_j'])} J per "
                   "request)" if n != 1 else "J per request")
        else:
            per = "J per iteration"
        unit = ("J/sample", m.get("energy_per_sample_j")) if not self.counts_tokens else (
            "J/output token" if self.mode == "infer" else "J/token", m.get("energy_per_token_j"))
        parts = m["energy_breakdown_j"]
        known = counts_only(parts)  # one qualifier for both powers: each sums the parts known
        lines = [
            f"  energy           {number(m['energy_j'])} {per}, {number(unit[1] or 0.0)} {unit[0]}",
            f"  average power    {number(m['average_power_w'])} W, {number(m['average_power_per_device_w'])} W "
            "per device (hosts excluded)" + (f" — counting {known}" if known else ""),
        ]
        shown = ", ".join(f"{k} {'n/a' if v is None else f'{number(v)} J'}" if k != "host" or v is None
                          else f"host ≤ {number(v)} J (rated max)" for k, v in parts.items())
        lines.append(f"  energy by part   {shown}")
        if parts.get("host"):
            lines.append(f"  host energy      ≤ {number(parts['host'])} J more: the nodes' rated power over the "
                         "whole run, an upper bound, left out of the energy and power above")
        return lines


ENERGY_PART_NAMES = {"compute": "compute", "sram": "SRAM", "dram": "DRAM", "noc": "NoC", "links": "links",
                     "static": "static", "host": "host"}


def counts_only(parts: dict[str, float | None]) -> str:
    """"" when every part has a figure; else what a power or energy summed over ``parts`` counts: "DRAM
    and links only; compute, static not known" — a sum of the known parts is no device's power, and must
    not read as one."""
    unknown = [ENERGY_PART_NAMES.get(k, k) for k, v in parts.items() if v is None]
    if not unknown:
        return ""
    known = [ENERGY_PART_NAMES.get(k, k) for k, v in parts.items() if v]  # priced, and not 0 J
    named = (", ".join(known[:-1]) + " and " + known[-1]) if len(known) > 1 else (known[0] if known else "nothing")
    return f"{named} only; {', '.join(unknown)} not known"


def traffic_note(traffic: dict[str, Any]) -> str:
    """"busiest NoC link 12.6 MB, 1.33 GB multicast link-bytes, DRAM 67.1 MB" (decimal prefixes)."""
    return (
        f"busiest NoC link {_bytes(traffic['busiest_link_bytes'])}, "
        f"{_bytes(traffic['multicast_link_bytes'])} multicast link-bytes, DRAM {_bytes(traffic['dram_bytes'])}"
    )


def _bytes(n: float) -> str:
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{number(n / scale, 3)} {prefix}B"
    return f"{number(n, 3)} B"
