"""Uneven interleaved pipeline layouts (``mapping.pipeline_layers``, Megatron-Core's pipeline layout): each
virtual stage holds the layers the layout gives it, on rank k mod pp, the embedding on the first and the head
on the last; a bad layout is refused naming the field; both engines run it; the CLI reads ``N*K``."""

from __future__ import annotations

import pytest
from tilewright.engine.cli.run import pipeline_layout
from tilewright.engine.errors import InputError
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.mapping import StagePlacement
from tilewright.engine.plan.checks import check_project
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

SPEC = GPTSpec(name="gpt", layers=14, hidden=2048, heads=16, seq_len=1024, vocab=51200)
LAYOUT = [1] + [2] * 6 + [1]  # 8 virtual stages: pp 4 × interleave 2


def _project(layout: list[int] | None = LAYOUT, interleave: int = 2, engine: str = "analytic", **extra) -> Project:
    mapping = Mapping(tp=1, pp=4, dp=1, micro_batch=1, global_batch=16, interleave=interleave,
                      pipeline_layers=layout, **extra)
    return Project(name="p", hardware=load_system("dgx-a100"), workload=SPEC, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def test_each_virtual_stage_holds_its_layers():
    plan = make_plan(_project())
    graph = build_workload(SPEC)
    blocks, last = graph.block_layers, len(graph.layers) - 1
    start = 0
    for k, n in enumerate(LAYOUT):
        rank, chunk = k % 4, k // 4
        expect = blocks[start:start + n] + ([0] if k == 0 else []) + ([last] if k == len(LAYOUT) - 1 else [])
        start += n
        assert sorted(plan.stages[rank].chunk_layers[chunk]) == sorted(expect)


def test_both_engines_run_the_layout_alike():
    analytic = simulate(_project())
    assert simulate(_project(engine="event")).iteration_time_s == pytest.approx(analytic.iteration_time_s, rel=1e-6)


def test_the_even_layout_written_out_is_the_default_split():
    even = SPEC.model_copy(update={"layers": 16})
    runs = [simulate(_project(layout).model_copy(update={"workload": even})).iteration_time_s
            for layout in (None, [2] * 8, [1, 3] + [2] * 6)]
    assert runs[1] == pytest.approx(runs[0], rel=1e-12)
    assert runs[2] != pytest.approx(runs[0], rel=1e-6)  # a different layout is a different run


@pytest.mark.parametrize("layout,says", [
    ([2] * 7, "8"),  # 7 virtual stages for pp 4 × interleave 2
    ([2] * 8, "16 layers"),  # 16 ≠ 14
    ([1, 2, 0, 3, 2, 2, 2, 2], "empty"),
])
def test_a_bad_layout_is_refused_naming_the_field(layout, says):
    problems = [p for p in check_project(_project(layout)) if p.path == "mapping.pipeline_layers"]
    assert problems and says in str(problems[0])


def test_stages_and_a_layout_together_are_refused():
    stages = [StagePlacement(stage=r, layers=(0, 1)) for r in range(4)]
    problems = check_project(_project(stages=stages))
    assert any(p.path == "mapping.pipeline_layers" for p in problems)


def test_uneven_interleaving_without_a_layout_points_to_it():
    problems = check_project(_project(layout=None))
    assert any(p.path == "mapping.interleave" and "pipeline_layers" in str(p) for p in problems)


def test_the_cli_reads_repeats():
    assert pipeline_layout("1,2*30,0") == [1] + [2] * 30 + [0]
    with pytest.raises(InputError):
        pipeline_layout("2*x")
