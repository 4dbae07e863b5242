"""Inside a chip: operator fusion and tiling against SRAM and HBM, as a mixed-integer linear programme.

DFModel's intra-chip level (Ko et al. 2024, §4.2) decides which consecutive operators of a layer run
fused — the intermediate tensor stays in SRAM, streamed through in tiles, instead of a round trip to HBM
— and how large the tiles are, subject to SRAM capacity. The unfused starting point is exactly the
engine's op model (``engine.perf.op_cost``: every op reads its weights and inputs from HBM and writes
its output; forward plus backward traffic), so the default mapping is a feasible point of the programme.

Variables, per layer (ops in order, i → i+1 an edge when i+1 consumes i's output):
  f_i ∈ {0,1}   fuse edge i: saves the intermediate's HBM write and read, forward and backward (4 × its
                bytes), but its tile (double-buffered) must fit in SRAM;
  y_{i,k} ∈ {0,1}  op i works on row-tiles of 1/2^k of the micro-batch's rows, one k per op; ops joined
                by a fused edge share k; weights that do not fit in half the SRAM are re-read per tile;
  t_i ≥ 0       op time, t_i ≥ compute_i and t_i ≥ HBM bytes_i / bandwidth (the roofline's max).
Minimise Σ t_i. Solved with ``scipy.optimize.milp`` (HiGHS).

Ops are costed with the mapping's tensor formats and spatial policy (``search.op_settings``). A device
with a grid of cores splits each op over its cores and keeps fused intermediates on chip itself
(``perf.spatial_op``), and an SRAM-only tile follows the engine's tiling model: for both the layer's time
is the engine's op model, unfused, and the programme is not run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from tilewright.engine.ir.ops import Op
from tilewright.engine.perf.device import DeviceModel
from tilewright.engine.perf.op_cost import TP_SPLITS, op_time, shard
from tilewright.engine.plan.passes import collective_between
from tilewright.engine.search.op_settings import OpSettings

TILE_LEVELS = 6  # row tiles of 1, 1/2, …, 1/32 of the micro-batch


@dataclass(frozen=True)
class FusedLayer:
    default_s: float  # unfused, whole-tensor ops: the engine's op model
    optimized_s: float
    fused_edges: list[tuple[str, str]]  # (producer, consumer) kept on chip
    tiles: list[float]  # per op: fraction of the rows per tile
    groups: list[list[str]]  # fused chains

    @property
    def gain(self) -> float:
        return self.default_s / self.optimized_s if self.optimized_s > 0 else 1.0


def _edges(ops: list[Op], tp: int) -> list[int]:
    """i such that op i+1 consumes op i's output on the same chip (a chain link that could be fused)."""
    out = []
    for i in range(len(ops) - 1):
        consumes = not ops[i + 1].inputs or ops[i].name in ops[i + 1].inputs
        if consumes and not collective_between(ops[i], ops[i + 1], tp):
            out.append(i)
    return out


def optimize_layer(
    ops: list[Op],
    dev: DeviceModel,
    micro_batch: int,
    tp: int,
    sp: bool,
    elem: float,
    settings: OpSettings | None = None,
) -> FusedLayer:
    n = len(ops)
    formats, spatial = (settings.formats, settings.spatial) if settings is not None else (None, None)
    if dev.compute.grid is not None:  # the engine's spatial model, unfused
        busy = sum(
            op_time(op, dev, micro_batch, tp, sp, bwd, elem, False, False, formats, spatial).busy_s
            for op in ops
            for bwd in (False, True)
        )
        return FusedLayer(busy, busy, [], [1.0] * n, [[op.name] for op in ops])
    bw = dev.dram_bandwidth
    sram = dev.sram_bytes
    weight_bytes = settings.weight_bytes if settings is not None else elem
    compute, traffic, weights, out_b, in_b = [], [], [], [], []
    for op in ops:
        f = op_time(op, dev, micro_batch, tp, sp, False, elem, formats=formats)
        b = op_time(op, dev, micro_batch, tp, sp, True, elem, formats=formats)
        compute.append(f.compute_s + b.compute_s)
        traffic.append((f.memory_s + b.memory_s) * bw)  # the engine's forward + backward bytes
        k = shard(op, tp, sp)
        weights.append(3 * op.params / (tp if op.split in TP_SPLITS else 1) * weight_bytes)  # read fwd, read + grad bwd
        out_b.append(op.out_elems * micro_batch / k * elem)
        in_b.append(op.in_elems * micro_batch / k * elem)
    default = sum(max(c, t / bw) for c, t in zip(compute, traffic, strict=True))
    edges = _edges(ops, tp)
    if sram <= 0 or not edges or dev.local_dram is None:  # SRAM-only tiles: the engine's tiling model rules
        return FusedLayer(default, default, [], [1.0] * n, [[op.name] for op in ops])
    K = TILE_LEVELS
    # variable layout: t (n) | y (n·K) | f (len(edges))
    nt, ny, nf = n, n * K, len(edges)
    nv = nt + ny + nf
    Y = lambda i, k: nt + i * K + k  # noqa: E731
    F = {e: nt + ny + j for j, e in enumerate(edges)}
    rows, lo, hi = [], [], []

    def add(coefs: dict[int, float], lower: float, upper: float) -> None:
        row = np.zeros(nv)
        for j, v in coefs.items():
            row[j] += v
        rows.append(row)
        lo.append(lower)
        hi.append(upper)

    for i in range(n):
        add({Y(i, k): 1.0 for k in range(K)}, 1, 1)  # one tile size per op
        # t_i·bw ≥ bytes_i = traffic_i + weight re-reads(k) − fused savings
        reread = {Y(i, k): -(2**k - 1) * weights[i] for k in range(K)} if weights[i] > sram / 2 else {}
        coefs = {i: bw, **reread}
        if i in F:  # output kept on chip: no write forward, no read of its gradient backward
            coefs[F[i]] = coefs.get(F[i], 0.0) + min(2 * out_b[i], traffic[i] - weights[i])
        if i - 1 in F:  # input from chip: no read forward, no write of its gradient backward
            coefs[F[i - 1]] = coefs.get(F[i - 1], 0.0) + min(2 * in_b[i], traffic[i] - weights[i])
        add(coefs, traffic[i], np.inf)
    for i in edges:
        # the intermediate's tile, double-buffered, fits in SRAM when fused (big-M off when not)
        big = 2 * out_b[i]
        coefs = {Y(i, k): 2 * out_b[i] / 2**k for k in range(K)}
        coefs[F[i]] = big
        add(coefs, -np.inf, sram + big)
        for k in range(K):  # fused ops share their tile size
            add({Y(i, k): 1.0, Y(i + 1, k): -1.0, F[i]: 1.0}, -np.inf, 1.0)
            add({Y(i + 1, k): 1.0, Y(i, k): -1.0, F[i]: 1.0}, -np.inf, 1.0)
    c = np.zeros(nv)
    c[:nt] = 1.0
    lower = np.zeros(nv)
    lower[:nt] = compute
    upper = np.ones(nv)
    upper[:nt] = np.inf
    integrality = np.ones(nv)
    integrality[:nt] = 0
    res = milp(
        c,
        constraints=LinearConstraint(np.array(rows), lo, hi),
        integrality=integrality,
        bounds=Bounds(lower, upper),
        options={"time_limit": 10.0},
    )
    if res.x is None:
        return FusedLayer(default, default, [], [1.0] * n, [[op.name] for op in ops])
    x = res.x
    fused = [e for e in edges if x[F[e]] > 0.5]
    tiles = [1.0 / 2 ** int(np.argmax(x[Y(i, 0) : Y(i, 0) + K])) for i in range(n)]
    groups: list[list[str]] = []
    for i, op in enumerate(ops):
        if i - 1 in fused:
            groups[-1].append(op.name)
        else:
            groups.append([op.name])
    optimized = min(float(x[:nt].sum()), default)
    return FusedLayer(default, optimized, [(ops[e].name, ops[e + 1].name) for e in fused], tiles, groups)
