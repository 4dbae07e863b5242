"""tt-transformers on the Wormhole Galaxy at batch 1 (PERF.md's TG rows): the cross-model decomposition of the step
into a per-layer and a per-step part, and the decoder layer's collective calls as tt-transformers' TG code makes
them (benchmarks/calibrate_tiled_llm.py ``tg_report``, benchmarks/tiled_galaxy_ops.py ``tt_tg_report``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        import calibrate_tiled_llm
        import tiled_galaxy_ops

        yield calibrate_tiled_llm, tiled_galaxy_ops
    finally:
        sys.path.remove(str(BENCH))


def test_layer_line_splits_steps_into_per_layer_and_per_step_parts(bench):
    """Steps that are exactly a + b·layers give back b and a; two steps give the line through them."""
    llm, _ = bench
    a, b = 4.0e-3, 0.9e-3
    slope, icept = llm.layer_line([(n, a + b * n) for n in (16, 28, 32, 80)])
    assert slope == pytest.approx(b) and icept == pytest.approx(a)
    # (10, 1 + d) and (30, 3 - d): slope ((3 - d) - (1 + d)) / 20, through their mean (20, 2)
    d = 0.2
    slope, icept = llm.layer_line([(10, 1 + d), (30, 3 - d)])
    assert slope == pytest.approx((2 - 2 * d) / 20)
    assert icept == pytest.approx(2 - slope * 20)


def test_tg_models_are_perf_md_rows_of_one_machine_and_runtime(bench):
    """The cross-model check runs tt-transformers' configuration (batch 1, DRAM-interleaved weights as its TG
    branches keep them, the system's programs) for each published TG model; the 70B row is the main table's own."""
    llm, _ = bench
    rows = llm.TG_MODELS
    assert all(c.tt_transformers and c.batch == 1 and c.project == llm.GALAXY for c in rows)
    assert all(c.published is not None and c.published.sources == ("PERF",) for c in rows)
    assert rows[-1] in llm.CONFIGS
    from tilewright.engine.ir.mapping import WeightPlacement

    assert all(llm.configured(c).mapping.spatial.weights is WeightPlacement.interleaved for c in rows)
    layers = [llm.configured(c).workload.layers for c in rows]
    assert layers == sorted(layers) and len(set(layers)) == len(layers)


def test_tt_tg_calls_follow_llama_70b_on_the_8_by_4_mesh(bench):
    """Message sizes from Llama 3.1 70B's dimensions (hidden 8192, 8 KV heads of 128, FFN 28672), derived here:
    QKV's columns split over the 8-chip axis and its partial sums gathered whole from the 4 chips (all-gather then
    a local reduce); FF1/FF3 split over 8 and reduce-scattered over 4; WO/FF2 split over 4 and all-reduced over 8
    as a reduce-scatter then an all-gather of the same tensor."""
    _, ops = bench
    from tilewright.engine.ir.common import DType, dtype_bytes
    from tilewright.engine.plan.tensor_axes import COLUMN, ROW

    hidden, kv, head, ffn, rows = 8192, 8, 128, 28672, 32
    bfp8 = dtype_bytes(DType.bfp8)
    calls = {c.what: c for c in ops.TT_TG_CALLS}
    qkv = calls["QKV partial sums (all-reduce)"]
    assert (qkv.axis, qkv.kind) == (COLUMN, "all-gather")
    assert qkv.nbytes == pytest.approx(4 * rows * (hidden + 2 * kv * head) / 8 * bfp8)
    for name in ("FF1 output: reduce-scatter", "FF3 output: reduce-scatter"):
        assert calls[name].axis == COLUMN and calls[name].nbytes == pytest.approx(rows * ffn / 8 * bfp8)
    eight = [c for c in ops.TT_TG_CALLS if c.axis == ROW]
    assert len(eight) == 4
    assert [c.kind for c in eight] == ["reduce-scatter", "all-gather"] * 2
    assert all(c.nbytes == pytest.approx(rows * hidden / 4 * bfp8) for c in eight)
    assert len(ops.TT_TG_CALLS) == 11


def test_tt_tg_call_rows_cost_each_call_as_the_plan_does(bench):
    """Each call's time is the plan's tensor-parallel collective for that axis, kind and size, and no call is
    cheaper than the fabric's program launch (the interconnect's collective fixed_s)."""
    llm, ops = bench
    from tilewright.engine.simulate import make_plan

    project = llm.configured(llm.TG_MODELS[-1])
    plan = make_plan(project)
    launch = project.hardware.interconnect.collective.fixed_s
    rows = ops.tt_tg_call_rows(project)
    assert len(rows) == len(ops.TT_TG_CALLS)
    for call, t, alg in rows:
        coll = plan.tp_collective(0, 0, call.axis + call.kind, call.nbytes)
        assert t == pytest.approx(coll.time(plan.hw)) and alg == coll.algorithm
        assert t > launch


def test_legacy_t3k_all_gathers_are_costed_on_the_t3000_at_one_link(bench):
    """The legacy all-gather checks run the engine's collective on the wormhole-t3000 preset with one link per
    neighbour, over 8 chips; a bigger gather of the same group costs more."""
    _, ops = bench
    rows = ops.legacy_t3k_rows()
    assert [r[0] for r in rows] == [label for label, *_ in ops.LEGACY_T3K_ALL_GATHERS]
    sizes = [n for _, n, _, _ in ops.LEGACY_T3K_ALL_GATHERS]
    times = [t for _, t, _, _ in rows]
    assert all(t > 0 for t in times)
    assert (sizes[0] < sizes[1]) == (times[0] < times[1])


def test_galaxy_runs_tt_transformers_tg_branch_programs(bench):
    """tt-transformers' TG branches run more programs than one chip's decode: each distributed norm 3 (reshard,
    pre- and post-all-gather statistics), QKV 4 (its all-reduce's reshard and local reduce, the slice matmul),
    WO 3 (reshard and user-selection matmul); the other ops as on one chip. The batch-1 step counts them once per
    layer and once more for the final norm."""
    llm, _ = bench
    from tilewright.engine.io.presets import load_system

    galaxy = load_system("wormhole-galaxy").children[0].compute
    chip = load_system("wormhole-n150").children[0].compute
    extra = {"*norm*": 3 - 1, "qkv": 4 - chip.programs_by_op["qkv"], "out_proj": 3 - chip.programs_by_op["out_proj"]}
    assert extra == {"*norm*": 2, "qkv": 2, "out_proj": 1}
    for name, n in galaxy.programs_by_op.items():
        assert n == chip.programs_by_op.get(name, 1) + extra.get(name, 0)

    project = llm.configured(llm.TG_MODELS[-1])
    hw = project.hardware
    one_chip = hw.model_copy(update={"children": [hw.children[0].model_copy(update={
        "compute": hw.children[0].compute.model_copy(update={"programs_by_op": chip.programs_by_op})})]})
    ours = llm.decode_breakdown(project).ops
    theirs = llm.decode_breakdown(project.model_copy(update={"hardware": one_chip})).ops
    layers = project.workload.layers
    assert ours - theirs == layers * (2 * 2 + 2 + 1) + 2
