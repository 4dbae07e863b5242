"""The inter-chip programme of the multi-level mapping (DFModel, Ko et al. 2024, §4.1).

Every network dimension j (``netdims``) of size S_j is split as f_tp·f_pp·f_dp = S_j (binary y_{j,s}, one
split s per dimension), and each parallelism takes one degree (binary z_{p,d}); degrees are tied to the
splits in log space, Σ_d z_{p,d}·log d = Σ_{j,s} y_{j,s}·log f_p(s) — exact, as distinct degrees differ by
far more than the solver's tolerance. With all N devices busy, m = B/(dp·mb) micro-batches and C(tp) a
micro-batch's compute over all layers on one chip (the intra-chip optimum of ``fusion``), a 1F1B
pipeline takes (m + pp − 1)·C/pp = B·tp/(N·mb)·C + (1 − 1/pp)·C, because dp·pp = N/tp. Every term of the
iteration time — that, tensor-parallel collectives per dimension, pipeline hops, the data-parallel
reduction (its bytes a tensor rank's parameters / pp = params_of(tp)·dp/N), the optimizer step — depends
on one decision or on a product of two or three binaries, linearised exactly (McCormick: w ≥ a + b − 1,
w ≥ 0 suffices because every cost is positive and the programme minimises). Memory is one linear
constraint: state ∝ dp/N, activations per tensor degree (stage 0 holds at most L layers' worth under
1F1B). Solved by ``scipy.optimize.milp``.

Every coefficient is the engine's own figure where it depends on one dimension (``costs``: the plan's
passes; ``dimcomm``: its collectives and sends; ``plan.train_step``: the optimizer step's extras), so a
layout whose groups each lie along one dimension, with one pipeline stage, is timed exactly as
``tilewright run`` times it. What stays a surrogate (``map.ESTIMATE_SCOPE``): a group over several
dimensions (one collective per dimension: an upper bound), concurrent data-parallel groups sharing links,
overlap_grad_reduce, and pipeline stages as averages of their blocks (a tied embedding's copy, the
slowest stage's own collectives).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import product
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from tilewright.engine.plan.dgrad_overlap import exposed as dgrad_exposed
from tilewright.engine.search.multilevel.costs import Part, TensorCosts, ring_time
from tilewright.engine.search.multilevel.dimcomm import DimComm
from tilewright.engine.search.multilevel.netdims import Dim
from tilewright.engine.search.space import divisors

PARS = ("tp", "pp", "dp")


@dataclass
class Problem:
    dims: list[Dim]
    devices: int
    global_batch: int
    micro_batch: int
    layers: int
    params: float  # whole model
    state_per_param: tuple[float, float, float]  # weights, gradients, optimizer bytes
    zero: int
    capacity: float
    grad_bytes_per_param: float
    optimizer_bytes_per_param: float  # HBM traffic of the update
    hbm_bandwidth: float
    hop_bytes: float  # activation sent between stages per micro-batch (full tensor; /tp per rank)
    degrees: dict[str, list[int]]
    costs: TensorCosts
    comm: DimComm | None = None  # the engine's collectives along each dimension; None: ``ring_time``
    # per (tp, dp) degree: what ``plan.train_step`` adds to the optimizer's stream (drains, flag all-reduces)
    step_overhead: dict[tuple[int, int], float] = field(default_factory=dict)
    # per tp degree t: t × a tensor rank's parameters (``params_on_device``) — above ``params`` by what a
    # tensor group replicates (norms, position embeddings), which each rank reduces and steps in full
    params_tp: dict[int, float] = field(default_factory=dict)
    fusion_sram_bytes: float = 0.0  # the on-chip memory the fusion programme tiled against (``map.build_problem``)

    def params_of(self, t: int) -> float:
        return self.params_tp.get(t, self.params)

    def collective(self, kind: str, j: int, f: int, nbytes: float, step: int = 1) -> float:
        """One collective over ``f`` members along dimension ``j``, ``step`` coordinates apart."""
        if self.comm is None:
            return ring_time(kind, f, nbytes, self.dims[j])
        return self.comm.collective(kind, j, f, nbytes, step)

    def shown(self, kind: str, j: int, f: int, nbytes: float, cover_s: float | None) -> float:
        """A pass's collective over ``f`` members along dimension ``j``; an async one (``cover_s`` seconds of
        weight gradients beside it, ``plan.dgrad_overlap``) as the plan charges it on that group: the bytes of
        it that take what the cover leaves."""
        if cover_s is None:
            return self.collective(kind, j, f, nbytes)
        shown = dgrad_exposed(lambda n: self.collective(kind, j, f, n), nbytes, cover_s)
        return self.collective(kind, j, f, shown) if shown > 0 else 0.0

    def hops(self, j: int, s: tuple[int, int, int], nbytes: float) -> float:
        """Forward and backward sends across the s[1] − 1 stage boundaries along dimension ``j``."""
        if s[1] <= 1:
            return 0.0
        if self.comm is None:
            d = self.dims[j]
            one = nbytes / d.bandwidth + d.hop_latency
        else:
            one = self.comm.send(j, s[0] * s[2], nbytes)
        return 2 * (s[1] - 1) * one


@dataclass
class Layout:
    """A solution: degrees and, per dimension, (f_tp, f_pp, f_dp)."""

    degrees: dict[str, int]
    splits: list[tuple[int, int, int]]
    time_s: float = 0.0
    terms: dict[str, float] = field(default_factory=dict)


def splits_of(size: int) -> list[tuple[int, int, int]]:
    return [(a, b, size // (a * b)) for a in divisors(size) for b in divisors(size // a)]


class _Vars:
    def __init__(self) -> None:
        self.n = 0
        self.names: list[Any] = []

    def add(self, name: Any) -> int:
        self.names.append(name)
        self.n += 1
        return self.n - 1


def stage_max(first: float, block: float, last: float, layers: int, pp: int) -> float:
    """The slowest stage's time per micro-batch: ⌈L/pp⌉ blocks (``split_layers`` gives the earlier stages
    the extra ones) plus the embedding or the head (both when pp = 1)."""
    ends = first + last if pp == 1 else max(first, last)
    return math.ceil(layers / pp) * block + ends


def _cost_terms(pb: Problem, fused: bool) -> dict[str, Any]:
    """Coefficients of each cost term, keyed by the decision (or decisions) it depends on.

    1F1B closed form (``engine.plan.timing.closed_form`` with v = 1): T = (m − 1)·P + Σ_r stage_r,
    P the slowest stage, m = B/(dp·mb) = B·tp·pp/(N·mb): the Σ part depends on tp alone, the (m − 1)·P
    part on (tp, pp) — and on a dimension's split too for its tensor-parallel collectives."""
    N, B, mb, L = pb.devices, pb.global_batch, pb.micro_batch, pb.layers
    c = pb.costs

    def m_minus_1(t: int, p: int) -> float:
        return max(B * t * p / (N * mb) - 1, 0.0)

    def comm(part: Part, f: int, j: int) -> float:
        return part.scale * sum(pb.shown(kind, j, f, n, cover) for kind, n, cover in part.comm)

    terms: dict[str, Any] = {"total": {}, "pipe": {}, "tp_total": {}, "tp_pipe": {}, "hops": {}, "dp": {}}
    for t in pb.degrees["tp"]:
        first, block, last = c.compute(t, fused)
        terms["total"][t] = first + L * block + last
        for p in pb.degrees["pp"]:
            terms["pipe"][(t, p)] = m_minus_1(t, p) * stage_max(first, block, last, L, p)
        for j, d in enumerate(pb.dims):
            for s in splits_of(d.size):
                xf, xb, xl = (comm(part, s[0], j) for part in (c.first[t], c.block[t], c.last[t]))
                terms["tp_total"][(t, j, s)] = xf + L * xb + xl
                terms["hops"][(t, j, s)] = pb.hops(j, s, pb.hop_bytes / t)
                for p in pb.degrees["pp"]:
                    terms["tp_pipe"][(p, t, j, s)] = m_minus_1(t, p) * stage_max(xf, xb, xl, L, p)
    for t in pb.degrees["tp"]:  # a device's parameters: params_of(t)/(t·pp) = params_of(t)·q/N
        for q in pb.degrees["dp"]:
            for j, d in enumerate(pb.dims):
                for s in splits_of(d.size):
                    grads = pb.params_of(t) * pb.grad_bytes_per_param * q / N
                    terms["dp"][(t, q, j, s)] = pb.collective("all-reduce", j, s[2], grads, step=s[0])
    w, g, o = pb.state_per_param
    terms["optimizer"] = {
        (t, q): pb.params_of(t) * pb.optimizer_bytes_per_param * (1 if pb.zero else q) / N / pb.hbm_bandwidth
        + pb.step_overhead.get((t, q), 0.0)
        for t in pb.degrees["tp"]
        for q in pb.degrees["dp"]
    }
    terms["memory_dp"] = {q: pb.params * q / N * (w + g + (0 if pb.zero else o)) for q in pb.degrees["dp"]}
    terms["memory_fixed"] = pb.params / N * o if pb.zero else 0.0
    terms["memory_tp"] = {t: c.activations[t] + c.workspace[t] for t in pb.degrees["tp"]}
    return terms


def solve(pb: Problem, fused: bool = True, time_limit: float = 30.0) -> Layout | None:
    """The optimal layout under the surrogate, or None when no layout fits in memory."""
    terms = _cost_terms(pb, fused)
    v = _Vars()
    y = {(j, s): v.add(("y", j, s)) for j, d in enumerate(pb.dims) for s in splits_of(d.size)}
    z = {(p, d): v.add(("z", p, d)) for p in PARS for d in pb.degrees[p]}
    pairs = {}  # product variables (McCormick), keyed like the cost terms

    def prod_var(key: Any, a: int, b: int) -> int:
        if key not in pairs:
            pairs[key] = (v.add(("w", key)), a, b)
        return pairs[key][0]

    cost: dict[int, float] = {}

    def charge(var: int, value: float) -> None:
        cost[var] = cost.get(var, 0.0) + value

    for t, c in terms["total"].items():
        charge(z[("tp", t)], c)
    for (t, p), c in terms["pipe"].items():
        charge(prod_var(("tp-pp", t, p), z[("tp", t)], z[("pp", p)]), c)
    for (t, j, s), c in terms["tp_total"].items():
        charge(prod_var(("tp-y", t, j, s), z[("tp", t)], y[(j, s)]), c + terms["hops"][(t, j, s)])
    for (p, t, j, s), c in terms["tp_pipe"].items():
        if c > 0:  # three binaries: the pp degree × (tp degree × split) product
            inner = prod_var(("tp-y", t, j, s), z[("tp", t)], y[(j, s)])
            charge(prod_var(("pp-tpy", p, t, j, s), z[("pp", p)], inner), c)
    for (t, q, j, s), c in terms["dp"].items():
        if c > 0:  # three binaries: the tp degree (its parameters) × (dp degree × split)
            inner = prod_var(("dp-y", q, j, s), z[("dp", q)], y[(j, s)])
            charge(prod_var(("tp-dpy", t, q, j, s), z[("tp", t)], inner), c)
    for (t, q), c in terms["optimizer"].items():
        charge(prod_var(("tp-dp", t, q), z[("tp", t)], z[("dp", q)]), c)

    rows, lo, hi = [], [], []

    def add(coefs: dict[int, float], lower: float, upper: float) -> None:
        row = np.zeros(v.n)
        for k, val in coefs.items():
            row[k] += val
        rows.append(row)
        lo.append(lower)
        hi.append(upper)

    for j, d in enumerate(pb.dims):
        add({y[(j, s)]: 1.0 for s in splits_of(d.size)}, 1, 1)
    for k, p in enumerate(PARS):
        add({z[(p, d)]: 1.0 for d in pb.degrees[p]}, 1, 1)
        link = {z[(p, d)]: math.log(d) for d in pb.degrees[p]}
        for (_, s), var in y.items():
            link[var] = link.get(var, 0.0) - math.log(s[k])
        add(link, -1e-7, 1e-7)
    for w_var, a, b in pairs.values():
        add({w_var: 1.0, a: -1.0, b: -1.0}, -1.0, np.inf)
    mem = {z[("dp", q)]: m for q, m in terms["memory_dp"].items()}
    for t, m in terms["memory_tp"].items():
        mem[z[("tp", t)]] = mem.get(z[("tp", t)], 0.0) + m
    add(mem, -np.inf, pb.capacity - terms["memory_fixed"])

    c = np.zeros(v.n)
    for k, val in cost.items():
        c[k] = val
    integrality = np.array([1 if name[0] in ("y", "z") else 0 for name in v.names])
    res = milp(c, constraints=LinearConstraint(np.array(rows), lo, hi), integrality=integrality,
               bounds=Bounds(np.zeros(v.n), np.ones(v.n)), options={"time_limit": time_limit})
    if res.x is None:
        return None
    x = res.x
    degrees = {p: next(d for d in pb.degrees[p] if x[z[(p, d)]] > 0.5) for p in PARS}
    splits = [next(s for s in splits_of(d.size) if x[y[(j, s)]] > 0.5) for j, d in enumerate(pb.dims)]
    return evaluate(pb, Layout(degrees, splits), fused)


def evaluate(pb: Problem, layout: Layout, fused: bool) -> Layout:
    """The surrogate's time of ``layout`` term by term (what the MILP's objective is at that point)."""
    terms = _cost_terms(pb, fused)
    t, p, q = (layout.degrees[k] for k in PARS)
    parts = {"compute": terms["total"][t] + terms["pipe"][(t, p)], "tp_comm": 0.0, "pp_comm": 0.0, "dp_comm": 0.0,
             "optimizer": terms["optimizer"][(t, q)]}
    for j, s in enumerate(layout.splits):
        parts["tp_comm"] += terms["tp_total"][(t, j, s)] + terms["tp_pipe"][(p, t, j, s)]
        parts["pp_comm"] += terms["hops"][(t, j, s)]
        parts["dp_comm"] += terms["dp"][(t, q, j, s)]
    layout.terms = parts
    layout.time_s = sum(parts.values())
    return layout


def memory_of(pb: Problem, layout: Layout) -> float:
    terms = _cost_terms(pb, True)
    return terms["memory_dp"][layout.degrees["dp"]] + terms["memory_tp"][layout.degrees["tp"]] + terms["memory_fixed"]


def row_major_layout(pb: Problem, tp: int, pp: int, dp: int) -> Layout | None:
    """The engine's default placement (ranks tp fastest, then dp, then pp, over device indices) as
    per-dimension splits, or None when its blocks do not align with the dimensions (the boundaries
    1, tp, tp·dp, N and the dimensions' running products must form one divisibility chain)."""
    running = {math.prod(d.size for d in pb.dims[: j + 1]) for j in range(len(pb.dims))}
    bounds = sorted({1, tp, tp * dp, pb.devices} | running)
    if any(b % a for a, b in zip(bounds, bounds[1:], strict=False)):
        return None
    splits, below = [], 1
    for dim in pb.dims:
        above = below * dim.size
        f_tp = min(above, tp) // min(below, tp)
        f_dp = min(max(above // tp, 1), dp) // min(max(below // tp, 1), dp)
        splits.append((f_tp, dim.size // (f_tp * f_dp), f_dp))
        below = above
    return Layout({"tp": tp, "pp": pp, "dp": dp}, splits)


def realize(layout: Layout, dims: list[Dim]) -> list[list[int]]:
    """Device indices per pipeline stage, replica-major (replica j's tensor group at [j·tp, (j+1)·tp)):
    within each dimension tp varies fastest, then dp, then pp."""
    from tilewright.engine.search.multilevel.netdims import device_index

    def digits(rank: int, k: int) -> list[int]:
        out = []
        for s in layout.splits:
            out.append(rank % s[k])
            rank //= s[k]
        return out

    tp, pp, dp = (layout.degrees[k] for k in PARS)
    stages = []
    for r in range(pp):
        p = digits(r, 1)
        devs = []
        for j in range(dp):
            d = digits(j, 2)
            for i in range(tp):
                t = digits(i, 0)
                coord = [t[k] + s[0] * (d[k] + s[2] * p[k]) for k, s in enumerate(layout.splits)]
                devs.append(device_index(coord, dims))
        stages.append(devs)
    return stages


def degree_options(pb_devices: int, global_batch: int, micro_batch: int, layers: int, tps: list[int]) -> dict:
    return {
        "tp": [t for t in tps if pb_devices % t == 0],
        "pp": [p for p in divisors(pb_devices) if p <= layers],
        "dp": [q for q in divisors(pb_devices) if (global_batch // micro_batch) % q == 0
               and global_batch % micro_batch == 0],
    }


def all_layouts(pb: Problem) -> list[Layout]:
    """Every (degrees, splits) combination, for tests that check the MILP by enumeration."""
    out = []
    for combo in product(*(splits_of(d.size) for d in pb.dims)):
        deg = {k: math.prod(s[i] for s in combo) for i, k in enumerate(PARS)}
        if all(deg[k] in pb.degrees[k] for k in PARS):
            out.append(Layout(deg, list(combo)))
    return out
