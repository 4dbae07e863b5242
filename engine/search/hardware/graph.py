"""The operator graph of one pipeline/tensor stage, timed on a candidate accelerator design.

WHAM (Adnan et al., arXiv 2404.14632, §4.2) sizes an accelerator from the operator graph of its stage:
each operator's time on the candidate's tensor or vector cores (roofline against HBM traffic after SRAM
reuse), then the critical path of the graph — the operators with zero slack — says which resource to
grow. Here a stage is its layers' forward ops, tensor-parallel all-reduces (Megatron placement: after
row-split ops forward, after column-split ops backward), and the backward ops with reversed edges.

Vector ops carry no FLOPs in the workload IR (they are memory-bound by convention), so their arithmetic
is estimated per element: 8 for norms (mean, variance, scale), 5 for softmax (max, exp, sum, divide),
4 for the loss, 2 for dropout, 1 for other elementwise ops and pooling.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from tilewright.engine.ir.ops import Op, OpKind, TensorSplit
from tilewright.engine.perf.op_cost import MATRIX_KINDS, TP_SPLITS, shard
from tilewright.engine.perf.tiling import matmul_traffic
from tilewright.engine.search.hardware.model import Design
from tilewright.engine.workloads.graph import WorkloadGraph

VECTOR_FLOPS_PER_ELEM = {
    OpKind.norm: 8.0, OpKind.softmax: 5.0, OpKind.loss: 4.0, OpKind.dropout: 2.0,
    OpKind.elementwise: 1.0, OpKind.pool: 1.0, OpKind.embedding: 0.0,
}
UNITS = ("tensor", "vector", "link")


@dataclass(frozen=True)
class Node:
    unit: str  # tensor | vector | link
    flops: float
    traffic_elems: float  # operands when nothing is reused on chip
    gemm: tuple[float, float, float] | None  # sharded (M, N, K), one matmul
    gemms: int = 1  # backward of a matmul: two of them (input and weight gradients)
    comm_bytes: float = 0.0


@dataclass
class StageGraph:
    nodes: list[Node] = field(default_factory=list)
    preds: list[list[int]] = field(default_factory=list)

    def add(self, node: Node, preds: list[int]) -> int:
        self.nodes.append(node)
        self.preds.append(preds)
        return len(self.nodes) - 1


def _sharded_gemm(op: Op, mb: int, tp: int) -> tuple[float, float, float]:
    """(M, N, K) of one tensor rank's matmul, as ``engine.perf.op_cost`` shards it."""
    assert op.gemm is not None
    m, n, k = op.gemm
    if op.split in (TensorSplit.column, TensorSplit.heads, TensorSplit.vocab):
        return m * mb, n / tp, k
    if op.split is TensorSplit.row:
        return m * mb, n, k / tp
    return m * mb, n, k


def _node(op: Op, mb: int, tp: int, backward: bool) -> Node:
    k = shard(op, tp, False)
    flops = (op.backward_flops if backward else op.flops) * mb / k
    params = op.params / (tp if op.split in TP_SPLITS else 1)
    acts = (op.in_elems + op.out_elems) * mb / k
    traffic = 2 * params + acts + op.in_elems * mb / k if backward else params + acts
    if op.kind in MATRIX_KINDS and flops > 0:
        gemm = _sharded_gemm(op, mb, tp) if op.gemm is not None else None
        return Node("tensor", flops, traffic, gemm, 2 if backward else 1)
    elems = max(op.in_elems, op.out_elems) * mb / k * (2 if backward else 1)
    return Node("vector", elems * VECTOR_FLOPS_PER_ELEM.get(op.kind, 1.0), traffic, None)


def _weighted(op: Op) -> bool:
    return op.params > 0 and op.kind in (OpKind.matmul, OpKind.fc, OpKind.conv, OpKind.embedding)


def stage_graph(workload: WorkloadGraph, layers: list[int], tp: int, mb: int, elem_bytes: int) -> StageGraph:
    """Forward then backward ops of ``layers`` for one micro-batch, with tensor-parallel all-reduces."""
    ops = [op for i in layers for op in workload.layer_ops(i)]
    names = {op.name for op in ops}
    g = StageGraph()
    out: dict[str, int] = {}  # op name → node whose end makes its output available
    prev: int | None = None
    for op in ops:
        sources = [s for s in op.inputs if s in names] if op.inputs else []
        preds = [out[s] for s in sources] if sources else ([prev] if prev is not None else [])
        idx = g.add(_node(op, mb, tp, False), preds)
        if tp > 1 and _weighted(op) and op.split is TensorSplit.row:
            idx = g.add(Node("link", 0, 0, None, comm_bytes=op.out_elems * mb * elem_bytes), [idx])
        out[op.name] = prev = idx
    consumers: dict[str, list[str]] = {op.name: [] for op in ops}
    for i, op in enumerate(ops):
        sources = [s for s in op.inputs if s in names] if op.inputs else ([ops[i - 1].name] if i else [])
        for s in sources:
            consumers[s].append(op.name)
    grad: dict[str, int] = {}  # op name → node after which its input gradient is ready
    last_fwd = prev
    for op in reversed(ops):
        preds = [grad[c] for c in consumers[op.name]] or ([last_fwd] if last_fwd is not None else [])
        idx = g.add(_node(op, mb, tp, True), preds)
        if tp > 1 and _weighted(op) and op.split is TensorSplit.column:
            idx = g.add(Node("link", 0, 0, None, comm_bytes=op.in_elems * mb * elem_bytes), [idx])
        grad[op.name] = idx
    return g


@dataclass(frozen=True)
class Timing:
    durations: list[float]
    bound: list[str]  # tensor | vector | memory | link: what limits each node
    makespan: float  # list-scheduled on one tensor unit, one vector unit and one link
    critical: dict[str, float]  # time on the zero-slack path, by what limits it


def node_time(n: Node, d: Design, elem_bytes: int, tp: int, link_bw: float) -> tuple[float, str]:
    if n.unit == "link":
        return 2 * (tp - 1) / tp * n.comm_bytes / link_bw, "link"
    sram_elems = d.sram_bytes / elem_bytes
    if n.unit == "tensor":
        eff = _shape_efficiency(d, n.gemm) if n.gemm is not None else 1.0
        compute = n.flops / (d.peak_flops * eff)
        if n.gemm is not None:
            dram = matmul_traffic(*n.gemm, sram_elems).dram_elems * n.gemms
        else:
            dram = 0.0 if n.traffic_elems <= sram_elems / 2 else n.traffic_elems
    else:
        compute = n.flops / d.vector_flops
        dram = 0.0 if n.traffic_elems <= sram_elems / 2 else n.traffic_elems
    memory = dram * elem_bytes / d.hbm_bandwidth
    if memory > compute:
        return memory, "memory"
    return compute, n.unit


def _shape_efficiency(d: Design, gemm: tuple[float, float, float]) -> float:
    """Tile and wave quantization of the output on ``tensor_cores`` arrays of rows × cols (as
    ``Compute.shape_efficiency``, computed here without building a Compute per design)."""
    import math

    m, n, _ = gemm
    if m <= 0 or n <= 0:
        return 1.0
    rows, cols = math.ceil(m / d.pe_rows), math.ceil(n / d.pe_cols)
    tiles = rows * cols
    waves = math.ceil(tiles / d.tensor_cores)
    return (m * n) / (rows * d.pe_rows * cols * d.pe_cols) * tiles / (waves * d.tensor_cores)


def time_graph(g: StageGraph, d: Design, elem_bytes: int, tp: int, link_bw: float) -> Timing:
    durations, bound = [], []
    cache: dict[Node, tuple[float, str]] = {}
    for n in g.nodes:
        hit = cache.get(n)
        if hit is None:
            hit = cache[n] = node_time(n, d, elem_bytes, tp, link_bw)
        durations.append(hit[0])
        bound.append(hit[1])
    return Timing(durations, bound, _list_schedule(g, durations), _critical(g, durations, bound))


def _critical(g: StageGraph, dur: list[float], bound: list[str]) -> dict[str, float]:
    """Time of the zero-slack operators (earliest start = latest start), by limiting resource."""
    n = len(dur)
    early = [0.0] * n
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(g.preds):  # nodes are in topological order
        early[i] = max((early[p] + dur[p] for p in ps), default=0.0)
        for p in ps:
            succ[p].append(i)
    end = max((early[i] + dur[i] for i in range(n)), default=0.0)
    late = [0.0] * n
    for i in range(n - 1, -1, -1):
        late[i] = min((late[s] for s in succ[i]), default=end) - dur[i]
    out = dict.fromkeys(("tensor", "vector", "memory", "link"), 0.0)
    tol = 1e-12 + 1e-9 * end
    for i in range(n):
        if late[i] - early[i] <= tol:
            out[bound[i]] += dur[i]
    return out


def _list_schedule(g: StageGraph, dur: list[float]) -> float:
    """Critical-path list scheduling: a ready op starts when its unit is free, longest tail first."""
    n = len(dur)
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(g.preds):
        for p in ps:
            succ[p].append(i)
    tail = [0.0] * n
    for i in range(n - 1, -1, -1):
        tail[i] = dur[i] + max((tail[s] for s in succ[i]), default=0.0)
    waiting = [len(ps) for ps in g.preds]
    ready_at = [0.0] * n
    free = dict.fromkeys(UNITS, 0.0)
    heap = [(-tail[i], i) for i in range(n) if not waiting[i]]
    heapq.heapify(heap)
    end = 0.0
    while heap:
        _, i = heapq.heappop(heap)
        unit = g.nodes[i].unit
        start = max(ready_at[i], free[unit])
        finish = start + dur[i]
        free[unit] = finish
        end = max(end, finish)
        for s in succ[i]:
            ready_at[s] = max(ready_at[s], finish)
            waiting[s] -= 1
            if not waiting[s]:
                heapq.heappush(heap, (-tail[s], s))
    return end
