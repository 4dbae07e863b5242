"""2-D tensor parallelism (``mapping.tp_axes``): the tensor group as rows × cols, each collective along one axis.

tt-transformers runs Llama 70B on a Galaxy (a 4 × 8 mesh of Wormhole chips) with every weight matrix sharded
over both mesh axes (``ShardTensor2dMesh``), so each all-reduce spans one axis of the mesh (4 or 8 chips),
never all 32 — the 2-D variant of Megatron's tensor parallelism (as in SUMMA-style 2-D/2.5-D TP, Xu et al.
"Tesseract", Wang et al. "2.5-dimensional distributed model training").

Layout: rank k of the tensor group sits at (k // cols, k % cols). A column-parallel op (QKV, FF1/FF3: its
output columns split in 1-D Megatron) has its reduction dimension K split over the rows of the layout and its
output N over the columns: each device holds an M × N/cols block of partial sums, summed over the ``rows``
devices of its column — an all-reduce of 1/cols of the output along every column at once. A row-parallel op
(WO, FF2) has K over the columns and N over the rows: an all-reduce of 1/rows of the output along every row.
Each op's output is split the way the next op reads its input (N over the columns is K over the columns), so
nothing else moves. Compute and weights per device stay 1/tp of the layer, as with 1-D over tp devices; the
vocabulary-parallel embedding keeps its all-reduce over the whole group, the LM head none, as in 1-D.

The collectives ride on ``Segment.comm`` with the kind prefixed ``tp-col:`` or ``tp-row:``;
``Plan.tp_collective`` runs them on every line of that axis at once (``perf.collectives.concurrent_collective``).
Forward passes only: a training run with ``tp_axes`` is refused (``problems``).
"""

from __future__ import annotations

from tilewright.engine.errors import Problem
from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.ir.ops import Op, OpKind, TensorSplit
from tilewright.engine.ir.project import Mode, Project
from tilewright.engine.perf.collectives import Collective, concurrent_collective

COLUMN = "tp-col:"  # along a column of the layout: ``rows`` devices
ROW = "tp-row:"  # along a row: ``cols`` devices


def is_axis(kind: str) -> bool:
    return kind.startswith((COLUMN, ROW))


def axis_comm(op: Op, axes: tuple[int, int]) -> tuple[str, float]:
    """(kind, output elements per sample) of the collective after a weighted op's forward; 0 elements when
    it has none."""
    rows, cols = axes
    if op.split is TensorSplit.column:
        return COLUMN + "all-reduce", op.out_elems / cols
    if op.split is TensorSplit.row:
        return ROW + "all-reduce", op.out_elems / rows
    if op.split is TensorSplit.vocab and op.kind is OpKind.embedding:
        return "all-reduce", op.out_elems
    return "all-reduce", 0.0


def axis_groups(group: list[int], axes: tuple[int, int], kind: str) -> list[list[int]]:
    """The lines of the tensor group an axis collective runs on: its columns or its rows."""
    rows, cols = axes
    if kind.startswith(COLUMN):
        return [[group[i * cols + j] for i in range(rows)] for j in range(cols)]
    return [group[i * cols : (i + 1) * cols] for i in range(rows)]


def axis_collective(hw: HardwareGraph, group: list[int], axes: tuple[int, int], kind: str, nbytes: float) -> Collective:
    """An axis collective of ``nbytes`` per line, on every line of its axis at once."""
    base = kind.removeprefix(COLUMN).removeprefix(ROW)
    return concurrent_collective(hw, base, axis_groups(group, axes, kind), nbytes)  # type: ignore[arg-type]


def problems(project: Project) -> list[Problem]:
    """What 2-D tensor parallelism does not model: the backward's collectives, sequence parallelism."""
    m = project.mapping
    if m.tp_axes is None:
        return []
    out = []
    if project.run.mode is Mode.train:
        out.append(Problem("mapping.tp_axes", "2-D tensor parallelism is modelled for inference runs only"))
    if m.sequence_parallel:
        out.append(Problem("mapping.tp_axes", "2-D tensor parallelism does not combine with sequence_parallel"))
    return out


def notes(hw: HardwareGraph, group: list[int], axes: tuple[int, int], ops: list[Op]) -> list[str]:
    """What each collective of a layer spans: which ops reduce along which axis, over how many devices,
    carrying which fraction of their output, and the algorithm the lines run (at one token of the model's
    hidden size)."""
    rows, cols = axes
    by_kind: dict[str, list[str]] = {}
    for op in ops:
        if op.params > 0 and op.kind in (OpKind.matmul, OpKind.fc, OpKind.conv, OpKind.embedding):
            kind, elems = axis_comm(op, axes)
            if elems > 0:
                by_kind.setdefault(kind, []).append(op.name.split(".", 1)[-1])
    parts = []
    for kind, names in by_kind.items():
        if kind.startswith(COLUMN):
            where = f"along each of {cols} columns of {rows} devices, 1/{cols} of the output"
        elif kind.startswith(ROW):
            where = f"along each of {rows} rows of {cols} devices, 1/{rows} of the output"
        else:
            where = f"over all {rows * cols} devices"
        algo = axis_collective(hw, group, axes, kind, 1 << 20).algorithm if is_axis(kind) else ""
        parts.append(f"{', '.join(dict.fromkeys(names))} all-reduce {where}" + (f" ({algo} at 1 MiB)" if algo else ""))
    return [f"2-D tensor parallelism {rows} × {cols} (mapping.tp_axes): " + "; ".join(parts)]
