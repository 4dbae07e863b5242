"""Multi-level mapping (DFModel, Ko et al., "DFModel: Design Space Optimization of Large-Scale Systems
Exploiting Dataflow Mappings", 2024): optimise a project's mapping at both levels at once —

- across chips, which network dimension (torus axis, NVSwitch vs InfiniBand tier, dragonfly tier) carries
  how much of tp, pp and dp (``milp``);
- inside each chip, which operators run fused and with what tiles against SRAM and HBM (``fusion``),
  whose optimum per tensor degree is the chip time the inter-chip programme sees.

The answer is compared with the project's own mapping placed the engine's default way (row-major, tp
fastest) and run unfused. Both are also run through the analytic engine with their device placement
(written as explicit stage device lists), which checks the inter-chip half on the real topology. The
chosen fusion is written into ``mapping.fusion``, which the engine models as the DRAM round trips it
removes (the programme's tile sizes and weight re-reads are its own refinement), so the engine also
reports the optimized mapping's time without fusion: the intra-chip gain it confirms.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tilewright.engine.errors import InputError, Problem
from tilewright.engine.hardware import elaborate, grow
from tilewright.engine.ir.mapping import Schedule, StagePlacement, tp_axes_for
from tilewright.engine.ir.project import Project
from tilewright.engine.jobs import CancelFn, ProgressFn, Reporter
from tilewright.engine.perf.device import device_capacity, device_model, issues_kernels, remote_memory
from tilewright.engine.perf.memory import bytes_per_param
from tilewright.engine.plan.grad_hooks import param_tensors
from tilewright.engine.plan.placement import split_layers
from tilewright.engine.plan.residency import adam_step
from tilewright.engine.plan.train_logging import TrainLogging
from tilewright.engine.plan.train_logging import step_seconds as logging_seconds
from tilewright.engine.plan.train_step import flag_allreduce_s, step_overhead, te_holds_master
from tilewright.engine.search.layer_table import LayerCosts
from tilewright.engine.search.multilevel import milp as ml
from tilewright.engine.search.multilevel.costs import fusion_chains, params_per_tensor_rank, tensor_costs
from tilewright.engine.search.multilevel.dimcomm import DimComm
from tilewright.engine.search.multilevel.netdims import Dim, network_dims
from tilewright.engine.search.op_settings import OpSettings
from tilewright.engine.search.space import tensor_options
from tilewright.engine.workloads import build_workload

DEFAULT_SRAM_MB = 40.0  # A100's L2 (NVIDIA A100 whitepaper), used when the device lists no SRAM
# The on-chip memory a fused chain tiles into, for the devices whose presets list none as a memory level (the GPUs'
# L2 and the TPU's CMEM are caches the engine does not model, ``tpu-v4-torus``'s comment says why): matched on the
# system's name, the first hit wins. Another device without SRAM falls back on DEFAULT_SRAM_MB and says so.
KNOWN_ON_CHIP: tuple[tuple[str, float, str], ...] = (
    ("tpu-v4", 128 * 2**20, "a TPU v4's 128 MiB CMEM, shared by its two TensorCores (Jouppi et al., ISCA 2023)"),
    ("h100", 50e6, "an H100 SXM5's 50 MB L2 (NVIDIA H100 Tensor Core GPU Architecture whitepaper)"),
    ("a100", 40e6, "an A100's 40 MB L2 (NVIDIA A100 Tensor Core GPU Architecture whitepaper)"),
)


def assumed_on_chip(system_name: str) -> tuple[float, str]:
    """(bytes, what they are) of on-chip memory to fuse against on a device that lists no SRAM."""
    name = system_name.lower()
    for key, nbytes, what in KNOWN_ON_CHIP:
        if key in name:
            return nbytes, what
    return DEFAULT_SRAM_MB * 1e6, (f"{DEFAULT_SRAM_MB:g} MB, an A100's L2: {system_name}'s device is not one whose "
                                   "on-chip memory tilewright knows")


@dataclass
class MapResult:
    dims: list[Dim]
    default: ml.Layout | None  # the project's mapping, row-major, unfused
    optimized: ml.Layout  # both levels
    inter_only: ml.Layout  # the optimized layout with unfused chips: the inter-chip share of the gain
    project: Project  # the optimized mapping, placed explicitly
    engine_default_s: float | None
    engine_optimized_s: float | None
    engine_unfused_s: float | None  # the optimized mapping without its fusion
    fused_groups: list[list[str]]
    sram_bytes: float
    notes: list[str]

    @property
    def gain(self) -> float | None:
        return self.default.time_s / self.optimized.time_s if self.default else None


def _stages(project: Project, layout: ml.Layout, dims: list[Dim], n_layers: int, blocks: list[int]) -> list:
    pp = layout.degrees["pp"]
    parts = split_layers(blocks, pp)
    devices = ml.realize(layout, dims)
    out, start = [], 0
    for r, part in enumerate(parts):
        end = n_layers if r == pp - 1 else part[-1] + 1
        out.append(StagePlacement(stage=r, layers=(start, end), devices=devices[r]))
        start = end
    return out


def mapped_project(project: Project, layout: ml.Layout, dims: list[Dim]) -> Project:
    workload = build_workload(project.workload)
    m = project.mapping
    mapping = m.model_copy(
        update={
            "tp": layout.degrees["tp"],
            "tp_axes": tp_axes_for(m.tp_axes, layout.degrees["tp"]),
            "pp": layout.degrees["pp"],
            "dp": layout.degrees["dp"],
            "interleave": 1,
            "schedule": Schedule.one_f_one_b if m.schedule is Schedule.interleaved else m.schedule,
            "stages": _stages(project, layout, dims, len(workload.layers), workload.block_layers),
        }
    )
    return project.model_copy(update={"mapping": type(m).model_validate(mapping.model_dump())})


def build_problem(
    project: Project, sram_mb: float | None, notes: list[str], report: Reporter | None = None
) -> tuple[ml.Problem, list[Dim], Any]:
    """The inter-chip programme of ``project``: its network dimensions, degree options and per-chip costs
    (fusion optimised per tensor degree, which ``report`` follows)."""
    m, run = project.mapping, project.run
    n = m.devices
    root = grow(project.hardware, n)
    if root.device_count() != n:
        raise InputError(
            project.name,
            Problem(
                "mapping",
                f"tp·pp·dp = {n} devices, the system has {root.device_count()}: the multi-level mapping "
                "lays out every device of the system",
            ),
        )
    hw = elaborate(root)
    dims = network_dims(root, hw)
    workload = build_workload(project.workload)
    settings = OpSettings.of(project, workload)
    elem = settings.elem_bytes
    first = hw.devices[0]
    dev = device_model(first.compute, first.memories, remote_memory(hw, 0), run.dtype)
    fusion_dev = dev
    if dev.compute.grid is not None:
        notes.append(
            "each chip splits its ops over its grid of cores (the engine's spatial model, unfused): "
            "the fusion programme does not run there"
        )
    elif sram_mb is not None or dev.sram_bytes <= 0:
        nbytes = sram_mb * 1e6 if sram_mb is not None else assumed_on_chip(project.hardware.name)[0]
        if sram_mb is None:
            what = assumed_on_chip(project.hardware.name)[1]
            notes.append(f"the device lists no SRAM; fusion assumes {nbytes / 1e6:.4g} MB on chip ({what}); "
                         "--sram-mb sets it")
        fusion_dev = dataclasses.replace(dev, sram_bytes=nbytes)
    layers = [workload.layer_ops(li.index) for li in workload.layers]
    degrees = ml.degree_options(
        n, m.global_batch, m.micro_batch, len(workload.block_layers), tensor_options(project.workload, n)
    )
    if m.sequence_parallel:
        seq = getattr(project.workload, "seq_len", 1)
        degrees["tp"] = [t for t in degrees["tp"] if seq % t == 0]
    dim_comm = DimComm(hw, dims)
    streams = LayerCosts(workload, dev, settings, dim_comm.comm)

    def stream_s_per_byte(t: int) -> float:  # the engine's default tensor group: the first t devices
        return streams.dram_seconds_per_byte(tuple(d.index for d in hw.devices[:t])) if dev.remote_dram else 0.0

    costs = tensor_costs(
        layers,
        workload.block_layers,
        dev,
        fusion_dev,
        degrees["tp"],
        m.micro_batch,
        m.sequence_parallel,
        m.recompute,
        settings,
        report,
        m.recompute_modules,
        stream_s_per_byte,
    )
    per_param = bytes_per_param(settings.weight_bytes, run.master_weights_fp32, run.optimizer, run.dtype,  # type: ignore[arg-type]
                                moments=m.optimizer_moments, fp32_grads=m.grad_reduce_in_fp32,
                                master=m.optimizer_master)
    params = params_per_tensor_rank(layers, 1)
    step = adam_step(per_param, m.optimizer_moments, m.optimizer_master)
    full_iteration = "full_iteration" in (m.cuda_graph_scope or ())
    te_master = te_holds_master(m.optimizer_moments, m.optimizer_master, settings.formats.weights,
                                m.formats.fp8_scaling)

    params_tp = {t: t * params_per_tensor_rank(layers, t) for t in degrees["tp"]}
    log = TrainLogging.of(m)  # the training loop's logging flags (plan.train_logging)
    tensors = sum(param_tensors(op, workload.tokens_per_sample, False)[0] for ops in layers for op in ops)
    drives = issues_kernels(dev.compute)

    def overhead(t: int, q: int) -> float:  # StagePlan.optimizer_s beyond the stream; flags over N/q devices
        held = params_tp[t] * q / n  # a device's parameters (its stage's share at tp t)
        local = held / (q if m.zero >= 1 else 1)
        flag = flag_allreduce_s(hw, [d.index for d in hw.devices[: n // q]]) if drives else 0.0
        world = flag_allreduce_s(hw, [d.index for d in hw.devices[:n]]) if drives and log.world_reductions else 0.0
        return step_overhead(dev, None, local, step.mixed, run.dtype.value == "fp16", flag, q, full_iteration,
                             te_master, log, tensors=tensors * t * q / n, shard=q if m.zero >= 1 else 1) \
            + logging_seconds(dev, log, tensors=tensors * t * q / n, params=held, weight_bytes=settings.weight_bytes,
                              bf16=run.dtype.value == "bf16", model_reduce_s=flag, world_reduce_s=world,
                              zero_shard=q if m.zero >= 1 else 1, grad_bytes=per_param.gradients, dp=q,
                              overlap_grad_reduce=m.overlap_grad_reduce)

    last_block = workload.layer_ops(workload.block_layers[0])
    pb = ml.Problem(
        dims=dims,
        devices=n,
        global_batch=m.global_batch,
        micro_batch=m.micro_batch,
        layers=len(workload.block_layers),
        params=params,
        state_per_param=(per_param.weights, per_param.gradients, per_param.optimizer),
        zero=min(m.zero, 1),
        capacity=device_capacity(hw, 0, dev),
        grad_bytes_per_param=per_param.gradients,
        optimizer_bytes_per_param=step.bytes_per_param,
        hbm_bandwidth=dev.dram_bandwidth,
        hop_bytes=last_block[-1].out_elems * m.micro_batch * elem if last_block else 0,
        degrees=degrees,
        costs=costs,
        comm=dim_comm,
        step_overhead={(t, q): overhead(t, q) for t in degrees["tp"] for q in degrees["dp"]},
        params_tp=params_tp,
        fusion_sram_bytes=fusion_dev.sram_bytes,
    )
    return pb, dims, workload


def _engine_time(project: Project) -> float | None:
    from tilewright.engine.engines.analytic.engine import AnalyticEngine
    from tilewright.engine.plan.checks import check_project
    from tilewright.engine.simulate import make_plan

    if check_project(project):
        return None
    return AnalyticEngine().run(make_plan(project)).iteration_time_s


def multilevel_map(
    project: Project,
    sram_mb: float | None = None,
    check: bool = True,
    *,
    progress: ProgressFn | None = None,
    cancel: CancelFn | None = None,
) -> MapResult:
    """Both levels of ``project``'s mapping optimised; with ``check``, both mappings also run on the analytic
    engine. ``progress(fraction, text)`` follows the phases (per-chip costs, the MILP, the engine runs);
    ``cancel()`` is checked between them and per tensor degree, and stops the mapping with ``Cancelled``."""
    if project.run.mode.value != "train":
        raise InputError(project.name, Problem("run.mode", "multi-level mapping optimises training, not inference"))
    report = Reporter(progress, cancel)
    notes: list[str] = []
    costs = report.part(0.0, 0.5 if check else 0.8)
    costs(0.0, "map: per-chip costs and operator fusion per tensor degree")
    pb, dims, _ = build_problem(project, sram_mb, notes, costs)
    report(0.5 if check else 0.8, "map: solving the inter-chip programme (MILP)")
    best = ml.solve(pb, fused=True)
    if best is None:
        raise InputError(
            project.name,
            Problem(
                "mapping",
                "no tp/pp/dp layout fits the devices' memory (state shrinks with tp·pp; stage 0 holds up to "
                "one micro-batch of every layer's activations)",
            ),
        )
    m = project.mapping
    default = ml.row_major_layout(pb, m.tp, m.pp, m.dp)
    if default is not None and all(default.degrees[k] in pb.degrees[k] for k in ml.PARS):
        default = ml.evaluate(pb, default, fused=False)
    else:
        notes.append("the project's mapping does not align with the network dimensions; no default to compare")
        default = None
    inter = ml.evaluate(pb, ml.Layout(dict(best.degrees), list(best.splits)), fused=False)
    t = best.degrees["tp"]
    groups = [g for layer in pb.costs.fused[t] for g in layer.groups if len(g) > 1]
    unfused = mapped_project(project, best, dims)
    mapped = with_fusion(unfused, groups)
    engine_default = engine_opt = engine_unfused = None
    if check:
        base = project.model_copy(update={"mapping": project.mapping.model_copy(update={"interleave": 1})})
        if project.mapping.schedule is Schedule.interleaved:
            base = mapped_project(project, default, dims) if default else base
        report(0.6, "map: the default mapping on the analytic engine")
        engine_default = _engine_time(base) if default else None
        report(0.73, "map: the optimized mapping on the analytic engine")
        engine_opt = _engine_time(mapped)
        report(0.86, "map: the optimized mapping without fusion on the analytic engine")
        engine_unfused = _engine_time(unfused)
    report(1.0, "map: done")
    return MapResult(
        dims, default, best, inter, mapped, engine_default, engine_opt, engine_unfused, groups, pb.fusion_sram_bytes,
        notes,
    )


def with_fusion(project: Project, groups: list[list[str]]) -> Project:
    """``project`` with ``mapping.fusion`` holding the fused chains, by op name within the layer (the
    programme fuses the same chains in every layer of a kind)."""
    chains = fusion_chains(groups)
    m = project.mapping
    mapping = type(m).model_validate(m.model_copy(update={"fusion": chains}).model_dump())
    return project.model_copy(update={"mapping": mapping})


def _layout_json(dims: list[Dim], lay: ml.Layout | None) -> dict | None:
    if lay is None:
        return None
    return {
        **lay.degrees,
        "dimensions": [
            {"name": d.name, "size": d.size, "tp": s[0], "pp": s[1], "dp": s[2]}
            for d, s in zip(dims, lay.splits, strict=True)
        ],
        "predicted_time_s": lay.time_s,
        "predicted_breakdown_s": lay.terms,
    }


ESTIMATE_SCOPE = (
    "the mapper's estimate ranks layouts in the inter-chip programme: the engine's own passes (per-op cost, "
    "recompute, fusion), its collectives and pipeline sends along one network dimension, the 1F1B closed form "
    "and the optimizer step; it leaves out what needs the whole layout at once: a group spanning several "
    "dimensions is charged one collective per dimension (an upper bound), data-parallel groups as if alone "
    "(no link sharing between them), the reduction without overlap_grad_reduce's hiding, interleaving, and "
    "stages as averages of their blocks"
)


def map_json(r: MapResult) -> dict:
    return {
        "dimensions": [{"name": d.name, "size": d.size, "bandwidth_bytes_per_s": d.bandwidth} for d in r.dims],
        "default": _layout_json(r.dims, r.default),
        "optimized": _layout_json(r.dims, r.optimized),
        "predicted_gain": r.gain,
        "predicted_gain_inter_chip": r.default.time_s / r.inter_only.time_s if r.default else None,
        "predicted_scope": ESTIMATE_SCOPE,
        "fused_groups": r.fused_groups,
        "fusion_sram_bytes": r.sram_bytes,  # the on-chip memory fused against (the device's, --sram-mb's or assumed)
        "engine_default_time_s": r.engine_default_s,
        "engine_optimized_time_s": r.engine_optimized_s,
        "engine_optimized_unfused_time_s": r.engine_unfused_s,
        "engine_gain": r.engine_default_s / r.engine_optimized_s
        if r.engine_default_s and r.engine_optimized_s else None,
        "notes": r.notes,
    }


def map_text(r: MapResult) -> str:
    """The analytic engine's times are the headline when it ran (``check``); the mapper's own estimate, what
    the programme ranked with, follows each, labelled as such (``ESTIMATE_SCOPE`` says what it leaves out)."""

    def line(name: str, lay: ml.Layout | None, engine_s: float | None, extra: str = "") -> str:
        if lay is None:
            return f"  {name:<10} -"
        dims = ", ".join(f"{d.name}[{d.size}]={s[0]}/{s[1]}/{s[2]}" for d, s in zip(r.dims, lay.splits, strict=True))
        deg = lay.degrees
        head = f"  {name:<10} tp {deg['tp']} pp {deg['pp']} dp {deg['dp']}  ({dims})  "
        estimate = f"mapper's estimate {lay.time_s:.4g} s"
        if engine_s:
            return head + f"analytic engine {engine_s:.4g} s{extra}  ({estimate})"
        return head + estimate

    unfused = f" ({r.engine_unfused_s:.4g} s without fusion)" if r.engine_unfused_s else ""
    lines = [
        "multi-level mapping (per dimension: tp/pp/dp)",
        line("default", r.default, r.engine_default_s),
        line("optimized", r.optimized, r.engine_optimized_s, unfused),
    ]
    if r.engine_default_s and r.engine_optimized_s:
        lines.append(f"  gain on the analytic engine ×{r.engine_default_s / r.engine_optimized_s:.3f}")
    if r.gain:
        inter = r.default.time_s / r.inter_only.time_s
        lines.append(f"  mapper's estimated gain ×{r.gain:.3f} (inter-chip alone ×{inter:.3f})")
    if r.fused_groups:
        lines.append("  fused: " + "; ".join(" + ".join(n.split(".", 1)[-1] for n in g) for g in r.fused_groups))
    lines.append(f"  note: {ESTIMATE_SCOPE}")
    lines += [f"  note: {n}" for n in r.notes]
    return "\n".join(lines)
