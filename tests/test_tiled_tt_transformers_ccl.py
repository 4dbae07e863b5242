"""``mapping.tp_axes_collectives`` 'tt-transformers': the plan charges the collective calls tt-transformers' TG code
makes (``plan.tensor_axes._tt_comms``), as benchmarks/calibrate_tiled_llm.py's tt-transformers rows select it.

Expected calls and bytes are derived here from each model's dimensions and the code's shapes (tile-padded rows,
the 8 × 4 mesh, the formats each call sends), or taken from ``tiled_galaxy_ops.TT_TG_CALLS`` (listed call by call
from tt-transformers' code, its sizes checked against the dimensions in test_tiled_tg_tt_transformers.py), never
read back from the engine.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tilewright.engine.ir.common import DType, dtype_bytes
from tilewright.engine.ir.project import EngineKind, Project
from tilewright.engine.plan.tensor_axes import COLUMN, ROW
from tilewright.engine.simulate import make_plan, simulate

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
TILE = 32  # a Wormhole tile's rows: a decode's users padded to it
BF16, BFP8 = dtype_bytes(DType.bf16), dtype_bytes(DType.bfp8)


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        import calibrate_tiled_llm
        import tiled_galaxy_ops

        yield calibrate_tiled_llm, tiled_galaxy_ops
    finally:
        sys.path.remove(str(BENCH))


def with_batch(project: Project, batch: int, output: int | None = None) -> Project:
    update = {"batch": batch} | ({"output_tokens": output} if output else {})
    inf = project.run.inference.model_copy(update=update)
    return project.model_copy(update={"run": project.run.model_copy(update={"inference": inf})})


def test_the_70b_layer_charges_the_eleven_calls_tt_transformers_makes(bench):
    """At hidden 8192, batch 1: the plan's collectives of one decoder layer are TT_TG_CALLS, call by call (kind,
    mesh axis, bytes), in the order the code makes them."""
    llm, ops = bench
    project = llm.configured(llm.TG_MODELS[-1])
    assert project.mapping.tp_axes_collectives == "tt-transformers" and project.workload.hidden == 8192
    got = ops.plan_layer_comms(project)
    expected = [(c.axis + c.kind, c.nbytes) for c in ops.TT_TG_CALLS]
    assert [k for k, _ in got] == [k for k, _ in expected]
    assert [b for _, b in got] == pytest.approx([b for _, b in expected], rel=1e-12)
    kinds = [k.split(":")[1] for k, _ in got]
    assert (kinds.count("all-gather"), kinds.count("reduce-scatter"), len(got)) == (7, 4, 11)


@pytest.mark.parametrize("model", [0, 1, 2])
def test_below_hidden_8192_every_partial_sum_is_gathered_then_summed(bench, model):
    """1B, 3B and 8B (hidden 2048-4096): tt_all_reduce without use_composite gathers every device's partial sums
    (dim 0) for QKV, WO, FF1, FF3 and FF2, beside the two norms' statistics and the users' gather: 8 all-gathers,
    no reduce-scatter. Sizes from the model's dimensions: 32 rows per device (batch 1 padded to a tile); QKV's
    and FF1/FF3's columns split over the 8-chip axis and gathered from 4, WO's and FF2's split over 4 and gathered
    from 8; bfloat8_b where the code passes ccl_dtype, bfloat16 for the statistics, the users and FF1/FF3."""
    llm, ops = bench
    project = llm.configured(llm.TG_MODELS[model])
    w = project.workload
    assert w.hidden < 8192
    head = w.hidden // w.heads
    qkv = w.hidden + 2 * w.kv_heads * head
    rows, cols = 4, 8  # tp_axes: the 4-chip axis holds a column, the 8-chip axis a row
    assert tuple(project.mapping.tp_axes) == (rows, cols)
    stats = (COLUMN + "all-gather", TILE * TILE * rows * BF16)
    expected = [
        stats,
        (COLUMN + "all-gather", rows * TILE * qkv / cols * BFP8),
        (COLUMN + "all-gather", rows * TILE * w.heads * head / cols * BF16),
        (ROW + "all-gather", cols * TILE * w.hidden / rows * BFP8),
        stats,
        (COLUMN + "all-gather", rows * TILE * w.ffn / cols * BF16),
        (COLUMN + "all-gather", rows * TILE * w.ffn / cols * BF16),
        (ROW + "all-gather", cols * TILE * w.hidden / rows * BFP8),
    ]
    got = ops.plan_layer_comms(project)
    assert [k for k, _ in got] == [k for k, _ in expected]
    assert [b for _, b in got] == pytest.approx([b for _, b in expected], rel=1e-12)


def test_decode_messages_are_whole_tiles_of_users(bench):
    """The decode pads its users to whole tiles: 1 and 32 users send the same bytes, 33 users two tiles' worth."""
    llm, ops = bench
    project = llm.configured(llm.TG_MODELS[-1])
    one = ops.plan_layer_comms(project, batch=1)
    full = ops.plan_layer_comms(project, batch=32)
    two = ops.plan_layer_comms(project, batch=33)
    assert [b for _, b in full] == pytest.approx([b for _, b in one], rel=1e-12)
    assert [b for _, b in two] == pytest.approx([2 * b for _, b in one], rel=1e-12)
    # the other modes send the sequences' own rows: 32 sequences carry 32 × a single sequence's bytes
    plain = project.model_copy(update={"mapping": project.mapping.model_copy(
        update={"tp_axes_collectives": "all-reduce"})})
    p1, p32 = ops.plan_layer_comms(plain, batch=1), ops.plan_layer_comms(plain, batch=32)
    assert [b for _, b in p32] == pytest.approx([32 * b for _, b in p1], rel=1e-12)


def test_both_engines_agree_and_the_step_pays_every_call(bench):
    """The event engine times the same collectives as the analytic one; the step with tt-transformers' calls
    differs from the 'all-reduce' structure's by the layers' (and the final norm's) collective time."""
    llm, ops = bench
    base = with_batch(llm.configured(llm.TG_MODELS[-1]), 1, output=4)
    runs = {}
    for kind in (EngineKind.analytic, EngineKind.event):
        q = base.model_copy(update={"run": base.run.model_copy(update={"engine": kind})})
        runs[kind] = simulate(q, series=False)
    a, e = runs[EngineKind.analytic], runs[EngineKind.event]
    assert e.tpot_s == pytest.approx(a.tpot_s, rel=1e-6)
    assert e.ttft_s == pytest.approx(a.ttft_s, rel=1e-6)
    plan = make_plan(base)
    per_layer = sum(plan.tp_time(0, 0, k, b) for k, b in ops.plan_layer_comms(base))
    assert per_layer == pytest.approx(sum(t for _, t, _ in ops.tt_tg_call_rows(base)), rel=1e-9)
    assert a.tpot_s > per_layer * base.workload.layers  # the step holds every layer's calls


def test_the_plan_notes_name_the_statistics_gather(bench):
    llm, _ = bench
    project = llm.configured(llm.TG_MODELS[-1])
    (note,) = [n for n in make_plan(project).notes if n.startswith("2-D tensor parallelism")]
    parts = {p.split(" along ")[0] for p in note.split(": ", 1)[1].split("; ")}
    # the notes list the model's unfused graph: the users' gather follows its softmax there
    assert "norm1, qkv, softmax, norm2, activation, final_norm all-gather" in parts
    assert not any(p.startswith("word_embedding") for p in parts)  # embedding.py: the table split over the hidden
    assert "mlp_up, mlp_gate reduce-scatter" in parts
    assert "out_proj, mlp_down reduce-scatter" in parts and "out_proj, mlp_down all-gather" in parts


@pytest.mark.parametrize("model", [0, 3])
def test_prefill_scatters_the_mlp_and_gathers_wo_without_the_users_gather(bench, model):
    """tt-transformers' prefill (one user, 128 tokens, no tile padding: the rows are the prompt's): FF1 and FF3
    reduce-scattered and their product gathered at every hidden size (``self.dim == 8192 or mode == "prefill"``),
    WO's partial sums gathered (``dim=0 if self.TG``, not composite), no users' gather; FF2 as in the decode."""
    llm, _ = bench
    from tilewright.engine.plan.tensor_axes import layer_comms
    from tilewright.engine.workloads.transformer_inference import inference_graph

    project = llm.configured(llm.TG_MODELS[model])
    w = project.workload
    rows, cols = project.mapping.tp_axes
    tokens = 128
    graph = inference_graph(w, tokens, tokens, 1, True, TILE)
    ops = graph.layer_ops(graph.block_layers[1])
    got = [c for j in range(len(ops)) for c in layer_comms(ops, j, (rows, cols), "tt-transformers", TILE, False)]
    head = w.hidden // w.heads
    qkv = w.hidden + 2 * w.kv_heads * head
    stats = (COLUMN + "all-gather", tokens * TILE * rows)  # a tile of statistics per row, from each of 4
    ff2 = ([(ROW + "reduce-scatter", tokens * w.hidden / rows), (ROW + "all-gather", tokens * w.hidden / rows)]
           if w.hidden == 8192 else [(ROW + "all-gather", tokens * w.hidden / rows * cols)])
    expected = [
        stats,
        (COLUMN + "all-gather", tokens * qkv / cols * rows),
        (ROW + "all-gather", tokens * w.hidden / rows * cols),
        stats,
        (COLUMN + "reduce-scatter", tokens * w.ffn / cols),
        (COLUMN + "reduce-scatter", tokens * w.ffn / cols),
        (COLUMN + "all-gather", tokens * w.ffn / cols),
        *ff2,
    ]
    assert [k for k, _ in got] == [k for k, _ in expected]
    assert [e for _, e in got] == pytest.approx([e for _, e in expected], rel=1e-12)
