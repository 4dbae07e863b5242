"""The multi-level mapper's estimate of a layout against the analytic engine's time of the same mapping.

The mapper ranks layouts with per-dimension costs built from the engine's own pieces (the plan's passes,
``CommModel``'s collectives, ``plan.train_step``'s optimizer step), so where every group lies along one
network dimension and there is one pipeline stage, nothing is left to differ: the two agree to rounding.
Where a group spans several dimensions, the mapper charges one collective per dimension on the whole
message — never less than the engine's hierarchical collective over the group."""

from __future__ import annotations

import pytest
from tilewright.engine.engines.analytic.engine import AnalyticEngine
from tilewright.engine.ir import Component, GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.search.multilevel import milp as ml
from tilewright.engine.search.multilevel.map import (
    ESTIMATE_SCOPE,
    build_problem,
    map_text,
    mapped_project,
    multilevel_map,
    with_fusion,
)
from tilewright.engine.simulate import make_plan

from tests.factories import cluster, torus

GB = 1e9
WORKLOAD = GPTSpec(layers=8, hidden=1024, heads=16, seq_len=512, vocab=8192)


def _project(hardware: Component, **mapping: object) -> Project:
    return Project(name="t", hardware=hardware, workload=WORKLOAD, mapping=Mapping(global_batch=32, **mapping),
                   run=RunSettings(engine="analytic"))


def _estimate_and_engine(p: Project, fused: bool) -> tuple[ml.Layout, float]:
    """The mapper's estimate of ``p``'s own mapping (placed row-major, as the engine places it) and the
    engine's time of that mapping — with the fusion programme's chains written in when ``fused``."""
    pb, dims, _ = build_problem(p, 40, [])
    m = p.mapping
    lay = ml.row_major_layout(pb, m.tp, m.pp, m.dp)
    assert lay is not None
    est = ml.evaluate(pb, lay, fused)
    run = mapped_project(p, lay, dims)
    if fused:
        groups = [g for layer in pb.costs.fused[m.tp] for g in layer.groups if len(g) > 1]
        assert groups  # the programme fuses something, or the fused case would test nothing new
        run = with_fusion(run, groups)
    return est, AnalyticEngine().run(make_plan(run)).iteration_time_s


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("hardware, mapping", [
    (cluster(nodes=2), {"tp": 8, "pp": 1, "dp": 2}),  # tp on NVSwitch, dp across InfiniBand
    (torus([4, 4]), {"tp": 4, "pp": 1, "dp": 4}),  # one torus axis each
    (torus([4, 4]), {"tp": 4, "pp": 1, "dp": 4, "recompute": "full"}),
    (torus([4, 4]), {"tp": 4, "pp": 1, "dp": 4, "recompute": "selective"}),
])
def test_estimate_equals_the_engine_when_every_group_lies_along_one_dimension(hardware, mapping, fused):
    p = _project(hardware, **mapping)
    est, engine = _estimate_and_engine(p, fused)
    assert est.time_s == pytest.approx(engine, rel=1e-9)


def test_a_group_over_two_dimensions_is_an_upper_bound():
    """dp 16 over both axes of a 4×4 torus: charged as two 4-member all-reduces of the whole gradient, more
    than the engine's collective over the 16 members; the rest of the estimate is still the engine's."""
    p = _project(torus([4, 4]), tp=1, pp=1, dp=16)
    est, engine = _estimate_and_engine(p, False)
    assert est.time_s > engine
    pb, dims, _ = build_problem(p, 40, [])
    lay = ml.evaluate(pb, ml.row_major_layout(pb, 1, 1, 16), False)
    result = AnalyticEngine().run(make_plan(mapped_project(p, lay, dims)))
    assert est.time_s - lay.terms["dp_comm"] == pytest.approx(engine - result.time_breakdown_s["dp_comm"], rel=1e-9)


def test_output_heads_with_the_engine_and_labels_the_mappers_estimate():
    p = _project(torus([4, 4]), tp=4, pp=1, dp=4)
    r = multilevel_map(p)
    text = map_text(r)
    lines = text.splitlines()
    default = next(line for line in lines if line.strip().startswith("default"))
    optimized = next(line for line in lines if line.strip().startswith("optimized"))
    assert f"analytic engine {r.engine_default_s:.4g} s" in default
    assert f"(mapper's estimate {r.default.time_s:.4g} s)" in default
    assert default.index("analytic engine") < default.index("mapper's estimate")
    assert f"analytic engine {r.engine_optimized_s:.4g} s" in optimized
    assert f"gain on the analytic engine ×{r.engine_default_s / r.engine_optimized_s:.3f}" in text
    assert ESTIMATE_SCOPE in text and "predicted" not in text
    unchecked = map_text(multilevel_map(p, check=False))
    assert "analytic engine" not in unchecked.replace(ESTIMATE_SCOPE, "")
    assert f"mapper's estimate {r.default.time_s:.4g} s" in unchecked
