"""``mapping.memory_levels`` for one pipeline stage: which memory level holds each category of state.

A category named in ``memory_levels`` lives in that memory. The name is resolved from the stage's first
device: its own memories (SRAM → ``sram``, HBM/DDR/GDDR → ``dram``), the ported DRAM of its die or wafer
(``dram``, the device's share of its capacity), or a memory of a component above it that does not compute
(a node's host DDR → ``host``, reached over each device's host link, ``host_link_bandwidth_bytes_per_s``,
and never faster than the memory's bandwidth shared by the devices below it; without that field the memory
is refused). ``auto`` puts the category in the
fastest level that still has room (weights first, then the KV cache, activations, gradients, optimizer
state), else in the slowest; categories not named stay where they always were (the device's DRAM, or its
SRAM when it has no DRAM). Without ``memory_levels`` nothing here runs and the plan is what it was.

The result drives the traffic (``perf.residency``), the optimizer step's time (a GPU's offloaded optimizer
is stepped by the host's CPUs, ``plan.host_step``), one memory track per level (capacity checked per level)
and a note.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.mapping import Mapping, Recompute
from tilewright.engine.ir.ops import Op, OpKind
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.ir.workload import TransformerDims
from tilewright.engine.perf.device import DeviceModel, issues_kernels, shared_memory, sharing_devices
from tilewright.engine.perf.formats import OpFormats, resolve_formats
from tilewright.engine.perf.memory import (
    MOMENT_BYTES,
    StateBytes,
    activation_bytes,
    expert_model_state,
    params_on_device,
    workspace_bytes,
)
from tilewright.engine.perf.residency import LEVELS, Level, Residency
from tilewright.engine.plan.context import flash_fused
from tilewright.engine.plan.experts import expert_dp, expert_tp_of, experts_apart, routed_experts
from tilewright.engine.plan.host_step import host_step_seconds
from tilewright.engine.plan.passes import fused_edges

AUTO = "auto"
AUTO_ORDER = ("weights", "kv_cache", "activations", "gradients", "optimizer")


# Bytes per parameter Transformer Engine's FusedAdam streams, beyond its fused kernel's, for each optimizer state
# it holds in a dtype other than fp32 (``transformer_engine/pytorch/optimizers/fused_adam.py`` ``step``; TE PR
# #1640 "Add adam bf16 state with original fp32 kernel"). The kernel (``multi_tensor_adam``) takes fp32 moments and
# master weights only, so before it ``get_unscaled_state`` makes an fp32 copy of each such state and after it
# ``_apply_scale`` writes the result back: bf16 ``.float()`` (2 read + 4 written), ``.bfloat16()`` (4 + 2) and the
# ``copy_`` into the state (2 + 2); fp16 also scales by a per-tensor factor: ``.float()`` (2 + 4), ``mul_(scale)``
# (4 + 4), ``aminmax`` (4), ``mul_(1 / scale)`` (4 + 4), ``copy_`` (4 + 2); fp8 (a ``Float8Tensor``) dequantizes
# (1 + 4), takes the ``aminmax`` (4) and quantizes back in its ``copy_`` (4 + 1). The kernel itself then reads and
# writes the fp32 copy, 4 + 4, as it does an fp32 state. (The temporary fp32 copies of a parameter group's states
# are alive together until the group is stepped, TE PR #2551: a transient not counted in the peak memory.)
STATE_CAST_BYTES = {"fp32": 0.0, "bf16": 2 + 4 + 4 + 2 + 2 + 2, "fp16": 2 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 2,
                    "fp8": 1 + 4 + 4 + 4 + 1}
FP32 = 4.0  # what the fused kernel reads and writes of each moment and master value


def adam_split(mixed: bool, moments: str = "fp32", master: str = "fp32") -> dict[str, float]:
    """Which stored category one fused Adam step's traffic per parameter belongs to (read the fp32 master, both
    moments and the fp32 gradient; write the master, the moments and the low-precision weight copy; fp32
    training reads and writes 4-byte weights instead): the master copy and the two moments (read + write) are
    optimizer state, the gradient read is gradients, and the low-precision weight copy written back is weights.
    ``moments`` (``perf.memory.MOMENT_BYTES``) and ``master`` (``perf.memory.MASTER_BYTES``): states held in another
    dtype than fp32 cost the kernel their fp32 copies' traffic plus the casts around it (``STATE_CAST_BYTES``). A
    master kept as remainders (``store_param_remainders``: ``multi_tensor_adam_param_remainder``) is no cast: the
    kernel reads the bf16 parameter and the int16 remainder, rebuilds the fp32 value in registers and writes both
    back: 2 + 2 of state and 2 + 2 of weights, where an fp32 master costs 4 + 4 of state and the weights' 2 written."""
    moving = 2 * (2 * FP32 + STATE_CAST_BYTES[moments])  # both moments: the kernel's fp32 read + write, the casts
    if not mixed:
        return {"optimizer": moving + 4, "gradients": 4, "weights": 4}
    if master == "remainders":
        return {"optimizer": moving + 2 + 2, "gradients": 4, "weights": 2 + 2}
    return {"optimizer": moving + 2 * FP32 + STATE_CAST_BYTES[master], "gradients": 4, "weights": 2}


ADAM_SPLIT_MIXED = adam_split(True)
ADAM_SPLIT_FP32 = adam_split(False)


def adam_step_bytes(mixed: bool, moments: str = "fp32", master: str = "fp32") -> int:
    """Bytes per parameter one fused Adam step streams (the sum of ``adam_split``)."""
    return int(sum(adam_split(mixed, moments, master).values()))


@dataclass(frozen=True)
class AdamStep:
    """One fused Adam step's kind: mixed precision's (a master copy beside the low-precision weights:
    ``plan.train_step``'s extra passes apply) or not, its moments' dtype (``perf.memory.MOMENT_BYTES``) and how it
    holds the master copy (``perf.memory.MASTER_BYTES``). The plan and the search carry this, not its byte count,
    so nothing has to read the kind back from a total."""

    mixed: bool
    moments: str = "fp32"
    master: str = "fp32"

    @property
    def bytes_per_param(self) -> int:
        return adam_step_bytes(self.mixed, self.moments, self.master)

    @property
    def split(self) -> dict[str, float]:
        return adam_split(self.mixed, self.moments, self.master)


def adam_step(per_param: StateBytes, moments: str = "fp32", master: str = "fp32") -> AdamStep:
    """The fused step for model state ``per_param`` (``perf.memory.bytes_per_param``): mixed when the optimizer
    state holds a master copy beside the two moments."""
    mixed = per_param.optimizer - 2 * MOMENT_BYTES[moments] > 0
    return AdamStep(mixed, moments, master if mixed else "fp32")


@dataclass(frozen=True)
class LevelInfo:
    """One memory level as a stage's device sees it: the memory's name, what one device may hold there,
    and its bandwidth per device (bytes/s). A host memory also gives the device's share of the memory's own
    bandwidth and of its CPUs' Adam rate (params/s, inf: not measured), which an optimizer step run on the
    host's CPUs takes (``plan.host_step``)."""

    level: Level
    memory: str
    capacity: float
    bandwidth: float
    memory_bandwidth: float = float("inf")
    adam_rate: float = float("inf")


@dataclass(frozen=True)
class StageResidency:
    residency: Residency
    levels: dict[Level, LevelInfo]  # the levels in use, fastest first
    placed: dict[str, Level]  # every category → its level (for tracks and notes)
    chosen: tuple[str, ...]  # categories placed by ``auto``


def available_levels(hw: HardwareGraph, device: int, dev: DeviceModel) -> dict[str, LevelInfo]:
    """Every memory the device can keep state in, by name."""
    d = hw.devices[device]
    out: dict[str, LevelInfo] = {}
    for m in d.memories:
        level: Level = "sram" if m.kind.value == "sram" else "dram"
        out[m.name] = LevelInfo(level, m.name, m.capacity_bytes, m.effective_bandwidth)
    names = {p.memory.name for p in hw.memory_ports if d.node.startswith(p.owner + "/")}
    for name in sorted(names - out.keys()):
        found = shared_memory(hw, device, name)
        if found is None:
            continue
        mem, share = found
        if mem.ported:
            out[name] = LevelInfo("dram", name, share, mem.effective_bandwidth)
            continue
        link = mem.host_link_bandwidth_bytes_per_s  # None: how devices reach it is unknown (refused if named)
        sharing = sharing_devices(hw, device, name)
        own = mem.effective_bandwidth / sharing
        bw = min(own, link) if link else 0.0
        rate = mem.host_adam_params_per_s / sharing if mem.host_adam_params_per_s else float("inf")
        out[name] = LevelInfo("host", name, share, bw, own, rate)
    return out


def home_level(dev: DeviceModel) -> Level:
    """Where state lives when no one says: the device's DRAM (own or ported), else its SRAM."""
    return "dram" if dev.local_dram is not None or dev.remote_dram is not None else "sram"


def stage_sizes(
    project: Project, ops: list[Op], layers: list[list[Op]], state: StateBytes, elem: float, micro_batch: float,
    formats: OpFormats | None = None,
) -> dict:
    """Bytes per device of each category for one stage (what ``auto`` must fit): model state, stored
    activations of the micro-batches in flight (1F1B holds at most ``pp``) with the largest workspace,
    and, for inference, the KV cache of the whole request. ``micro_batch``: the samples' worth of tokens one
    device runs per micro-batch, the plan's own figure (``mapping.micro_batch / cp`` with context
    parallelism, ``plan.context``), so what ``auto`` fits is what the plan's memory tracks hold. ``formats``:
    the plan's (its bf16 edge layers save bf16 inputs); None: resolved from the mapping."""
    m, run = project.mapping, project.run
    cp = m.cp if run.mode is Mode.train else 1  # ring attention runs flash kernels (``plan.context``)
    chains = fused_edges(m.fusion)
    fused = chains | flash_fused(layers, cp, chains)  # a fused attention kernel stores no scores
    acts = workspace_bytes(ops, micro_batch, m.tp, m.sequence_parallel, elem,  # type: ignore[arg-type]
                           m.fused_cross_entropy, fused)  # inference keeps no more
    if run.mode is Mode.train:
        # Megatron-Core's combined 1F1B (the overlapped expert all-to-all) warms up one micro-batch more
        # (``plan.schedules``), so one more micro-batch's activations are held at its peak
        combined = 1 if m.overlap_ep_comm and m.ep > 1 else 0
        in_flight = m.micro_batches if m.schedule.value == "gpipe" else min(m.micro_batches, m.pp + combined)
        rerun = m.recompute_layers * m.interleave if m.recompute_layers is not None else None  # per chunk
        if formats is None:
            formats = resolve_formats(run.dtype, m.formats, m.fidelity)  # fp8 GEMMs save fp8 inputs
        acts += activation_bytes(layers, micro_batch, m.tp, m.sequence_parallel, m.recompute, elem, fused,  # type: ignore[arg-type]
                                 rerun, m.recompute_modules, m.fused_cross_entropy, formats) * in_flight
    kv = 0.0
    w = project.workload
    if run.mode is Mode.infer and isinstance(w, TransformerDims):
        from tilewright.engine.workloads.transformer_inference import kv_cache_bytes

        inf = run.inference
        blocks = sum(1 for layer in layers if any(op.kind is OpKind.attention for op in layer))
        tokens = inf.prompt_tokens + inf.output_tokens - 1  # the last token's K and V are never stored
        kv = kv_cache_bytes(w, blocks, m.tp, inf.batch, tokens, elem, inf.kv_block_tokens)
    return {"weights": state.weights, "gradients": state.gradients, "optimizer": state.optimizer,
            "activations": acts, "kv_cache": kv}


def resolve(
    mapping: Mapping, hw: HardwareGraph, device: int, dev: DeviceModel, sizes: dict[str, float],
    off_host: frozenset[str] = frozenset(),
) -> StageResidency | None:
    """The stage's residency, or None when ``memory_levels`` is empty (the plan as it always was). ``off_host``:
    categories ``auto`` may not put in host memory (a recomputing or pipelined run's activations,
    ``stage_residency``); one that fits nowhere else stays in the device's slowest own level."""
    if not mapping.memory_levels:
        return None
    node = hw.devices[device].node
    avail = available_levels(hw, device, dev)
    by_level: dict[Level, LevelInfo] = {}
    for info in avail.values():  # per level, the largest memory of that level stands for it
        if info.bandwidth <= 0:  # a host memory without a host link: never chosen by auto
            continue
        if info.level not in by_level or info.capacity > by_level[info.level].capacity:
            by_level[info.level] = info
    home = home_level(dev)
    placed: dict[str, Level] = {}
    named: dict[Level, LevelInfo] = {}
    for cat, name in mapping.memory_levels.items():
        if name == AUTO:
            continue
        if name not in avail:
            have = ", ".join(sorted(avail)) or "none"
            raise ValueError(f"mapping.memory_levels.{cat}: memory '{name}' is not reachable from {node} "
                             f"(it reaches: {have})")
        info = avail[name]
        if info.bandwidth <= 0:
            raise ValueError(
                f"mapping.memory_levels.{cat}: memory '{name}' sits above the devices and has no "
                f"host_link_bandwidth_bytes_per_s: say how fast each device reaches it (e.g. PCIe 4.0 x16, "
                f"31.5 GB/s per direction)")
        placed[cat] = info.level
        named[info.level] = info
    levels = {lv: named.get(lv, info) for lv, info in by_level.items()}
    used = {lv: 0.0 for lv in levels}
    for cat, lv in placed.items():
        used[lv] += sizes.get(cat, 0.0)
    chosen = [c for c in AUTO_ORDER if mapping.memory_levels.get(c) == AUTO]
    for cat in [c for c in AUTO_ORDER if c not in placed and c not in chosen]:
        placed[cat] = home if home in levels else next(iter(levels))
        used[placed[cat]] += sizes.get(cat, 0.0)
    order = [lv for lv in LEVELS if lv in levels]
    for cat in chosen:
        need = sizes.get(cat, 0.0)
        allowed = [lv for lv in order if not (lv == "host" and cat in off_host)] or order
        fits = [lv for lv in allowed if used[lv] + need <= levels[lv].capacity]
        lv = fits[0] if fits else allowed[-1]
        placed[cat] = lv
        used[lv] += need
    host = levels["host"].bandwidth if "host" in levels else float("inf")
    in_use = {lv: levels[lv] for lv in order if lv in placed.values() or lv == home}
    return StageResidency(Residency(dict(placed), host), in_use, placed, tuple(chosen))


def optimizer_seconds(
    dev: DeviceModel, res: StageResidency | None, params: float, mixed: bool, split: dict[str, float] | None = None
) -> float:
    """The optimizer step's streams at each level, overlapped: the slowest level's bytes over its bandwidth
    (a device without DRAM streams its SRAM: never free). ``split``: bytes per parameter by category, default
    one fused Adam step's (``ADAM_SPLIT_*``); ``plan.train_step`` streams the fp16 optimizer's extra passes."""
    if split is None:
        split = ADAM_SPLIT_MIXED if mixed else ADAM_SPLIT_FP32
    per_level: dict[Level, float] = {}
    for cat, nbytes in split.items():
        lv = res.placed.get(cat, home_level(dev)) if res else home_level(dev)
        per_level[lv] = per_level.get(lv, 0.0) + params * nbytes
    out = 0.0
    for lv, nbytes in per_level.items():
        if lv == "sram":
            bw = dev.sram_bandwidth
        elif lv == "dram":
            bw = dev.dram_bandwidth
        else:
            bw = res.residency.host_bandwidth if res else float("inf")
        out = max(out, nbytes / bw)
    return out


def stage_residency(
    project: Project, hw: HardwareGraph, device: int, dev: DeviceModel, layers: list[list[Op]],
    per_param: StateBytes, elem: float, micro_batch: float, replicas: int, formats: OpFormats | None = None,
) -> tuple[StageResidency, dict[str, float]] | None:
    """Resolve ``memory_levels`` for a stage holding ``layers`` (all its chunks); None without it. The plan's
    figures, so the sizes ``auto`` fits are the ones it charges: ``micro_batch``, what one device runs per
    micro-batch (``stage_sizes``); ``replicas``, the dp · cp replicas ZeRO shards the weights' state over
    (``plan.sharding``; dp outside training, where cp is not simulated)."""
    m = project.mapping
    if not m.memory_levels:
        return None
    ops = [op for layer in layers for op in layer]
    etp = expert_tp_of(m, project.run.mode is Mode.train)
    apart = experts_apart(m.ep, etp, m.tp)  # expert parallelism, or expert tp below tp at ep 1 (``plan.experts``)
    experts = params_on_device(routed_experts(ops), m.tp) if apart else 0.0  # ops as sharded (``shard_experts``)
    edp = expert_dp(m.tp, replicas, m.ep, etp) if apart else None  # folds over cp too
    state = expert_model_state(params_on_device(ops, m.tp), experts, per_param, m.zero, replicas, m.ep, edp)
    if project.run.mode is Mode.infer:
        state = StateBytes(state.weights, 0.0, 0.0)
    sizes = stage_sizes(project, ops, layers, state, elem, micro_batch, formats)
    # Megatron-Core refuses activation offloading with recomputation and with pp > 1 (``plan.checks._offload_checks``)
    refused = project.run.mode is Mode.train and (m.recompute is not Recompute.none or m.pp > 1)
    res = resolve(m, hw, device, dev, sizes, frozenset({"activations"}) if refused else frozenset())
    assert res is not None
    return res, sizes


def notes(stages: list[tuple[int, StageResidency, dict[str, float]]]) -> list[str]:
    """One note per distinct placement: "stages 0–31: residency per device — weights ≤ 0.0194 GiB in sram
    'sram', kv_cache ≤ 0.0003 GiB in sram 'sram' (auto), …" (the largest stage's bytes; empty categories left
    out)."""
    groups: dict[tuple, list[tuple[int, StageResidency, dict[str, float]]]] = {}
    for item in stages:
        _, res, _ = item
        key = tuple((c, res.placed[c], c in res.chosen) for c in AUTO_ORDER)
        groups.setdefault(key, []).append(item)
    out = []
    for members in groups.values():
        ranks = [r for r, _, _ in members]
        res = members[0][1]
        parts = []
        for cat in AUTO_ORDER:
            most = max(sizes.get(cat, 0.0) for _, _, sizes in members)
            if most <= 0 and cat != "activations":
                continue
            lv = res.placed[cat]
            info = res.levels.get(lv)
            where = f"{lv} '{info.memory}'" if info else lv
            size = "" if cat == "activations" else f" ≤ {most / 2**30:.3g} GiB"  # activations: see the tracks
            parts.append(f"{cat}{size} in {where}" + (" (auto)" if cat in res.chosen else ""))
        who = f"stage {ranks[0]}" if len(ranks) == 1 else f"stages {_ranges(ranks)}"
        out.append(f"{who}: residency per device — " + ", ".join(parts))
    return out


def _ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5] → "0–2, 5"."""
    out, start = [], ranks[0]
    for a, b in zip(ranks, ranks[1:] + [None], strict=True):
        if b != a + 1:
            out.append(f"{start}" if start == a else f"{start}–{a}")
            start = b
    return ", ".join(out)


def level_tracks(res: StageResidency) -> list[tuple[str, float, tuple[str, ...]]]:
    """(memory name, capacity per device, memory categories it holds) per level in use, fastest first: one
    memory track each, so every level's capacity is checked on its own. The workspace (an op's transient
    buffers) goes with the activations (``workspace_level``)."""
    out = []
    ws = workspace_level(res)
    for lv, info in res.levels.items():
        cats = [c for c in AUTO_ORDER if res.placed.get(c) == lv]
        if ws == lv:
            cats.append("workspace")
        out.append((info.memory, info.capacity, tuple(cats)))
    return out


def workspace_level(res: StageResidency) -> Level:
    """Where an op's transient buffers live: with the activations, unless those are in host memory, where no
    op computes. Training's offloaded activations (``offloaded_activations``) are copied out after the op that
    made them ran in the device's own memory, its workspace beside it; inference streams host activations
    in and out of each op, its buffers still on the device. Then the fastest other level in use holds them."""
    lv = res.placed.get("activations", "dram")
    if lv != "host":
        return lv
    return next((level for level in res.levels if level != "host"), lv)


def step_seconds(dev: DeviceModel, placed: StageResidency | None, params: float, step: AdamStep) -> float:
    """The optimizer step's memory stream: at the device's DRAM bandwidth as always, or level by level when
    ``memory_levels`` places its state (or the device has no DRAM: its SRAM then bounds the step). A GPU with
    its optimizer state in host memory steps it on the host's CPUs (``plan.host_step``), as the offloading
    frameworks do; a device without a host framework (a grid, a wafer) streams its state as before."""
    if placed is None and (dev.local_dram is not None or dev.remote_dram is not None):
        return params * step.bytes_per_param / dev.dram_bandwidth
    if placed is not None and cpu_steps(dev, placed):
        host = placed.levels["host"]
        return host_step_seconds(params, host.bandwidth, host.memory_bandwidth, host.adam_rate,
                                 placed.placed.get("gradients") == "host", placed.placed.get("weights") == "host")
    return optimizer_seconds(dev, placed, params, step.mixed, step.split)


def cpu_steps(dev: DeviceModel, placed: StageResidency) -> bool:
    """Whether the optimizer step runs on the host's CPUs (``plan.host_step``): the optimizer state is in host
    memory and the device is a GPU (its own DRAM, its kernels issued by a host framework)."""
    return (placed.placed.get("optimizer") == "host" and "host" in placed.levels and dev.local_dram is not None
            and issues_kernels(dev.compute))


def offloaded_activations(res: Residency) -> tuple[float, Residency]:
    """Training with activations in host memory offloads what the backward needs (Megatron-Core's activation
    CPU offloading, ``cpu_offloading`` with Transformer Engine's ``get_cpu_offload_context``): each op computes
    in device memory as usual, and its stored activations are copied to the host during the forward and back
    during the backward, overlapped with the compute by the copy engines (``passes.Segment.close``). Never with
    recomputation, which Megatron-Core refuses alongside it (``plan.checks._offload_checks``), so every op's
    saved bytes are what moves; DeepSpeed's CPU checkpointing (only a full recompute's layer inputs) is not
    this. (host link bytes/s, the residency the ops
    see: activations in device DRAM.)"""
    levels = dict(res.levels) | {"activations": "dram"}
    return res.host_bandwidth, Residency(levels, res.host_bandwidth)
