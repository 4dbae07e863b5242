"""Collective formats and the 2-D tensor-parallel decode's collective structure (``mapping.formats.collectives*``,
``mapping.tp_axes_collectives``), as tt-metal's models/demos/llama3_70b_galaxy runs Llama 3.1 70B on a Galaxy.

Its decode reduce-scatters QKV's partial sums into heads and all-gathers the attention output before WO, reduce-
scatters FF1 and FF3 and all-gathers their SiLU product once before FF2, and all-reduces WO and FF2 along the
8-chip axis: 3 reduce-scatters, 2 all-gathers and 2 all-reduces per layer (tt/llama_attention.py, llama_mlp.py).
It sends the WO, FF1, FF3, FF2 outputs and the SiLU product in bfloat8_b, the QKV and attention outputs in bf16.
Expected messages are derived here from the model's dimensions and the formats' bytes, not read from the engine.
"""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_project_preset
from tilewright.engine.ir.common import DType, dtype_bytes
from tilewright.engine.ir.mapping import TensorFormats
from tilewright.engine.ir.project import EngineKind, Project
from tilewright.engine.perf.formats import per_op_problems
from tilewright.engine.plan.inference_phases import decode_context, sampling_tile
from tilewright.engine.plan.passes import forward_pass
from tilewright.engine.plan.tensor_axes import COLUMN, ROW, problems
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads.transformer_inference import inference_graph

GALAXY = "wormhole-galaxy-llama3-70b-inference"
H100 = "llama2-70b-h100-inference"
BATCH = 32


def with_mapping(project: Project, **fields) -> Project:
    return project.model_copy(update={"mapping": project.mapping.model_copy(update=fields)})


def with_formats(project: Project, **fields) -> Project:
    return with_mapping(project, formats=project.mapping.formats.model_copy(update=fields))


def with_batch(project: Project, batch: int, output: int | None = None) -> Project:
    update = {"batch": batch} | ({"output_tokens": output} if output else {})
    inf = project.run.inference.model_copy(update=update)
    return project.model_copy(update={"run": project.run.model_copy(update={"inference": inf})})


def layer_comms(project: Project, batch: int = BATCH) -> list[tuple[str, float]]:
    """(kind, bytes) of every tensor-parallel collective of one decoder layer of the decode step, in order."""
    project = with_batch(project, batch)
    plan = make_plan(project)
    graph = inference_graph(project.workload, 1, 128, batch, True, sampling_tile(plan.stages[0].dev.compute))
    ops = graph.layer_ops(graph.block_layers[len(graph.block_layers) // 2])
    ps = forward_pass([ops], decode_context(plan, 0, batch))
    return [s.comm for s in ps.segments if s.comm]


def dims(project: Project) -> tuple[int, int, int]:
    """(hidden, QKV width, FFN width) from the model's spec."""
    w = project.workload
    head = w.hidden // w.heads
    return w.hidden, w.hidden + 2 * w.kv_heads * head, w.ffn


@pytest.fixture(scope="module")
def galaxy() -> Project:
    return load_project_preset(GALAXY)


def test_the_galaxy_decode_layer_reduce_scatters_and_gathers_as_the_runtime_in_its_formats(galaxy):
    rows, cols = galaxy.mapping.tp_axes
    hidden, qkv, ffn = dims(galaxy)
    bf16, bfp8 = dtype_bytes(DType.bf16), dtype_bytes(DType.bfp8)
    expected = [
        (COLUMN + "reduce-scatter", BATCH * qkv / cols * bf16),  # LlamaReduceScatterCreateHeads
        (COLUMN + "all-gather", BATCH * hidden / cols * bf16),  # AllGatherConcat (WO's K over the cols)
        (ROW + "all-reduce", BATCH * hidden / rows * bfp8),  # AllReduceAsync after WO
        (COLUMN + "reduce-scatter", BATCH * ffn / cols * bfp8),  # FF3 (mlp_up)
        (COLUMN + "reduce-scatter", BATCH * ffn / cols * bfp8),  # FF1 (mlp_gate), inside Matmul_RS
        (COLUMN + "all-gather", BATCH * ffn / cols * bfp8),  # AllGatherAsync of the SiLU product
        (ROW + "all-reduce", BATCH * hidden / rows * bfp8),  # AllReduceAsync after FF2
    ]
    got = layer_comms(galaxy)
    assert [k for k, _ in got] == [k for k, _ in expected]
    assert [b for _, b in got] == pytest.approx([b for _, b in expected], rel=1e-12)
    # the published messages (tiled_galaxy_ops: 1280 / 1024 / 2048 / 3584 columns of 32 rows)
    assert (qkv / cols, hidden / cols, hidden / rows, ffn / cols) == (1280, 1024, 2048, 3584)


def test_all_reduce_structure_combines_every_column_op_with_its_own_all_reduce(galaxy):
    """tt-transformers' structure: five all-reduces per layer and nothing after attention or the SiLU mul;
    scatter-gather reduces the same column-op outputs (3 reduce-scatters) and gathers twice (the attention
    output, the SiLU product) where the three column all-reduces would each gather."""
    ar = layer_comms(with_mapping(galaxy, tp_axes_collectives="all-reduce"))
    sg = layer_comms(galaxy)
    assert [k.split(":")[1] for k, _ in ar] == ["all-reduce"] * 5
    count = {k: sum(1 for kind, _ in sg if kind.endswith(k)) for k in ("reduce-scatter", "all-gather", "all-reduce")}
    assert count == {"reduce-scatter": 3, "all-gather": 2, "all-reduce": 2}
    # what the column ops reduce is the same tensor either way: only how it is combined changes
    col_ar = [b for k, b in ar if k.startswith(COLUMN)]
    col_rs = [b for k, b in sg if k == COLUMN + "reduce-scatter"]
    assert sorted(col_ar) == pytest.approx(sorted(col_rs), rel=1e-12)


def test_scatter_gather_is_faster_on_the_galaxy_and_both_engines_agree(galaxy):
    """One all-gather fewer per layer, and every message of the runtime's: the decode step is faster; the
    event engine times the same collectives as the analytic one."""
    short = with_batch(galaxy, BATCH, output=4)
    plain = with_formats(with_mapping(short, tp_axes_collectives="all-reduce"), collectives_by_op={})
    runs = {}
    for name, p in (("runtime", short), ("plain", plain)):
        for kind in (EngineKind.analytic, EngineKind.event):
            q = p.model_copy(update={"run": p.run.model_copy(update={"engine": kind})})
            runs[name, kind] = simulate(q, series=False)
    for name in ("runtime", "plain"):
        a, e = runs[name, EngineKind.analytic], runs[name, EngineKind.event]
        assert e.tpot_s == pytest.approx(a.tpot_s, rel=1e-6)
        assert e.ttft_s == pytest.approx(a.ttft_s, rel=1e-6)
    assert runs["runtime", EngineKind.analytic].tpot_s < runs["plain", EngineKind.analytic].tpot_s


def test_a_collective_format_changes_only_the_ops_it_names_on_a_gpu_project():
    """1-D tensor parallelism on GPUs: an all-reduce after out_proj sent in fp8 carries 1 B per element, the one
    after mlp_down keeps the activations' 2 B; unset, every message is the activations' format."""
    project = load_project_preset(H100)
    hidden = project.workload.hidden
    batch = project.run.inference.batch
    base = layer_comms(project, batch)
    assert [b for _, b in base] == pytest.approx([batch * hidden * 2.0] * 2, rel=1e-12)
    fp8 = layer_comms(with_formats(project, collectives_by_op={"out_proj": DType.fp8}), batch)
    assert [b for _, b in fp8] == pytest.approx([batch * hidden * 1.0, batch * hidden * 2.0], rel=1e-12)
    every = layer_comms(with_formats(project, collectives=DType.fp8), batch)
    assert [b for _, b in every] == pytest.approx([batch * hidden * 1.0] * 2, rel=1e-12)
    # a pattern beats the format of every collective
    both = layer_comms(with_formats(project, collectives=DType.fp8, collectives_by_op={"mlp_*": DType.bf16}), batch)
    assert [b for _, b in both] == pytest.approx([batch * hidden * 1.0, batch * hidden * 2.0], rel=1e-12)


def test_a_mapping_derived_without_the_2d_layout_runs_1d_collectives(galaxy):
    """The Galaxy project at tp 16 (``--tp``, the search: ``tp_axes_for`` drops a layout that no longer fits)
    runs Megatron's 1-D all-reduces of the same outputs, the per-op formats still applied; it is not refused."""
    from tilewright.engine.ir.mapping import tp_axes_for

    p = with_mapping(galaxy, tp=16, tp_axes=tp_axes_for(galaxy.mapping.tp_axes, 16), dp=2)
    assert p.mapping.tp_axes is None and problems(p) == []
    hidden = p.workload.hidden
    got = layer_comms(p)
    assert [k for k, _ in got] == ["all-reduce", "all-reduce"]  # after WO and after FF2
    assert [b for _, b in got] == pytest.approx([BATCH * hidden * dtype_bytes(DType.bfp8)] * 2, rel=1e-12)


def test_defaults_save_nothing_and_mistakes_are_refused(galaxy):
    assert "collectives" not in TensorFormats().model_dump(mode="json")
    assert "collectives_by_op" not in TensorFormats().model_dump(mode="json")
    gpu = load_project_preset(H100)
    assert "tp_axes_collectives" not in gpu.mapping.model_dump(mode="json")
    assert galaxy.mapping.model_dump(mode="json")["tp_axes_collectives"] == "scatter-gather"
    assert problems(galaxy) == []
    # a pattern that names no op is a typo
    names = [op.name for op in inference_graph(gpu.workload, 1, 8, 1, True, 32).ops()]
    typo = per_op_problems(TensorFormats(collectives_by_op={"mlp_dwn": DType.fp8}), names)
    assert [p.path for p in typo] == ["mapping.formats.collectives_by_op.mlp_dwn"]
    assert per_op_problems(TensorFormats(collectives_by_op={"mlp_*": DType.fp8}), names) == []


def test_the_plan_notes_say_which_ops_scatter_and_which_gather(galaxy):
    (note,) = [n for n in make_plan(galaxy).notes if n.startswith("2-D tensor parallelism")]
    parts = {p.split(" along ")[0].split(" over ")[0] for p in note.split(": ", 1)[1].split("; ")}
    assert "qkv, mlp_up, mlp_gate reduce-scatter" in parts
    assert "out_proj, mlp_down all-reduce" in parts
    assert any(p.endswith("activation all-gather") for p in parts)
    plain = make_plan(with_mapping(galaxy, tp_axes_collectives="all-reduce")).notes
    assert not any("reduce-scatter" in n or "all-gather" in n for n in plain if n.startswith("2-D tensor"))
