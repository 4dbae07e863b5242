"""One Llama 3.1 70B decoder layer at batch 32 on a Wormhole Galaxy: the engine's op times beside tt-metal's
published per-op decode targets, so that whoever reads it sees which term is off.

Published: the targets ``models/demos/llama3_70b_galaxy/tests/test_decoder_device_perf.py::test_llama_TG_perf_device``
checks its traced decode against (``decoder_perf_targets_6u.json`` and ``_4u.json``, ``TARGETS_SOURCE``): per
device, the average over decoder layers 2-9 of a 10-layer model at batch 32, decoding at position 127 (128 keys),
in ``LlamaOptimizations.performance``, of each program's device kernel duration and its op-to-op gap (the time from
the previous program's end to its start), in ns. Sixteen programs per layer; a ``Matmul_RS`` is the FF1 and FF3
matmuls of one double-matmul program fused with FF1's reduce-scatter. A check of where the model stands, never a
fit: no preset constant is derived from these rows.

Ours: each op of one layer of the ``wormhole-galaxy-llama3-70b-inference`` decode step at 128 keys, costed alone
as the plan costs it (``op`` = its kernel and the runtime's further programs, ``Compute.programs_by_op``; ``CCL`` =
the tensor-parallel collective after it, ``Plan.tp_time``), twice: with the project's runtime (models/demos/
llama3_70b_galaxy: prefetched weights, its programs per op, persistent collectives) and as tt-transformers runs it
(``Config.tt_transformers`` of ``calibrate_tiled_llm``: the system's programs, DRAM-interleaved weights, ttnn's
generic collectives). The published programs are grouped into
the model's terms (``TERMS``): a collective the runtime splits into a reduce-scatter and an all-gather around
other programs (QKV's reduce before the heads, FF1/FF3's before the SiLU mul) is compared with the all-reduce the
model runs.

Collectives, op by op (``CCL_OPS``): each published CCL program beside our time for the same collective (kind,
mesh axis, message) on the project's plan, with the runtime's persistent collectives (``Compute.runtime_ccl``,
the preset) and with ttnn's generic ones (the system as tt-transformers runs it). The messages are derived from
the implementation at batch 32 (models/demos/llama3_70b_galaxy/tt/llama_attention.py, llama_mlp.py, llama_ccl.py),
in the dtype the runtime sends (its matmul outputs and persistent buffers: bfloat8_b for WO, FF1, FF3 and FF2,
bfloat16 for QKV and the attention output); the table also prints the model's own collectives of that op in
its step: the preset reduce-scatters and all-gathers as the runtime does (``mapping.tp_axes_collectives``
'scatter-gather') in the runtime's formats (``mapping.formats.collectives_by_op``), tt-transformers makes the calls
of its TG code (``mapping.tp_axes_collectives`` 'tt-transformers', ``TT_TG_CALLS`` at batch 1).

tt-transformers' own decode collectives on the Galaxy (``TT_TG_CALLS``, ``tt_tg_report``: the batch-1 row of its
PERF.md, printed by calibrate_tiled_llm) are listed call by call from its TG code, each costed by the model, beside
the legacy (EDM) all-gathers of decode tensors measured on a T3K (``LEGACY_T3K_ALL_GATHERS``).

Usage: python benchmarks/tiled_galaxy_ops.py (also printed by benchmarks/calibrate_tiled_llm.py)
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from tilewright.engine.ir.common import DType, dtype_bytes
from tilewright.engine.ir.ops import Op
from tilewright.engine.ir.project import Project
from tilewright.engine.perf.formats import message_bytes
from tilewright.engine.perf.op_cost import runtime_programs, runtime_programs_extra
from tilewright.engine.plan.inference_phases import decode_context, prefetch_stream_s, sampling_tile, step_formats
from tilewright.engine.plan.passes import PassContext, axis_rows, forward_pass
from tilewright.engine.plan.tensor_axes import COLUMN, ROW, layer_comms
from tilewright.engine.simulate import make_plan
from tilewright.engine.workloads.transformer_inference import inference_graph

TARGETS_SOURCE = (
    "tenstorrent/tt-metal models/demos/llama3_70b_galaxy/tests/decoder_perf_targets_6u.json and "
    "decoder_perf_targets_4u.json @02cd859b (loaded by tests/test_decoder_device_perf.py, load_perf_targets; "
    "'decoder' section: kernel_duration and op_to_op, ns, mid-layer averages)"
)
KEYS = 128  # the targets' start_pos 127: the step attends over 128 keys
BATCH = 32


@dataclass(frozen=True)
class Target:
    """One program of the published decoder layer: its op code in the profiler log, the test's name for it,
    and (kernel, op-to-op) in ns on a 6U and on a 4U Galaxy."""

    code: str
    name: str
    six_u: tuple[float, float]
    four_u: tuple[float, float]

    def us(self, galaxy: str) -> float:
        """Kernel plus op-to-op, µs."""
        k, o = self.six_u if galaxy == "6U" else self.four_u
        return (k + o) / 1e3


# In the order the layer runs them (llama_decoder.py, llama_attention.py, llama_mlp.py). @02cd859b.
TARGETS = (
    Target("RMSAllGather_0", "RMS_0", (16719.6, 770.5), (19188.9, 853.3)),
    Target("Matmul_0", "QKV_MM", (7082.5, 758.6), (7886.7, 889.2)),
    Target("LlamaReduceScatterCreateHeadsDeviceOperation_0", "LlamaReduceScatterCreateHeads", (8010.6, 867.9),
           (9728.6, 867.5)),
    Target("RotaryEmbeddingLlamaFusedQK_0", "RotaryEmbeddingLlamaFusedQK", (2234.2, 726.8), (2492.6, 874.0)),
    Target("PagedUpdateCacheDeviceOperation_0", "PagedUpdateCache", (4451.9, 737.1), (5097.3, 853.3)),
    Target("ScaledDotProductAttentionDecode_0", "SDPA", (9183.5, 625.3), (10201.1, 679.4)),
    Target("AllGatherConcat_0", "AllGatherConcat", (8411.8, 770.5), (10079.0, 723.1)),
    Target("Matmul_1", "DO_MM", (7701.1, 598.9), (8588.2, 672.5)),
    Target("AllReduceAsync_0", "AllReduceAsync_DO", (13299.6, 706.1), (19107.1, 727.9)),
    Target("RMSAllGather_1", "RMS_1", (16346.5, 740.5), (18838.1, 828.7)),
    Target("Matmul_RS_0", "Matmul_FF3_ReduceScatter_FF1", (17497.7, 723.4), (20958.1, 768.6)),
    Target("LlamaReduceScatterDeviceOperation_0", "ReduceScatter_FF3", (7218.6, 698.4), (9457.0, 911.3)),
    Target("BinaryDeviceOperation_0", "Binary_Mult_Silu", (2374.4, 717.1), (2905.4, 768.3)),
    Target("AllGatherAsync_0", "AllGatherAsync_Binary_Mult", (7083.9, 820.4), (9380.9, 906.3)),
    Target("Matmul_2", "FF2_MM", (13973.2, 652.2), (14981.6, 726.9)),
    Target("AllReduceAsync_1", "AllReduceAsync_FF2", (13440.6, 728.6), (18900.4, 679.9)),
)


@dataclass(frozen=True)
class Term:
    """A term of the layer: the published programs that do it and the model's ops (their kernels and
    programs) and collectives (``ccl``: the ops whose collective it is)."""

    label: str
    targets: tuple[str, ...]  # Target.name
    ops: tuple[str, ...] = ()
    ccl: tuple[str, ...] = ()
    note: str = ""


TERMS = (
    Term("norms (+ residual adds)", ("RMS_0", "RMS_1"), ("norm1", "norm2", "residual1", "residual2"),
         ccl=("norm1", "norm2"), note="the published norm takes the residual and all-gathers its statistics"),
    Term("QKV matmul", ("QKV_MM",), ("qkv",)),
    Term("attention: rotary, cache update, SDPA", ("RotaryEmbeddingLlamaFusedQK", "PagedUpdateCache", "SDPA"),
         ("attention", "softmax")),
    Term("dense out (WO) matmul", ("DO_MM",), ("out_proj",)),
    Term("FF1 + FF3 matmuls", ("Matmul_FF3_ReduceScatter_FF1",), ("mlp_up", "mlp_gate"),
         note="published: one program, FF1's reduce-scatter fused in"),
    Term("SiLU mul", ("Binary_Mult_Silu",), ("activation",)),
    Term("FF2 matmul", ("FF2_MM",), ("mlp_down",)),
    Term("CCL on the 4-chip axis (QKV, FF1, FF3)",
         ("LlamaReduceScatterCreateHeads", "AllGatherConcat", "ReduceScatter_FF3", "AllGatherAsync_Binary_Mult"),
         ccl=("qkv", "attention", "mlp_up", "mlp_gate", "activation"),
         note="published: reduce-scatter + all-gather; FF1's RS inside Matmul_RS"),
    Term("CCL on the 8-chip axis (WO, FF2)", ("AllReduceAsync_DO", "AllReduceAsync_FF2"),
         ccl=("out_proj", "mlp_down")),
)


@dataclass(frozen=True)
class CclOp:
    """One published CCL program as the model would cost it: the collective ``kind`` along ``axis`` (``COLUMN``:
    the 4-chip axis, cluster_axis 1; ``ROW``: the 8-chip axis, cluster_axis 0) of a full tensor of ``BATCH`` rows
    × ``cols`` in ``dtype`` (an all-reduce's input and output, a reduce-scatter's input, an all-gather's output,
    per device), the model op whose collective it is (``op``: ours at the model's own bytes), and where the
    size comes from. ``fused``: the published program also runs matmuls (its time is not the collective's
    alone)."""

    target: str  # Target.name
    axis: str
    kind: str
    cols: int
    dtype: DType
    op: str
    source: str
    fused: bool = False

    @property
    def nbytes(self) -> float:
        return BATCH * self.cols * dtype_bytes(self.dtype)


# Llama 3.1 70B (hidden 8192, 64 query and 8 KV heads of 128, FFN 28672) on the 8 x 4 mesh: weights split K over
# one axis and N over the other (llama_attention.py, llama_mlp.py, dims (-1, -2) / (-2, -1)).
CCL_OPS = (
    CclOp("LlamaReduceScatterCreateHeads", COLUMN, "reduce-scatter", 1280, DType.bf16, "qkv",
          "QKV output 10240 / 8 = 1280 columns (8 Q, 1 K, 1 V heads of 128), bf16 (llama_rs_create_heads' "
          "interim buffer is bfloat16), scattered over 4: 8 users each"),
    CclOp("AllGatherConcat", COLUMN, "all-gather", 1024, DType.bf16, "attention",
          "SDPA output of 8 users x 8 heads x 128 per device, gathered to 32 users x 1024 (all_gather_concat, "
          "bf16); the model's after attention with tp_axes_collectives scatter-gather, none with all-reduce"),
    CclOp("AllReduceAsync_DO", ROW, "all-reduce", 2048, DType.bfp8, "out_proj",
          "WO output 8192 / 4 = 2048 columns, bfloat8_b (the matmul's dtype and the persistent buffer's)"),
    CclOp("Matmul_FF3_ReduceScatter_FF1", COLUMN, "reduce-scatter", 3584, DType.bfp8, "mlp_gate",
          "FF1 output 28672 / 8 = 3584 columns, bfloat8_b, reduce-scattered inside the double matmul "
          "(llama_rs_matmul)", fused=True),
    CclOp("ReduceScatter_FF3", COLUMN, "reduce-scatter", 3584, DType.bfp8, "mlp_up",
          "FF3 output 3584 columns, bfloat8_b (llama_reduce_scatter)"),
    CclOp("AllGatherAsync_Binary_Mult", COLUMN, "all-gather", 3584, DType.bfp8, "activation",
          "SiLU(FF1) x FF3 of 896 columns per device gathered to 3584, bfloat8_b (all_gather_async, buffer "
          "BINARY_MUL); the model's after the SiLU mul with scatter-gather; with all-reduce FF1 and FF3 are "
          "all-reduced instead, each with its own gather"),
    CclOp("AllReduceAsync_FF2", ROW, "all-reduce", 2048, DType.bfp8, "mlp_down",
          "FF2 output 8192 / 4 = 2048 columns, bfloat8_b"),
)


@dataclass(frozen=True)
class CclRow:
    """Our cost of one ``CclOp`` on one project's plan: at the runtime's bytes (algorithm, µs) and at the
    model's own bytes (its op's collective; None where the model has none)."""

    algorithm: str
    us: float
    model_us: float | None


def ccl_rows(project: Project, batch: int = BATCH) -> list[CclRow]:
    """Each ``CCL_OPS`` entry costed as ``Plan.tp_time`` costs a tensor-parallel collective of ``project``."""
    inf = project.run.inference.model_copy(update={"batch": batch})
    plan = make_plan(project.model_copy(update={"run": project.run.model_copy(update={"inference": inf})}))
    rows, _ = layer_rows(project, batch=batch)
    by = {r.name: r for r in rows}
    out = []
    for c in CCL_OPS:
        coll = plan.tp_collective(0, 0, c.axis + c.kind, c.nbytes)
        model = by[c.op].ccl_s * 1e6 if c.op in by and by[c.op].ccl else None
        out.append(CclRow(coll.algorithm, coll.time(plan.hw) * 1e6, model))
    return out


def ccl_report(variants: list[tuple[str, Project]]) -> None:
    """Print the published CCL programs beside our collectives, op by op."""
    costed = [(label.split(" runtime")[0], ccl_rows(p)) for label, p in variants]
    by = {t.name: t for t in TARGETS}
    print("\nCollectives op by op (kernel + op-to-op, us): ours is the same collective at the runtime's message, "
          "[in brackets: the model op's own collectives in the step, as the project runs them: "
          "mapping.tp_axes_collectives, in mapping.formats.collectives*]")
    head = "".join(f" {label:>40s}" for label, _ in costed)
    print(f"  {'published program':30s} {'axis':>4s} {'kind':>14s} {'message':>10s} {'6U':>6s} {'4U':>6s}{head}")
    for i, c in enumerate(CCL_OPS):
        t = by[c.target]
        axis = "4" if c.axis == COLUMN else "8"
        cells = ""
        for _, rows in costed:
            r = rows[i]
            model = f" [{r.model_us:5.1f}]" if r.model_us is not None else " " * 8
            cells += f" {r.us:6.1f}{model} {r.algorithm[:24]:>24s}"
        flag = " (fused with FF1+FF3)" if c.fused else ""
        print(f"  {c.target:30s} {axis:>4s} {c.kind:>14s} {c.nbytes / 1024:7.1f} KiB {t.us('6U'):6.1f} "
              f"{t.us('4U'):6.1f}{cells}{flag}")
    for c in CCL_OPS:
        print(f"    {c.target}: {c.source}")
    print("  6U runs rings with 4 links per axis, 4U lines with 3 (model_config.py: GALAXY_NUM_LINKS {'6U': 4, "
          "'4U': 3}, CCL_TOPOLOGY Ring / Linear); the preset is an open 4 x 8 mesh (lines) with 3 links along the "
          "4-chip axis and 4 along the 8-chip one.")


@dataclass(frozen=True)
class OpRow:
    """One model op of the layer: its time (kernel and further programs), the further programs' part, the
    programs it counts, its collective, and how the grid ran it."""

    name: str
    op_s: float
    extra_s: float
    programs: int
    ccl_s: float
    ccl: str
    split: str


def op_comms(ctx: PassContext, ops: list[Op], j: int) -> list[tuple[str, float]]:
    """The 2-D tensor-parallel collectives the layer's forward runs after ``ops[j]`` (kind, bytes per device), as
    ``forward_pass`` sizes them: which ones from the layer around the op (``tensor_axes.layer_comms``: an
    all-gather waits for the next row-parallel op), each of elements × sequences × its collective format."""
    axes = ctx.tp_axes
    assert axes is not None
    return [(kind, elems * axis_rows(ctx) * ctx.micro_batch * message_bytes(ctx.formats, ops[j].name, ctx.elem_bytes))
            for kind, elems in layer_comms(ops, j, axes, ctx.tp_axes_collectives, ctx.tp_tile, ctx.tp_decode)]


def layer_rows(project: Project, keys: int = KEYS, batch: int = BATCH) -> tuple[list[OpRow], float]:
    """The ops of one decoder layer of ``project``'s decode step (``batch`` sequences over ``keys`` keys),
    each costed alone as ``forward_pass`` costs it in the step, and the layer's prefetch stream (s; 0 without
    a prefetcher)."""
    inf = project.run.inference.model_copy(update={"batch": batch})
    plan = make_plan(project.model_copy(update={"run": project.run.model_copy(update={"inference": inf})}))
    dev = plan.stages[0].dev
    graph = inference_graph(project.workload, 1, keys, batch, True, sampling_tile(dev.compute))
    ctx = decode_context(plan, 0, batch)
    layer = graph.block_layers[len(graph.block_layers) // 2]
    ops = graph.layer_ops(layer)
    rows = []
    for j, op in enumerate(ops):
        ps = forward_pass([[op]], ctx)
        busy = sum(s.busy_s for s in ps.segments)
        comms = op_comms(ctx, ops, j) if ctx.tp_axes is not None else [s.comm for s in ps.segments if s.comm]
        ccl = sum(plan.tp_time(0, 0, kind, nbytes) for kind, nbytes in comms)
        rows.append(OpRow(op.name.split(".", 1)[-1], busy, max(0.0, runtime_programs_extra(op, dev.compute)),
                          runtime_programs(op, dev.compute), ccl, ", ".join(k for k, _ in comms),
                          "; ".join(str(d).split(": ", 1)[-1] for d in ps.dataflows)))
    return rows, prefetch_stream_s(plan, 0, ops, batch, step_formats(plan))


def term_us(term: Term, rows: list[OpRow]) -> float:
    """The model's time of a term, µs: its ops' times and its collectives."""
    by = {r.name: r for r in rows}
    return 1e6 * (sum(by[o].op_s for o in term.ops if o in by) + sum(by[o].ccl_s for o in term.ccl if o in by))


def published_us(term: Term, galaxy: str) -> float:
    by = {t.name: t for t in TARGETS}
    return sum(by[n].us(galaxy) for n in term.targets)


def projects() -> list[tuple[str, Project]]:
    """The Galaxy project as its preset runs it (llama3_70b_galaxy) and as tt-transformers does."""
    from calibrate_tiled_llm import CONFIGS, configured  # the same configurations as the decode table

    galaxy = [c for c in CONFIGS if c.project.startswith("wormhole-galaxy") and c.batch == BATCH][0]
    tt = [c for c in CONFIGS if c.project.startswith("wormhole-galaxy") and c.tt_transformers][0]
    return [("llama3_70b_galaxy runtime (the preset)", configured(galaxy)),
            ("tt-transformers runtime", configured(tt, batch=BATCH))]


def report() -> None:
    """Print the published programs, each variant's ops, and the terms side by side."""
    print(f"Published decode programs of one Llama 3.1 70B layer on a Wormhole Galaxy, batch {BATCH}, {KEYS} keys")
    print("(kernel + op-to-op, us):")
    for t in TARGETS:
        print(f"  {t.name:30s} 6U {t.six_u[0] / 1e3:6.2f} + {t.six_u[1] / 1e3:4.2f}   4U {t.four_u[0] / 1e3:6.2f} + "
              f"{t.four_u[1] / 1e3:4.2f}   [{t.code}]")
    print(f"  layer: 6U {sum(t.us('6U') for t in TARGETS):.1f} us, 4U {sum(t.us('4U') for t in TARGETS):.1f} us; "
          f"source: {TARGETS_SOURCE}")
    variants = [(label, *layer_rows(p)) for label, p in projects()]
    for label, rows, stream in variants:
        print(f"\nModel ops, {label} (op = kernel + further programs; us):")
        for r in rows:
            ccl = f"  CCL {r.ccl_s * 1e6:6.2f} ({r.ccl})" if r.ccl else ""
            print(f"  {r.name:12s} op {r.op_s * 1e6:6.2f} (programs {r.programs}, further {r.extra_s * 1e6:5.2f})"
                  f"{ccl}  {r.split}")
        total = sum(r.op_s + r.ccl_s for r in rows)
        extra = f"; weights' prefetch stream {stream * 1e6:.1f} us (a floor on the layer)" if stream else ""
        print(f"  layer {total * 1e6:.1f} us{extra}")
    print(f"\n{'term':42s} {'6U':>7s} {'4U':>7s}" + "".join(f" {label.split(' runtime')[0]:>18s}"
                                                          for label, _, _ in variants) + "  (us)")
    for term in TERMS:
        cells = "".join(f" {term_us(term, rows):18.1f}" for _, rows, _ in variants)
        note = f"  {term.note}" if term.note else ""
        print(f"{term.label:42s} {published_us(term, '6U'):7.1f} {published_us(term, '4U'):7.1f}{cells}{note}")
    tot = "".join(f" {sum(r.op_s + r.ccl_s for r in rows) * 1e6:18.1f}" for _, rows, _ in variants)
    print(f"{'layer':42s} {sum(t.us('6U') for t in TARGETS):7.1f} {sum(t.us('4U') for t in TARGETS):7.1f}{tot}")
    ccl_report(projects())


# --- tt-transformers on the Galaxy (the batch-1 row of PERF.md) ------------------------------------------------

TT_TG_SOURCE = (
    "tenstorrent/tt-metal models/tt_transformers/tt/ccl.py (tt_all_reduce's TG branch: ttnn.all_gather of every "
    "partial sum then ttnn.experimental.fast_reduce_nc, or with use_composite ttnn.reduce_scatter then "
    "ttnn.all_gather; tt_sharded_distributed_rmsnorm: ttnn.all_gather of the statistics, cluster_axis 1; "
    "Topology.Linear), attention.py forward_decode and mlp.py forward (their 'if self.TG' branches), "
    "distributed_norm.py (TG decode: tt_sharded_distributed_rmsnorm), all of the legacy ttnn.all_gather / "
    "ttnn.reduce_scatter era of PERF.md's TG rows"
)


@dataclass(frozen=True)
class TgCall:
    """One collective call of a tt-transformers decoder layer on the Galaxy (hidden 8192): ``kind`` along ``axis``
    of a tensor of ``rows`` (tile-padded) × ``cols`` in ``dtype`` (an all-gather's output, a reduce-scatter's
    input, per device, as ``CclOp``), and where it is in the code."""

    what: str
    axis: str
    kind: str
    rows: int
    cols: int
    dtype: DType
    code: str

    @property
    def nbytes(self) -> float:
        return self.rows * self.cols * dtype_bytes(self.dtype)


# Llama 3.1 70B on the 8 x 4 mesh (cluster_axis 0: the 8-chip axis, ROW; 1: the 4-chip axis, COLUMN), batch 1 padded
# to one 32-row tile. bfloat8_b where the code passes ccl_dtype or the matmul's bfloat8_b output.
TT_TG_CALLS = (
    TgCall("attention norm statistics", COLUMN, "all-gather", 32, 4 * 32, DType.bf16,
           "distributed_norm.py -> ccl.tt_sharded_distributed_rmsnorm: ttnn.all_gather(stats, 3, cluster_axis=1)"),
    TgCall("QKV partial sums (all-reduce)", COLUMN, "all-gather", 4 * 32, 1280, DType.bfp8,
           "attention.py: tt_all_reduce(xqkv, cluster_axis=1, dim 0, dtype=ccl_dtype): all_gather + fast_reduce_nc"),
    TgCall("attention output, users", COLUMN, "all-gather", 4 * 32, 1024, DType.bf16,
           "attention.py: tt_all_gather(attn_output_cat, dim=2, cluster_axis=1) (bf16: 'Running bf16 until ...')"),
    TgCall("WO partial sums: reduce-scatter", ROW, "reduce-scatter", 32, 2048, DType.bfp8,
           "attention.py: tt_all_reduce(dense_out, cluster_axis=0, dim=3, use_composite=True for hidden 8192)"),
    TgCall("WO partial sums: all-gather", ROW, "all-gather", 32, 2048, DType.bfp8, "the same tt_all_reduce"),
    TgCall("FFN norm statistics", COLUMN, "all-gather", 32, 4 * 32, DType.bf16, "as the attention norm"),
    TgCall("FF1 output: reduce-scatter", COLUMN, "reduce-scatter", 32, 3584, DType.bfp8,
           "mlp.py (TG, dim 8192): ttnn.reduce_scatter(w1_out, dim=3, cluster_axis=1)"),
    TgCall("FF3 output: reduce-scatter", COLUMN, "reduce-scatter", 32, 3584, DType.bfp8,
           "mlp.py: ttnn.reduce_scatter(w3_out, dim=3, cluster_axis=1, num_links=1)"),
    TgCall("SiLU(FF1) x FF3: all-gather", COLUMN, "all-gather", 32, 3584, DType.bfp8,
           "mlp.py: ttnn.all_gather(w2_in, 3, cluster_axis=1)"),
    TgCall("FF2 partial sums: reduce-scatter", ROW, "reduce-scatter", 32, 2048, DType.bfp8,
           "mlp.py: tt_all_reduce(w2_out, cluster_axis=0, dim=3, use_composite=True)"),
    TgCall("FF2 partial sums: all-gather", ROW, "all-gather", 32, 2048, DType.bfp8, "the same tt_all_reduce"),
)

# The legacy (Erisc Data Mover) all-gathers of decode-sized tensors on a T3K (8 Wormhole chips, 1 link), with the
# times the fabric port had to match: tenstorrent/tt-metal issues #18807 and #18808 (2025-03-07, 'Perf Target [ns]'
# of each model's case); #18709 (the port's master issue: legacy CCLs launch the EDM on the Ethernet cores at every
# invocation, with 'implicit cross-chip barriers every CCL op launch and teardown'; the port aims at 'performance at
# parity or better than before'). (label, all-gather output bytes per device, measured µs low-high, source)
LEGACY_T3K_ALL_GATHERS = (
    ("Llama decode, [1,1,32,1024] -> [1,1,32,8192] bf16", 32 * 8192 * 2, (70.0, 75.0), "issue #18807"),
    ("Mixtral decode, [1,1,32,4096] -> [1,1,256,4096] bfp8", 256 * 4096 * dtype_bytes(DType.bfp8), (60.0, 70.0),
     "issue #18808"),
)


def tt_tg_call_rows(project: Project) -> list[tuple[TgCall, float, str]]:
    """Each ``TT_TG_CALLS`` collective costed as ``Plan.tp_collective`` costs a tensor-parallel collective of
    ``project`` (seconds and the algorithm chosen)."""
    plan = make_plan(project)
    out = []
    for c in TT_TG_CALLS:
        coll = plan.tp_collective(0, 0, c.axis + c.kind, c.nbytes)
        out.append((c, coll.time(plan.hw), coll.algorithm))
    return out


def plan_layer_comms(project: Project, batch: int = 1) -> list[tuple[str, float]]:
    """(kind, bytes per device) of every 2-D tensor-parallel collective the plan charges one decoder layer of
    ``project``'s decode step of ``batch`` sequences, in order, as ``forward_pass`` sizes them (``op_comms``)."""
    inf = project.run.inference.model_copy(update={"batch": batch})
    plan = make_plan(project.model_copy(update={"run": project.run.model_copy(update={"inference": inf})}))
    graph = inference_graph(project.workload, 1, KEYS, batch, True, sampling_tile(plan.stages[0].dev.compute))
    ops = graph.layer_ops(graph.block_layers[len(graph.block_layers) // 2])
    ctx = decode_context(plan, 0, batch)
    return [c for j in range(len(ops)) for c in op_comms(ctx, ops, j)]


def tt_tg_launch_s(project: Project) -> float:
    """The launches of one layer's ``TT_TG_CALLS`` on ``project``'s fabric (s): each call's kind at the system's
    per-kind launch (``CollectiveCosts.launch_s_by_kind``), ``fixed_s`` where it names none."""
    ic = project.hardware.interconnect
    c = ic.collective if ic is not None else None
    if c is None:
        return 0.0
    by_kind: dict[str, float] = dict(c.launch_s_by_kind)
    return sum(by_kind.get(call.kind, c.fixed_s) for call in TT_TG_CALLS)


def legacy_t3k_rows() -> list[tuple[str, float, tuple[float, float], str]]:
    """Each legacy T3K all-gather with the engine's time for it on the wormhole-t3000 preset at 1 link (the
    collective model of ``calibrate_ccl``, its own algorithm choice)."""
    from calibrate_ccl import group_for, machine  # a sibling script
    from tilewright.engine.perf.collectives import collective

    hw = machine("wormhole-t3000", 1)
    group = group_for(hw, 8)
    return [(label, collective(hw, "all-gather", group, nbytes).time(hw), us, src)
            for label, nbytes, us, src in LEGACY_T3K_ALL_GATHERS]


def tt_tg_report(project: Project, layers: int) -> None:
    """Print a tt-transformers decoder layer's collectives on the Galaxy beside ours, and the legacy CCL check."""
    rows = tt_tg_call_rows(project)
    print("\ntt-transformers' decode collectives of one Llama 3.1 70B layer on the Galaxy (batch 1 padded to 32 "
          "rows), each costed by our model with the system's generic collectives (us):")
    for c, t, alg in rows:
        axis = "4" if c.axis == COLUMN else "8"
        print(f"  {c.what:34s} {axis:>2s} chips {c.kind:>14s} {c.nbytes / 1024:7.1f} KiB {t * 1e6:6.1f} us "
              f"{alg[:12]:>12s}  [{c.code}]")
    total = sum(t for _, t, _ in rows)
    print(f"  {len(rows)} calls per layer, {total * 1e6:.1f} us; x {layers} layers = {total * layers * 1e3:.2f} ms "
          "per step")
    plan = make_plan(project)
    ours = plan_layer_comms(project)
    print(f"  the plan's own collectives of a layer of this step (mapping.tp_axes_collectives "
          f"'{project.mapping.tp_axes_collectives}'): {len(ours)} calls, "
          f"{sum(plan.tp_time(0, 0, k, b) for k, b in ours) * 1e6:.1f} us")
    launch = tt_tg_launch_s(project)
    print(f"  of which the calls' launches {launch * 1e6:.1f} us per layer (launch_s_by_kind of the system: the "
          "dispatch measured before each legacy CCL call on TG, tt-metal issue #15605; fixed_s for a kind not named)")
    print(f"  source: {TT_TG_SOURCE}")
    print("The same code runs 1-4 further programs around each call (typecast or to_memory_config, fast_reduce_nc, "
          "the slice and user-selection matmuls of attention.py's TG branch).")
    print("Legacy all-gathers of decode tensors on a T3K (8 chips, 1 link; EDM launched per call, cross-chip "
          "barriers at launch and teardown, issue #18709), measured vs our generic model on wormhole-t3000:")
    for label, t, (lo, hi), src in legacy_t3k_rows():
        print(f"  {label:52s} measured {lo:g}-{hi:g} us, ours {t * 1e6:5.1f} us: {lo - t * 1e6:+.1f}.."
              f"{hi - t * 1e6:+.1f} us per call [{src}]")


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    report()


if __name__ == "__main__":
    main()
