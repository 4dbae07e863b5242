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
'all-reduce' (the default) all-reduces each of them, so every device of a column holds the whole 1/cols block: the
outline of tt-transformers' TG code (``tt_all_reduce`` of the QKV and FF1/FF3 outputs with cluster_axis=1), whose
actual calls are the 'tt-transformers' mode below. tt-metal's
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

tt-transformers' own TG code (the legacy ``ttnn.all_gather`` / ``ttnn.reduce_scatter`` era of its PERF.md rows;
models/tt_transformers/tt/ccl.py, distributed_norm.py, attention.py ``forward_decode``, mlp.py ``forward``, their
``if TG`` branches) is neither: 'tt-transformers' charges the calls it makes (``_tt_comms``). Every distributed norm
all-gathers its statistics (one tile of columns per device) along the 4-chip axis (``tt_sharded_distributed_rmsnorm``);
``tt_all_reduce`` without ``use_composite`` gathers every device's partial sums (all-gather on dim 0, then a local
``fast_reduce_nc``), with it reduce-scatters then all-gathers. QKV always gathers its partial sums; the attention
output is all-gathered over the users along the 4-chip axis before WO (each device of a column attended for a quarter
of them, ``tt_all_gather(attn_output_cat, dim=2, cluster_axis=1)``). At hidden 8192 (``self.dim == 8192``) WO and
FF2 reduce-scatter then all-gather along the 8-chip axis, FF1 and FF3 are each reduce-scattered and their SiLU product
all-gathered once; below it WO, FF2, FF1 and FF3 each gather their partial sums (``dim=0 if TG and hidden < 8192``,
``use_composite=True if hidden == 8192``; mlp.py's ``else: tt_all_reduce(w1_out, cluster_axis=1)``). Its decode
pads the users to whole tiles of rows (``tile_rows``). Its prefill (one user) gathers no users, gathers WO's partial
sums at every hidden size and reduce-scatters FF1 and FF3 at every hidden size (``or mode == "prefill"``). Its
embedding makes no collective (embedding.py: the table split over the hidden, each device looking up its own
columns of the residual). Which format each message travels in is the mapping's
(``mapping.formats.collectives_by_op``), as for the other modes.

The collectives ride on ``Segment.comm`` with the kind prefixed ``tp-col:`` or ``tp-row:``;
``Plan.tp_collective`` runs them on every line of that axis at once (``perf.collectives.concurrent_collective``).
Forward passes only: a training run with ``tp_axes`` is refused (``problems``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

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


Collectives = Literal["all-reduce", "scatter-gather", "tt-transformers"]  # mapping.tp_axes_collectives
TT_COMPOSITE_HIDDEN = 8192  # tt-transformers reduce-scatters + gathers (use_composite) at exactly this hidden size


def tile_rows(rows: float, tile: int) -> float:
    """Rows a tiled runtime moves for ``rows`` rows of activations: whole tiles (tt-transformers' decode pads its
    users to 32 rows, ``nearest_32``; a batch-1 step sends a full tile)."""
    return math.ceil(rows / tile) * tile if tile > 1 and rows > 0 else rows


def layer_comms(
    ops: Sequence[Op], j: int, axes: tuple[int, int], mode: Collectives = "all-reduce", tile: int = 1,
    decode: bool = True, tokens: float = 0.0,
) -> list[tuple[str, float]]:
    """The axis collectives after op ``ops[j]`` of a layer's forward, each (kind, elements per sample of the full
    per-device buffer: an all-reduce's, a reduce-scatter's input, an all-gather's output). With 'scatter-gather'
    a column-parallel op reduce-scatters its 1/cols block along its column, and the op right before the next
    row-parallel op all-gathers that op's 1/cols input along the column once, whatever ran on the shards in
    between (attention, the SiLU mul of FF1 and FF3). 'tt-transformers': ``_tt_comms`` (``tile``: the edge of the
    device's tiles, the width of a norm's statistics; ``decode``: a decode step's calls, else a prefill's;
    ``tokens``: token rows per sample where the layer's GEMMs do not say, else 0)."""
    if mode == "tt-transformers":
        return _tt_comms(ops, j, axes, tile, decode, tokens)
    scatter = mode == "scatter-gather"
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


def _attended(ops: Sequence[Op], j: int) -> bool:
    """An attention op runs between the last weighted op before ``ops[j]`` and ``ops[j]`` itself (included)."""
    since = next((i for i in range(j - 1, -1, -1) if _weighted(ops[i])), -1)
    return any(o.kind is OpKind.attention for o in ops[since + 1 : j + 1])


def _tt_comms(
    ops: Sequence[Op], j: int, axes: tuple[int, int], tile: int, decode: bool, tokens: float = 0.0
) -> list[tuple[str, float]]:
    """The collectives tt-transformers' TG code makes after ``ops[j]`` (module docstring) in a decode step
    (``decode``) or a prefill, each (kind, elements per sample of the per-device buffer: a reduce-scatter's input,
    an all-gather's output). Its prefill differs from its decode in two places: the MLP reduce-scatters FF1 and
    FF3 at every hidden size (``if self.dim == 8192 or mode == "prefill"``), and WO's partial sums are gathered
    (``dim=0 if self.TG``, no ``use_composite``) with no users' gather before it (one user per prefill)."""
    rows, cols = axes
    op = ops[j]
    row_ops = [o for o in ops if _weighted(o) and o.split is TensorSplit.row and o.gemm is not None]
    composite = bool(row_ops) and row_ops[0].gemm[1] == TT_COMPOSITE_HIDDEN  # type: ignore[index]
    scatter_mlp = composite or not decode
    nxt = ops[j + 1] if j + 1 < len(ops) else None
    out: list[tuple[str, float]] = []
    if op.kind is OpKind.norm:  # its statistics, one tile of columns per device and row (tt_*distributed_rmsnorm)
        per_sample = tokens or next((o.gemm[0] for o in ops if o.gemm is not None), 1)  # rows per sample
        out.append((COLUMN + "all-gather", float(per_sample * tile * rows)))
    elif _weighted(op) and op.split is TensorSplit.column:
        block = op.out_elems / cols
        qkv = nxt is not None and nxt.kind is OpKind.attention
        if scatter_mlp and not qkv:  # FF1, FF3: ttnn.reduce_scatter
            out.append((COLUMN + "reduce-scatter", block))
        else:  # QKV always, FF1/FF3 below 8192: tt_all_reduce's all-gather of the partial sums (then summed)
            out.append((COLUMN + "all-gather", block * rows))
    elif _weighted(op) and op.split is TensorSplit.row:
        block = op.out_elems / rows
        if composite and (decode or not _attended(ops, j)):  # use_composite: reduce-scatter, then all-gather
            out += [(ROW + "reduce-scatter", block), (ROW + "all-gather", block)]
        else:
            out.append((ROW + "all-gather", block * cols))
    # the embedding: none (embedding.py splits the table over the hidden, ShardTensor2dMesh dims (None, 3): each
    # device looks up its own columns of the residual); the LM head: none, as in the other modes
    if nxt is not None and _weighted(nxt) and nxt.split is TensorSplit.row:
        if _attended(ops, j):
            if decode:  # the users each device of a column attended for (tt_all_gather, dim 2), after attention
                out.append((COLUMN + "all-gather", nxt.in_elems / cols * rows))  # (and its softmax, unfused)
        elif scatter_mlp:  # SiLU(FF1) x FF3 on the reduce-scattered shards, gathered once (ttnn.all_gather(w2_in))
            out.append((COLUMN + "all-gather", nxt.in_elems / cols))
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
    hw: HardwareGraph, group: list[int], axes: tuple[int, int], ops: list[Op], mode: Collectives = "all-reduce",
    tile: int = 1,
) -> list[str]:
    """What each collective of a layer spans: which ops reduce (or, by ``mode``, reduce-scatter and gather)
    along which axis, over how many devices, carrying which fraction of their output, and the algorithm the
    lines run for a 1 MiB message (a decode step's smaller messages may pick another: the pass times each at its
    own size)."""
    rows, cols = axes
    by_kind: dict[str, list[str]] = {}
    for layer in dict.fromkeys(op.layer for op in ops):
        members = [op for op in ops if op.layer == layer]
        for j, op in enumerate(members):
            for kind, elems in layer_comms(members, j, axes, mode, tile):
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
        if mode == "tt-transformers":  # gathers of statistics, partial sums, users: no one fraction
            where = where.split(", 1/")[0]
        elif verb == "all-gather":
            where = where.replace("of the output", "of the next row-parallel op's input")
        parts.append(f"{', '.join(dict.fromkeys(names))} {verb} {where}" + (f" ({algo} at 1 MiB)" if algo else ""))
    return [f"2-D tensor parallelism {rows} × {cols} (mapping.tp_axes): " + "; ".join(parts)]
