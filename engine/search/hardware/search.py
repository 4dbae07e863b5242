"""Hardware search: accelerator architectures for training under area and power budgets (WHAM, Adnan
et al., "Workload-Aware Hardware Architecture Mapping", arXiv 2404.14632).

Per pipeline stage (each of ``tp`` tensor ranks running the same design), a local search sizes PE-array
dimensions, tensor and vector cores, SRAM and HBM stacks: starting small, it times the stage's operator
graph on the design (``graph``), finds the zero-slack operators, and grows the resources those are
limited by (tensor arrays for compute-bound matmuls, vector cores for vector ops, SRAM or HBM for
memory-bound ones), while shrinking resources no critical operator uses — "the critical path gets
resources first" (WHAM §4.3). It keeps the top k designs per stage by throughput per TDP (a beam), and
a global search then picks one design per stage — from its top k and its time/TDP Pareto front, so a
stage that is not the bottleneck can trade speed for power — to maximise throughput per total TDP:
throughput is set by the slowest stage, so for each candidate bottleneck time every other stage takes
its lowest-power design that keeps up (exact over the kept designs, WHAM §4.4).

The baseline is TPU-like (Jouppi et al., "TPU v4", ISCA 2023): units of four 128×128 MXUs, 1,024 vector
lanes, 16 MB of SRAM and two HBM stacks, replicated as far as the same budgets allow.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

from tilewright.engine.errors import InputError, Problem
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.project import Optimizer
from tilewright.engine.jobs import CancelFn, ProgressFn, Reporter
from tilewright.engine.perf.memory import activation_bytes, bytes_per_param, params_on_device
from tilewright.engine.plan.placement import split_layers
from tilewright.engine.results.text import counted
from tilewright.engine.search.hardware.graph import StageGraph, stage_graph, time_graph
from tilewright.engine.search.hardware.model import HBM_STACK_BYTES, Design, area_mm2, fits, tdp_w
from tilewright.engine.search.pareto import pareto_front
from tilewright.engine.workloads.graph import WorkloadGraph

LIMITS = {"pe_rows": (8, 256), "pe_cols": (8, 256), "tensor_cores": (1, 4096), "vector_cores": (1, 512),
          "sram_mb": (1, 2048), "hbm_stacks": (1, 16)}
ROUNDS = 60  # of the local search; most stages converge in far fewer


@dataclass(frozen=True)
class Evaluated:
    design: Design
    makespan_s: float  # one micro-batch, forward and backward, on this stage
    tdp_w: float
    area_mm2: float
    critical: dict[str, float]

    @property
    def efficiency(self) -> float:
        """Micro-batches per second per watt of this stage's chip."""
        return 1.0 / (self.makespan_s * self.tdp_w) if self.makespan_s > 0 else 0.0

    def as_json(self) -> dict:
        return self.design.as_json() | {"makespan_s": self.makespan_s, "critical_path_s": self.critical}


@dataclass
class Stage:
    index: int
    layers: list[int]
    graph: StageGraph
    memory_bytes: float  # per chip: model state and in-flight activations
    top: list[Evaluated] = field(default_factory=list)  # best k by throughput per TDP (the local search's beam)
    front: list[Evaluated] = field(default_factory=list)  # (time, TDP) Pareto front of everything evaluated

    @property
    def kept(self) -> list[Evaluated]:
        seen = {e.design: e for e in self.top + self.front}
        return list(seen.values())


@dataclass
class Choice:
    designs: list[Evaluated]
    micro_batch: int
    tp: int

    @property
    def samples_per_s(self) -> float:
        return self.micro_batch / max(e.makespan_s for e in self.designs)

    @property
    def chips(self) -> int:
        """Chips the choice runs on: tp of each stage's design."""
        return self.tp * len(self.designs)

    @property
    def tdp_w(self) -> float:
        """The TDP of all ``chips`` (the budget is each chip's)."""
        return self.tp * sum(e.tdp_w for e in self.designs)

    @property
    def samples_per_s_per_w(self) -> float:
        return self.samples_per_s / self.tdp_w


@dataclass
class HwSearchResult:
    stages: list[Stage]
    chosen: Choice
    baseline: Choice | None
    evaluated: int
    wall_time_s: float
    budgets: tuple[float, float]


class _Evaluator:
    def __init__(self, stage: Stage, elem: int, tp: int, link_bw: float, area: float, power: float) -> None:
        self.stage, self.elem, self.tp, self.link_bw = stage, elem, tp, link_bw
        self.area, self.power = area, power
        self.seen: dict[Design, Evaluated | None] = {}

    def __call__(self, d: Design) -> Evaluated | None:
        if d in self.seen:
            return self.seen[d]
        ok = fits(d, self.area, self.power) and d.hbm_bytes >= self.stage.memory_bytes
        e = None
        if ok:
            t = time_graph(self.stage.graph, d, self.elem, self.tp, self.link_bw)
            e = Evaluated(d, t.makespan, tdp_w(d), area_mm2(d), t.critical)
        self.seen[d] = e
        return e


def _clamp(d: Design, **changes: int) -> Design | None:
    for k, v in changes.items():
        lo, hi = LIMITS[k]
        if not lo <= v <= hi:
            return None
    return replace(d, **changes)


def neighbours(e: Evaluated) -> list[Design]:
    """Grow what limits the critical path, shrink what no critical operator uses."""
    d, crit = e.design, e.critical
    moves: list[Design | None] = []
    if crit["tensor"] > 0:
        moves += [_clamp(d, tensor_cores=d.tensor_cores * 2),
                  _clamp(d, tensor_cores=d.tensor_cores + max(1, d.tensor_cores // 4)),
                  _clamp(d, pe_rows=d.pe_rows * 2), _clamp(d, pe_cols=d.pe_cols * 2),
                  _clamp(d, pe_rows=d.pe_rows // 2, tensor_cores=d.tensor_cores * 2)]
    else:
        moves += [_clamp(d, tensor_cores=d.tensor_cores // 2), _clamp(d, pe_rows=d.pe_rows // 2)]
    if crit["vector"] > 0:
        moves += [_clamp(d, vector_cores=d.vector_cores * 2),
                  _clamp(d, vector_cores=d.vector_cores + max(1, d.vector_cores // 4))]
    else:
        moves.append(_clamp(d, vector_cores=d.vector_cores // 2))
    if crit["memory"] > 0:
        moves += [_clamp(d, hbm_stacks=d.hbm_stacks + 1), _clamp(d, sram_mb=d.sram_mb * 2)]
    else:
        moves += [_clamp(d, hbm_stacks=d.hbm_stacks - 1), _clamp(d, sram_mb=d.sram_mb // 2)]
    return [m for m in moves if m is not None and m != d]


def local_search(
    ev: _Evaluator, seeds: list[Design], top: int, rounds: int = ROUNDS, report: Reporter | None = None
) -> list[Evaluated]:
    """Beam search of width ``top`` over critical-path moves; returns the best ``top`` designs seen.
    ``report`` gets a fraction (and is checked for a cancel) each round."""
    report = report or Reporter()
    beam = [e for e in (ev(s) for s in seeds) if e is not None]
    for i in range(rounds):
        report(i / rounds)
        pool = {e.design: e for e in beam}
        for e in beam:
            for n in neighbours(e):
                got = ev(n)
                if got is not None:
                    pool[got.design] = got
        new = sorted(pool.values(), key=lambda e: (-e.efficiency, e.design))[:top]
        if [e.design for e in new] == [e.design for e in beam]:
            break
        beam = new
    return sorted((e for e in ev.seen.values() if e is not None), key=lambda e: (-e.efficiency, e.design))[:top]


def tradeoffs(ev: _Evaluator) -> list[Evaluated]:
    """The stage's (time, TDP) Pareto front over every design evaluated: what a stage that is not the
    bottleneck may trade speed for power with in the global search."""
    done = [e for e in ev.seen.values() if e is not None]
    front = pareto_front([{"t": e.makespan_s, "p": e.tdp_w} for e in done], [("t", "min"), ("p", "min")])
    return [done[i] for i in front]


def global_search(stages: list[Stage], micro_batch: int, tp: int) -> Choice:
    """One design per stage maximising throughput per total TDP, exact over each stage's kept designs
    (its top k and its time/TDP Pareto front): the slowest stage sets the throughput, so for every
    candidate bottleneck time each stage takes its lowest-TDP design at least that fast."""
    best: Choice | None = None
    for limit in sorted({e.makespan_s for st in stages for e in st.kept}):
        picks = []
        for st in stages:
            fast = [e for e in st.kept if e.makespan_s <= limit]
            if not fast:
                break
            picks.append(min(fast, key=lambda e: (e.tdp_w, e.makespan_s)))
        else:
            c = Choice(picks, micro_batch, tp)
            if best is None or c.samples_per_s_per_w > best.samples_per_s_per_w:
                best = c
    assert best is not None
    return best


def tpu_like(area: float, power: float, min_hbm_bytes: float) -> Design | None:
    """The largest TPU-v4-like replication of (4×128² MXU, 8 vector cores, 16 MB, 2 HBM) in budget."""
    best = None
    for n in range(1, 256):
        stacks = max(2 * n, math.ceil(min_hbm_bytes / HBM_STACK_BYTES))
        d = Design(128, 128, 4 * n, 8 * n, 16 * n, min(stacks, LIMITS["hbm_stacks"][1]))
        if not fits(d, area, power):
            break
        best = d
    return best if best is not None and best.hbm_bytes >= min_hbm_bytes else None


def _stages(workload: WorkloadGraph, pp: int) -> list[list[int]]:
    blocks = workload.block_layers
    if pp > len(blocks):
        raise InputError("command line", Problem("--pp", f"{pp} stages for {len(blocks)} layers"))
    parts = split_layers(blocks, pp)
    for li in workload.layers:
        if li.index not in blocks:
            (parts[0] if li.index < blocks[0] else parts[-1]).append(li.index)
    return [sorted(p) for p in parts]


def _memory(workload: WorkloadGraph, layers: list[int], tp: int, mb: int, elem: int, in_flight: int) -> float:
    ops = [op for i in layers for op in workload.layer_ops(i)]
    per_param = bytes_per_param(elem, True, Optimizer.adam)
    state = params_on_device(ops, tp) * (per_param.weights + per_param.gradients + per_param.optimizer)
    acts = activation_bytes([workload.layer_ops(i) for i in layers], mb, tp, False, Recompute.none, elem)
    return state + in_flight * acts


def search_hardware(
    workload: WorkloadGraph, *, area_mm2: float, power_w: float, pp: int = 1, tp: int = 1, micro_batch: int = 1,
    elem_bytes: int = 2, top: int = 5, link_bandwidth: float = 300e9, progress: ProgressFn | None = None,
    cancel: CancelFn | None = None,
) -> HwSearchResult:
    """One design per pipeline stage of ``workload`` under the budgets, and the TPU-like baseline.
    ``progress(fraction, text)`` gives each stage's local search an equal share; ``cancel()`` is checked
    every round of it and stops the search with ``Cancelled``."""
    for flag, value in (("--area-mm2", area_mm2), ("--power-w", power_w), ("--pp", pp), ("--tp", tp),
                        ("--micro-batch", micro_batch), ("--top", top)):
        if value <= 0:
            raise InputError("command line", Problem(flag, f"{value} must be positive"))
    report = Reporter(progress, cancel)
    start = time.perf_counter()
    stages = []
    for r, layers in enumerate(_stages(workload, pp)):
        g = stage_graph(workload, layers, tp, micro_batch, elem_bytes)
        stages.append(Stage(r, layers, g, _memory(workload, layers, tp, micro_batch, elem_bytes, pp - r)))
    evaluated = 0
    for st in stages:
        part = report.part(st.index / len(stages), (st.index + 1) / len(stages))
        ev = _Evaluator(st, elem_bytes, tp, link_bandwidth, area_mm2, power_w)
        stacks = min(max(1, math.ceil(st.memory_bytes / HBM_STACK_BYTES)), LIMITS["hbm_stacks"][1])
        seeds = [Design(32, 32, 1, 1, 8, stacks), Design(64, 64, 4, 4, 32, max(stacks, 2))]
        st.top = local_search(ev, seeds, top, report=part)
        st.front = tradeoffs(ev)
        evaluated += len(ev.seen)
        part(1.0, f"hw-search: stage {st.index}: {len(ev.seen)} designs, "
                  f"best {st.top[0].design.label() if st.top else '-'}")
        if not st.top:
            raise InputError("command line", Problem(
                "--area-mm2/--power-w",
                f"no design for stage {st.index} fits the budgets and holds its {st.memory_bytes / 1e9:.1f} GB"))
    chosen = global_search(stages, micro_batch, tp)
    baseline = None
    base = tpu_like(area_mm2, power_w, max(st.memory_bytes for st in stages))
    if base is not None:
        evs = [_Evaluator(st, elem_bytes, tp, link_bandwidth, area_mm2, power_w)(base) for st in stages]
        baseline = Choice([e for e in evs if e is not None], micro_batch, tp) if all(evs) else None
    return HwSearchResult(stages, chosen, baseline, evaluated, time.perf_counter() - start, (area_mm2, power_w))


def choice_json(c: Choice | None) -> dict | None:
    if c is None:
        return None
    return {
        "designs": [e.as_json() for e in c.designs],  # each design's tdp_w and area_mm2 are one chip's
        "chips": c.chips,
        "samples_per_s": c.samples_per_s,
        "tdp_w": c.tdp_w,  # all the chips'
        "tdp_w_per_chip": [e.tdp_w for e in c.designs],
        "samples_per_s_per_w": c.samples_per_s_per_w,
    }


def hw_result_json(r: HwSearchResult) -> dict:
    base = r.baseline
    return {
        "budgets": {"area_mm2": r.budgets[0], "power_w": r.budgets[1], "per": "chip"},
        "stages": [
            {"stage": st.index, "layers": st.layers, "memory_bytes": st.memory_bytes,
             "top": [e.as_json() for e in st.top]}
            for st in r.stages
        ],
        "chosen": choice_json(r.chosen),
        "baseline": choice_json(base),
        "gain_over_baseline": r.chosen.samples_per_s_per_w / base.samples_per_s_per_w if base else None,
        "evaluated": r.evaluated,
        "wall_time_s": r.wall_time_s,
    }


def _total(c: Choice) -> str:
    """"299 W TDP in total over 3 chips" (one chip: "299 W TDP"): the budget is per chip, so a total says so."""
    return f"{c.tdp_w:.0f} W TDP in total over {counted(c.chips, 'chip')}" if c.chips > 1 else f"{c.tdp_w:.0f} W TDP"


def hw_result_text(r: HwSearchResult) -> str:
    c = r.chosen
    per_stage = f" ({c.tp} tp chips per stage)" if c.tp > 1 else ""
    lines = [f"hardware search: per chip area ≤ {r.budgets[0]:g} mm² and TDP ≤ {r.budgets[1]:g} W; "
             f"{counted(c.chips, 'chip')}{per_stage}; {r.evaluated} designs evaluated in {r.wall_time_s:.1f} s"]
    for st, e in zip(r.stages, c.designs, strict=True):
        lines.append(f"  stage {st.index}: {e.design.label()} — per chip {e.area_mm2:.0f} mm², {e.tdp_w:.0f} W TDP, "
                     f"{e.design.peak_flops / 1e12:.0f} TFLOP/s; {e.makespan_s * 1e3:.2f} ms per micro-batch")
    lines.append(f"  chosen:   {c.samples_per_s:.3g} samples/s, {_total(c)}, {c.samples_per_s_per_w:.4g} samples/s/W")
    if r.baseline:
        b = r.baseline
        lines.append(f"  TPU-like: {b.designs[0].design.label()} ({b.designs[0].tdp_w:.0f} W TDP per chip): "
                     f"{b.samples_per_s:.3g} samples/s, {_total(b)}, {b.samples_per_s_per_w:.4g} samples/s/W "
                     f"(search ×{c.samples_per_s_per_w / b.samples_per_s_per_w:.2f})")
    else:
        lines.append("  TPU-like: no TPU-like unit fits these budgets")
    return "\n".join(lines)
