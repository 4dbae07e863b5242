"""Made-up results: a large timeline built with numpy (for the Gantt benchmark and its test: appending a
million slices one by one through ``Timeline.add`` would measure the appending, not the drawing), and a
tiny result with round numbers whose every derived figure can be worked out by hand, and a metrics-only
one (for tests)."""

from __future__ import annotations

import numpy as np
from tilewright.engine.results import CATEGORIES, Lane, MemoryTrack, OutOfMemory, Result, Series, Timeline


class SyntheticTimeline(Timeline):
    """A ``Timeline`` whose columns are given whole (already sorted by lane, then start)."""

    def __init__(self, lanes: list[Lane], labels: list[str], columns: dict[str, np.ndarray]):
        super().__init__(lanes=lanes, labels=labels)
        self._columns = columns

    def __len__(self) -> int:
        return len(self._columns["start"])

    def arrays(self) -> dict[str, np.ndarray]:
        return self._columns


def synthetic_timeline(slices: int = 1_000_000, compute_lanes: int = 64, link_lanes: int = 64,
                       seed: int = 0) -> SyntheticTimeline:
    """``slices`` back-to-back slices spread over compute and link lanes, random durations (1–100 µs) and
    categories; compute slices carry a stage, layer and micro-batch like a real pipeline's."""
    rng = np.random.default_rng(seed)
    lanes = [Lane(f"stage {i}", "compute", f"8 devices from sys/node[{i}]/gpu[0]") for i in range(compute_lanes)]
    lanes += [Lane(f"sys/node[{i}]/gpu[0] → sys/switch", "links", "25 GB/s") for i in range(link_lanes)]
    n_lanes = len(lanes)
    lane = np.sort(rng.integers(0, n_lanes, slices)).astype(np.int32)
    dur = rng.uniform(1e-6, 1e-4, slices)
    gaps = rng.uniform(0.0, 2e-5, slices)
    ends = np.cumsum(dur + gaps)
    counts = np.bincount(lane, minlength=n_lanes)
    lane_first = np.concatenate([[0], np.cumsum(counts)])[:-1]
    offset = np.concatenate([[0.0], ends])[lane_first]  # each lane's clock starts at 0
    start = ends - dur - offset[lane]
    is_compute = lane < compute_lanes
    network = CATEGORIES.index("network")
    category = np.where(is_compute, rng.choice([0, 1, 2, 3], slices), network).astype(np.int16)
    stage = np.where(is_compute, lane % 8, -1).astype(np.int32)
    layer = np.where(is_compute, rng.integers(0, 96, slices), -1).astype(np.int32)
    micro_batch = np.where(is_compute, rng.integers(0, 64, slices), -1).astype(np.int32)
    labels = [f"block{i} F" for i in range(96)]
    label = np.where(is_compute, layer, 0).astype(np.int32)
    columns = {"lane": lane, "start": start, "dur": dur, "category": category, "label": label,
               "stage": stage, "micro_batch": micro_batch, "layer": layer}
    return SyntheticTimeline(lanes, labels, columns)


GIB = 2.0**30


def tiny_result() -> Result:
    """A 10 s iteration on three devices of "sys":

    - stage 0 (node[0]/gpu[0..1]): compute 0–4 s, tp_comm 4–5 s, compute 6–8 s → busy 70 %;
      stage 1 (node[1]/gpu[0]): compute 2–6 s → busy 40 %; one link lane with a network slice 4–5 s.
    - link A node[0]/gpu[0] → switch: 0, then 100 % over 4–5 s → average 10 %;
      link B switch → node[1]/gpu[0]: 25 % until 2 s, then 50 % → average 45 % (the busiest).
    - memory: node[0]/gpu[0] 30 GiB then 70 GiB of 80 GiB; node[1]/gpu[0] 12 GiB then 22 GiB of 16 GiB,
      which overflows (and is the reported out-of-memory).
    """
    tl = Timeline()
    s0 = tl.lane("stage 0", "compute", "2 devices from sys/node[0]/gpu[0]")
    s1 = tl.lane("stage 1", "compute", "1 device from sys/node[1]/gpu[0]")
    link = tl.lane("sys/node[0]/gpu[0] → sys/switch", "links", "25 GB/s")
    tl.add(s0, 0.0, 4.0, "compute", "block0 F0", stage=0, micro_batch=0, layer=0)
    tl.add(s0, 4.0, 1.0, "tp_comm", "all-reduce block0", stage=0, micro_batch=0, layer=0)
    tl.add(s0, 6.0, 2.0, "compute", "block0 B0", stage=0, micro_batch=0, layer=0)
    tl.add(s1, 2.0, 4.0, "compute", "block1 F0", stage=1, micro_batch=0, layer=1)
    tl.add(link, 4.0, 1.0, "network", "all-reduce block0")
    a = ("sys/node[0]/gpu[0]", "sys/switch")
    b = ("sys/switch", "sys/node[1]/gpu[0]")
    links = [Series(f"{a[0]} → {a[1]}", "fraction", [0.0, 4.0, 5.0], [0.0, 1.0, 0.0], 1.0, *a),
             Series(f"{b[0]} → {b[1]}", "fraction", [0.0, 2.0], [0.25, 0.5], 1.0, *b)]
    zero = [0.0, 0.0]
    memory = [
        MemoryTrack("sys/node[0]/gpu[0]", 80 * GIB, [0.0, 5.0],
                    {"weights": [10 * GIB] * 2, "gradients": zero, "optimizer": zero,
                     "activations": [20 * GIB, 60 * GIB], "kv_cache": zero, "workspace": zero}),
        MemoryTrack("sys/node[1]/gpu[0]", 16 * GIB, [0.0, 5.0],
                    {"weights": [10 * GIB] * 2, "gradients": zero, "optimizer": zero,
                     "activations": [2 * GIB, 12 * GIB], "kv_cache": zero, "workspace": zero}),
    ]
    return Result(
        project="tiny", mode="train", engine="event", iteration_time_s=10.0, samples_per_iteration=8.0,
        tokens_per_sample=1024, model_flops_per_iteration=3e15, hardware_flops_per_iteration=4e15, devices=3,
        peak_flops_per_device=1e14, memory_breakdown_bytes={"weights": 10 * GIB, "activations": 60 * GIB},
        time_breakdown_s={"compute": 8.0, "tp_comm": 1.0, "bubble": 1.0}, events=42, timeline=tl,
        link_utilisation=links, memory=memory, oom=OutOfMemory("sys/node[1]/gpu[0]", 22 * GIB, 16 * GIB),
        lane_devices={"stage 0": ["sys/node[0]/gpu[0]", "sys/node[0]/gpu[1]"], "stage 1": ["sys/node[1]/gpu[0]"]},
    )


def metrics_only_result(**fields: object) -> Result:
    """A result with metrics and nothing over time (no timeline, links or memory tracks: what a
    metrics-only run or a test double's engine hands back); ``fields`` override the defaults."""
    values: dict[str, object] = dict(
        project="bare", mode="train", engine="analytic", iteration_time_s=1.0, samples_per_iteration=1.0,
        tokens_per_sample=1, model_flops_per_iteration=0.0, hardware_flops_per_iteration=0.0, devices=1,
        peak_flops_per_device=1e12, memory_breakdown_bytes={}, time_breakdown_s={},
    )
    values.update(fields)
    return Result(**values)  # type: ignore[arg-type]
