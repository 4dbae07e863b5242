"""The plain result of a simulation: metrics, a timeline, link and memory series, the critical path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.results.timeline import Timeline

MEMORY_CATEGORIES = ("weights", "gradients", "optimizer", "activations", "kv_cache", "workspace")
TIME_CATEGORIES = ("compute", "recompute", "tp_comm", "pp_comm", "dp_comm", "bubble", "optimizer", "memory_stall")


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
        if not self.times or end <= 0:
            return 0.0
        total = 0.0
        for i, t in enumerate(self.times):
            t_next = self.times[i + 1] if i + 1 < len(self.times) else end
            total += self.values[i] * max(0.0, min(t_next, end) - t)
        return total / end


@dataclass
class OutOfMemory:
    device: str
    need_bytes: float
    capacity_bytes: float

    def as_json(self) -> dict[str, Any]:
        return {"device": self.device, "need_bytes": self.need_bytes, "capacity_bytes": self.capacity_bytes}


@dataclass
class MemoryTrack:
    """Occupancy of one device over time, by category (bytes)."""

    device: str
    capacity_bytes: float
    times: list[float]
    by_category: dict[str, list[float]]

    def totals(self) -> list[float]:
        return [sum(vals[i] for vals in self.by_category.values()) for i in range(len(self.times))]

    def peak(self) -> float:
        return max(self.totals(), default=0.0)

    def peak_breakdown(self) -> dict[str, float]:
        """Occupancy by category at the moment the total peaks."""
        totals = self.totals()
        if not totals:
            return dict.fromkeys(MEMORY_CATEGORIES, 0.0)
        k = max(range(len(totals)), key=totals.__getitem__)
        return {c: self.by_category.get(c, [0.0] * len(totals))[k] for c in MEMORY_CATEGORIES}


def memory_verdict(tracks: list[MemoryTrack]) -> tuple[dict[str, float], OutOfMemory | None]:
    """The breakdown of the fullest device, and the worst overflow (the device furthest over its
    capacity), if any — what every engine reports from its memory tracks."""
    if not tracks:
        return dict.fromkeys(MEMORY_CATEGORIES, 0.0), None
    fullest = max(tracks, key=MemoryTrack.peak)
    over = [t for t in tracks if t.peak() > t.capacity_bytes]
    oom = None
    if over:
        worst = max(over, key=lambda t: t.peak() - t.capacity_bytes)
        oom = OutOfMemory(worst.device, worst.peak(), worst.capacity_bytes)
    return fullest.peak_breakdown(), oom


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
    ttft_s: float | None = None
    tpot_s: float | None = None
    oom: OutOfMemory | None = None
    timeline: Timeline = field(default_factory=Timeline)
    link_utilisation: list[Series] = field(default_factory=list)
    memory: list[MemoryTrack] = field(default_factory=list)
    critical_path: list[tuple[str, float, float]] = field(default_factory=list)
    lane_devices: dict[str, list[str]] = field(default_factory=dict)  # compute lane → device node ids
    notes: list[str] = field(default_factory=list)

    @property
    def peak_memory_bytes(self) -> float:
        return sum(self.memory_breakdown_bytes.values())

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
            "tokens_per_s": self.samples_per_iteration * self.tokens_per_sample / t if t > 0 else 0.0,
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
            out["ttft_s"] = self.ttft_s
            out["tpot_s"] = self.tpot_s
        if self.oom is not None:
            out["oom"] = self.oom.as_json()
        return out

    def summary_text(self) -> str:
        m = self.metrics_json()
        gib = 2**30
        lines = [
            f"{self.project} — {self.mode}, {self.engine} engine, {self.devices} devices",
            f"  iteration time   {m['iteration_time_s']:.4g} s",
            f"  throughput       {m['samples_per_s']:.4g} samples/s, {m['tokens_per_s']:.4g} tokens/s",
            f"  MFU / HFU        {100 * m['mfu']:.1f} % / {100 * m['hfu']:.1f} %",
            f"  peak memory      {m['peak_memory_bytes'] / gib:.2f} GiB (largest device)",
        ]
        if self.mode == "infer":
            lines.append(f"  TTFT / TPOT      {self.ttft_s * 1e3:.3f} ms / {self.tpot_s * 1e3:.3f} ms")
        parts = ", ".join(f"{k} {v:.3g} s" for k, v in m["time_breakdown_s"].items() if v > 0)
        lines.append(f"  time breakdown   {parts}")
        if self.oom:
            lines.append(
                f"  OUT OF MEMORY    {self.oom.device}: needs {self.oom.need_bytes / gib:.2f} GiB, "
                f"has {self.oom.capacity_bytes / gib:.2f} GiB"
            )
        lines.append(f"  simulated in     {m['wall_time_s']:.3f} s ({self.events} events)")
        lines += [f"  note             {n}" for n in self.notes[:4]]
        if len(self.notes) > 4:
            lines.append(f"  note             … and {len(self.notes) - 4} more (see the result notes)")
        return "\n".join(lines)
