"""Structure of the NeMo/Megatron-Bridge DGX-H100 check (benchmarks/calibrate_nemo_h100.py), not its accuracy.

What could silently break the comparison: a model built with the wrong architecture (checked against the
parameter counts on each model card, which the specs were not derived from), a published configuration
that no longer maps onto a runnable project (device count, batch arithmetic), or merged releases that
differ in configuration. No assertion on the errors: the rows are a check, not a target.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
from calibrate_nemo_h100 import MODEL_CARD, chunk_layers, model_spec, project_for, rows  # noqa: E402
from tilewright.engine.ir.ops import OpKind  # noqa: E402
from tilewright.engine.plan.checks import check_project  # noqa: E402
from tilewright.engine.workloads import build_workload  # noqa: E402

MODELS = sorted({r.pub.model for r in rows()})


def _digit_unit(card: float) -> float:
    """One unit in the last digit a card quotes ("3.3" → 0.1, "116.83" → 0.01, "671" → 1)."""
    text = f"{card:g}"
    return 10.0 ** -(len(text.split(".")[1]) if "." in text else 0)


@pytest.mark.parametrize("model", MODELS)
def test_total_parameters_match_the_model_card(model):
    graph = build_workload(model_spec(model, 4096))
    total, _active, _ = MODEL_CARD[model]
    assert graph.params / 1e9 == pytest.approx(total, rel=0.01)


@pytest.mark.parametrize("model", MODELS)
def test_active_parameters_match_the_model_card(model):
    """Cards quote active parameters to 2–3 significant digits (Qwen3-30B-A3B: "3.3B" for 3.35 B), so the
    tolerance is one unit of the last quoted digit; gpt-oss counts them without the embedding table."""
    graph = build_workload(model_spec(model, 4096))
    _total, active, without_embedding = MODEL_CARD[model]
    ours = graph.active_params
    if without_embedding:
        ours -= sum(op.params for op in graph.ops() if op.kind is OpKind.embedding)
    assert abs(ours / 1e9 - active) <= _digit_unit(active)


def test_moe_models_are_moe_and_dense_ones_dense():
    for row in rows():
        spec = model_spec(row.pub.model, row.pub.seq)
        assert (spec.moe is not None) == row.moe, row.label


def test_merged_releases_share_one_configuration():
    for row in rows():
        for other in row.others:
            assert other.config == row.pub.config
            assert other.release < row.pub.release  # the row compares with the newest release


@pytest.mark.parametrize("row", rows(), ids=lambda r: r.label)
def test_every_row_maps_to_a_runnable_project_on_the_published_gpus(row):
    project = project_for(row)
    m = project.mapping
    assert m.devices == row.pub.gpus
    assert m.micro_batch == row.pub.mbs and m.global_batch == row.pub.gbs
    assert project.workload.seq_len == row.pub.seq
    assert check_project(project) == []


@pytest.mark.parametrize("model,layers,pp,vp", [
    ("llama3.1-405b", 126, 8, 8), ("qwen3-235b-a22b", 94, 8, 4), ("deepseek-v3", 61, 8, 4),
])
def test_megatron_layouts_hold_every_layer_once(model, layers, pp, vp):
    """Each virtual stage's layers (``mapping.pipeline_layers``): every layer once, ranks (virtual stages r,
    r + pp, …) balanced but for the ends, and the project runs interleaved with the layout."""
    chunks = chunk_layers(model, layers, pp, vp)
    assert len(chunks) == pp * vp and sum(chunks) == layers
    counts = [sum(chunks[c] for c in range(r, pp * vp, pp)) for r in range(pp)]
    assert max(counts) - min(counts) <= 2  # Megatron balances ranks; only the ends lose a layer or two
    row = next(r for r in rows() if r.pub.model == model)
    m = project_for(row).mapping
    assert m.interleave == vp and m.pipeline_layers == chunks
