"""The NoC and DRAM traffic of each split a run reports (``Result.spatial_splits``), read back from the run.

A run counts each matmul's split by its ``Split.describe`` text ("2-D 8×7, 16×50 tiles/core, K-block 8, L1
block 4×25, A mcast rows, B mcast cols"); ``parse_split`` is that text's inverse. With the op's GEMM from
the workload — K and N exactly as the engine cuts a tensor-parallel shard (``op_cost._sharded_gemm``), the
formats the mapping gives the op — the split's traffic is ``perf.spatial_traffic.gemm_traffic``, the same
formula ``spatial_cost`` charges its DRAM bytes with. M (tokens: it depends on the phase and micro-batch) is
taken from the split's whole blocks: exact when the tokens fill whole tiles per core row (and always for a
1-D split of A), else an upper bound by less than one block row. Operands are taken to live in DRAM
(fusion and SRAM residency keep some in L1; the split text does not say which).

``with_traffic`` adds a ``traffic`` summary (bytes) to every row it can read back: ``--json`` carries it, the
CLI's split lines name the busiest link, and the studio draws the per-link trees of ``SplitReader.record``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from tilewright.engine.ir.hardware import Component, Memory, MemoryKind
from tilewright.engine.ir.mapping import tp_axes_for
from tilewright.engine.ir.ops import Op
from tilewright.engine.ir.project import Project
from tilewright.engine.perf.formats import OpFormats, resolve_formats
from tilewright.engine.perf.op_cost import _sharded_gemm  # the engine's one tensor-parallel cut of a GEMM
from tilewright.engine.perf.spatial_chip import GridChip, grid_chip
from tilewright.engine.perf.spatial_cost import GemmProblem, Split
from tilewright.engine.perf.spatial_traffic import SplitTraffic, gemm_traffic
from tilewright.engine.plan.device_layers import run_formats
from tilewright.engine.workloads import WorkloadGraph, build_workload

_HEAD = re.compile(r"^\s*(?:2-D\s+(\d+)\s*[×x]\s*(\d+)|1-D\s+(\d+))")
_PER = re.compile(r"(\d+)\s*[×x]\s*(\d+)\s+tiles/core")
_BK = re.compile(r"K-block\s+(\d+)")
_L1 = re.compile(r"L1 block\s+(\d+)\s*[×x]\s*(\d+)")
_KS = re.compile(r"K-split\s+(\d+)")
SHARDED = ", B DRAM-sharded"  # what ``spatial_op`` appends to a 1-D split whose B is DRAM-sharded


def parse_split(text: str) -> tuple[Split, bool] | None:
    """The ``Split`` a description was written from, and whether B is DRAM-sharded; None for text that is
    not one GEMM's split (a backward pair, routed experts). The destination sub-block is not in the text
    (1 × 1 here): it changes the inner loop's time, not what moves."""
    head, per, bk = _HEAD.match(text), _PER.search(text), _BK.search(text)
    if head is None or per is None or bk is None or ";" in text:
        return None
    pm, pn = int(per.group(1)), int(per.group(2))
    l1 = _L1.search(text)
    oh, ow = (int(l1.group(1)), int(l1.group(2))) if l1 else (pm, pn)
    ks = _KS.search(text)
    k_split = int(ks.group(1)) if ks else 1
    if head.group(1):
        rows, cols, kind = int(head.group(1)), int(head.group(2)), "2d"
    elif "B mcast to all" in text:
        rows, cols, kind = int(head.group(3)), 1, "1d_in1"
    else:
        rows, cols, kind = 1, int(head.group(3)), "1d_in0"
    return Split(kind, rows, cols, pm, pn, int(bk.group(1)), oh, ow, 1, 1, k_split), SHARDED in text


def grid_device(component: Component) -> Component | None:
    """The first component at or below ``component`` with a grid of cores (where a run's splits are made)."""
    if component.compute is not None and component.compute.grid is not None:
        return component
    for child in component.children:
        found = grid_device(child)
        if found is not None:
            return found
    return None


def device_dram(device: Component) -> Memory | None:
    """The device's own DRAM as the cost model takes it (``perf.device.device_model``: the largest)."""
    dram = [m for m in device.memories if m.kind is not MemoryKind.sram]
    return max(dram, key=lambda m: m.capacity_bytes) if dram else None


def gemms_by_name(workload: WorkloadGraph) -> dict[str, Op]:
    """The workload's matmuls by their name within a layer ("qkv", "mlp_up"), the first of each."""
    out: dict[str, Op] = {}
    for o in workload.ops():
        if o.gemm is not None:
            out.setdefault(o.name.split(".", 1)[-1], o)
    return out


def split_problem(project: Project, op: Op, s: Split, b_sharded: bool, tile: int,
                  formats: OpFormats | None = None) -> GemmProblem:
    """The op's GEMM on one device as ``s`` lays it (see the module docstring for M). ``formats``: the run's, as
    the plan resolves them (``plan.device_layers.run_formats``: fp8 training's bf16 vocabulary and edge layers);
    None: the mapping's alone."""
    m = project.mapping
    _m, n, k = _sharded_gemm(op, 1, m.tp, tp_axes_for(m.tp_axes, m.tp))  # forward splits: 2-D cut if any
    if formats is None:
        formats = resolve_formats(project.run.dtype, project.mapping.formats, project.mapping.fidelity)
    fmt = formats.for_op(op.name)  # the full name: a layer run outside fp8 is matched by it
    a, b = fmt.activations.value, fmt.weights.value
    m_tiles = s.per_m if s.kind == "1d_in0" else s.rows * s.per_m
    return GemmProblem(m_tiles * tile, math.ceil(k), math.ceil(n), a, b, a, fmt.fidelity.value, b_sharded=b_sharded)


@dataclass(frozen=True)
class SplitRecord:
    """One reported split read back: the split, the op's GEMM as it lays it, the chip, and what moves."""

    split: Split
    b_sharded: bool
    problem: GemmProblem
    chip: GridChip
    traffic: SplitTraffic
    dram: Memory | None = field(default=None, compare=False)  # the DRAM's model (a pydantic model: not hashed)


class SplitReader:
    """Reads rows of ``Result.spatial_splits`` back for one project (the workload built once)."""

    def __init__(self, project: Project, workload: WorkloadGraph | None = None) -> None:
        """``workload``: the project's workload graph when the caller has it built (a run's plan), else
        built on first use."""
        self.project = project
        self.device = grid_device(project.hardware)
        self.dram = device_dram(self.device) if self.device is not None else None
        compute = self.device.compute if self.device is not None else None
        self.chip = grid_chip(compute, self.dram) if compute is not None else None
        self._workload = workload
        self._ops: dict[str, Op] | None = None
        self._formats: OpFormats | None = None

    @property
    def workload(self) -> WorkloadGraph:
        if self._workload is None:
            self._workload = build_workload(self.project.workload)
        return self._workload

    @property
    def ops(self) -> dict[str, Op]:
        if self._ops is None:
            self._ops = gemms_by_name(self.workload)
        return self._ops

    @property
    def formats(self) -> OpFormats:
        """The run's formats as the plan resolves them (``run_formats``)."""
        if self._formats is None:
            self._formats = run_formats(self.project, self.workload)
        return self._formats

    def record(self, op_name: str, text: str) -> SplitRecord | None:
        """The split of ``op_name`` described by ``text`` and its traffic; None if either cannot be read."""
        parsed = parse_split(text)
        if parsed is None or self.chip is None:
            return None
        op = self.ops.get(op_name)
        if op is None:
            return None
        s, sharded = parsed
        p = split_problem(self.project, op, s, sharded, self.chip.tile, self.formats)
        return SplitRecord(s, sharded, p, self.chip, gemm_traffic(self.chip, p, s), self.dram)


def with_traffic(
    project: Project, rows: list[dict[str, object]], workload: WorkloadGraph | None = None
) -> list[dict[str, object]]:
    """``rows`` (of ``spatial_splits``), each with a ``traffic`` summary where its split can be read back."""
    if not rows:
        return rows
    reader = SplitReader(project, workload)
    out = []
    for row in rows:
        rec = reader.record(str(row["op"]), str(row["split"]))
        out.append({**row, "traffic": rec.traffic.summary()} if rec is not None else dict(row))
    return out

