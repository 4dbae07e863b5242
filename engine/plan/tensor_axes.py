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

How a column-parallel op's partial sums are combined is the runtime's choice (``mapping.tp_axes_collectives``).
tt-transformers all-reduces them (models/tt_transformers/tt/attention.py and mlp.py: ``tt_all_reduce`` of the QKV
and FF1/FF3 outputs with cluster_axis=1), so every device of a column holds the whole 1/cols block. tt-metal's
own Llama 70B decode on a Galaxy (models/demos/llama3_70b_galaxy/tt/llama_attention.py, llama_mlp.py,
llama_ccl.py) reduce-scatters them instead ('scatter-gather'): QKV's partial sums reduce-scattered over the
4-chip axis straight into heads (``llama_rs_create_heads``: each device then attends for 8 of the 32 users),
the attention output all-gathered back (``all_gather_concat``) before WO; FF1 and FF3 each reduce-scattered
(FF1's inside the double matmul, ``double_matmul_line_reduce_scatter``; FF3's ``line_reduce_scatter``), the
SiLU mul run on the shards, and its product all-gathered once (``line_all_gather``, buffer BINARY_MUL) before
FF2 — two all-gathers per layer where all-reducing FF1 and FF3 would gather three times. The row-parallel ops
(WO, FF2) all-reduce along the 8-chip axis in both. Both runtimes shard the same weights over the same mesh,
so this is an option of the mapping, not what 2-D tensor parallelism always does; the compute per device is
the same either way (the model already divides attention and the element-wise ops by tp).

The collectives ride on ``Segment.comm`` with the kind prefixed ``tp-col:`` or ``tp-row:``;
``Plan.tp_collective`` runs them on every line of that axis at once (``perf.collectives.concurrent_collective``).
Forward passes only: a training run with ``tp_axes`` is refused (``problems``).
"""

from __future__ import annotations

from collections.abc import Sequence

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


def _weighted(op: Op) -> bool:
    """A weighted linear op: the ops that carry tensor-parallel collectives (as ``plan.passes`` counts them)."""
    return op.params > 0 and op.kind in (OpKind.matmul, OpKind.fc, OpKind.conv, OpKind.embedding)


def layer_comms(ops: Sequence[Op], j: int, axes: tuple[int, int], scatter: bool) -> list[tuple[str, float]]:
    """The axis collectives after op ``ops[j]`` of a layer's forward, each (kind, elements per sample of the full
    per-device buffer: an all-reduce's, a reduce-scatter's input, an all-gather's output). With ``scatter``
    ('scatter-gather') a column-parallel op reduce-scatters its 1/cols block along its column, and the op right
    before the next row-parallel op all-gathers that op's 1/cols input along the column once, whatever ran on
    the shards in between (attention, the SiLU mul of FF1 and FF3)."""
    op = ops[j]
    out: list[tuple[str, float]] = []
    if _weighted(op):
        kind, elems = axis_comm(op, axes)
        if scatter and op.split is TensorSplit.column:
            kind = COLUMN + "reduce-scatter"
        out.append((kind, elems))
    nxt = ops[j + 1] if j + 1 < len(ops) else None
    if scatter and nxt is not None and _weighted(nxt) and nxt.split is TensorSplit.row:
        last = next((o for o in reversed(ops[: j + 1]) if _weighted(o)), None)
        if last is not None and last.split is TensorSplit.column:  # its output is still scattered
            out.append((COLUMN + "all-gather", nxt.in_elems / axes[1]))
    return out


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
    """What 2-D tensor parallelism does not model: the backward's collectives, sequence parallelism.
    ``tp_axes_collectives`` without ``tp_axes`` is not refused: a mapping derived at another tp (``--tp``, the
    search, serving instances) drops a layout that no longer fits (``ir.mapping.tp_axes_for``) and runs 1-D,
    whose collectives it leaves alone."""
    m = project.mapping
    if m.tp_axes is None:
        return []
    out = []
    if project.run.mode is Mode.train:
        out.append(Problem("mapping.tp_axes", "2-D tensor parallelism is modelled for inference runs only"))
    if m.sequence_parallel:
        out.append(Problem("mapping.tp_axes", "2-D tensor parallelism does not combine with sequence_parallel"))
    return out


def notes(
    hw: HardwareGraph, group: list[int], axes: tuple[int, int], ops: list[Op], scatter: bool = False
) -> list[str]:
    """What each collective of a layer spans: which ops reduce (or, with ``scatter``, reduce-scatter and
    gather) along which axis, over how many devices, carrying which fraction of their output, and the
    algorithm the lines run for a 1 MiB message (a decode step's smaller messages may pick another: the
    pass times each at its own size)."""
    rows, cols = axes
    by_kind: dict[str, list[str]] = {}
    for layer in dict.fromkeys(op.layer for op in ops):
        members = [op for op in ops if op.layer == layer]
        for j, op in enumerate(members):
            for kind, elems in layer_comms(members, j, axes, scatter):
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
        verb = kind.removeprefix(COLUMN).removeprefix(ROW)
        if verb == "all-gather":
            where = where.replace("of the output", "of the next row-parallel op's input")
        parts.append(f"{', '.join(dict.fromkeys(names))} {verb} {where}" + (f" ({algo} at 1 MiB)" if algo else ""))
    return [f"2-D tensor parallelism {rows} × {cols} (mapping.tp_axes): " + "; ".join(parts)]
