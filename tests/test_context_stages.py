"""Context parallelism with hand-placed pipeline stages: a stage holds tp × cp × dp devices, its cp rings
formed over them in Megatron's order (tp, cp, dp) as the placement strategy would, in both engines and in
the studio's layer placement."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.io.presets import load_system  # noqa: E402
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings  # noqa: E402
from tilewright.engine.ir.mapping import StagePlacement  # noqa: E402
from tilewright.engine.plan.checks import check_project  # noqa: E402
from tilewright.engine.simulate import make_plan, simulate  # noqa: E402
from tilewright.studio.mapping import stage_layout  # noqa: E402
from tilewright.studio.mapping_edit import group_around, place_layers  # noqa: E402
from tilewright.studio.tree_edit import EditRefused  # noqa: E402

SPEC = GPTSpec(name="gpt-long", layers=4, hidden=2048, heads=16, seq_len=8192, vocab=51200)
LAYERS = 6  # embedding, four blocks, head


def _project(stages: list[StagePlacement] | None = None, engine: str = "analytic") -> Project:
    """tp 2 × cp 2 × dp 1 per stage, two stages: one DGX A100's 8 GPUs."""
    mapping = Mapping(tp=2, cp=2, pp=2, dp=1, micro_batch=1, global_batch=4, stages=stages or [])
    return Project(name="cp-stages", hardware=load_system("dgx-a100"), workload=SPEC, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _placed(first: list[int], second: list[int], split: int = 3) -> list[StagePlacement]:
    return [StagePlacement(stage=0, layers=(0, split), devices=first),
            StagePlacement(stage=1, layers=(split, LAYERS), devices=second)]


def test_stages_as_the_strategy_places_them_run_exactly_like_the_strategy():
    """Writing down the strategy's own placement changes nothing: same groups, same cp rings, same time."""
    auto = make_plan(_project())
    split = len(auto.stages[0].chunk_layers[0])
    devices = [[d for g in stage.groups for d in g] for stage in auto.stages]
    placed = _project(_placed(devices[0], devices[1], split))
    assert check_project(placed) == []
    hand = make_plan(placed)
    assert [s.groups for s in hand.stages] == [s.groups for s in auto.stages]
    for engine in ("analytic", "event"):
        a = simulate(_project(engine=engine))
        b = simulate(_project(_placed(devices[0], devices[1], split), engine=engine))
        assert b.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
        assert b.time_breakdown_s.get("cp_comm", 0.0) == pytest.approx(a.time_breakdown_s.get("cp_comm", 0.0))


def test_a_stage_on_other_devices_forms_its_rings_there():
    """Stage 0 on GPUs 4-7: its tensor pairs are (4, 5) and (6, 7), its cp ring pairs the first ranks of
    each (4 with 6, 5 with 7); the time is the mirror image's."""
    hand = make_plan(_project(_placed([4, 5, 6, 7], [0, 1, 2, 3])))
    assert hand.stages[0].groups == [[4, 5], [6, 7]]
    assert hand.stages[1].groups == [[0, 1], [2, 3]]
    mirror = simulate(_project(_placed([0, 1, 2, 3], [4, 5, 6, 7])))
    swapped = simulate(_project(_placed([4, 5, 6, 7], [0, 1, 2, 3])))
    assert swapped.iteration_time_s == pytest.approx(mirror.iteration_time_s)


def test_a_stage_needs_tp_cp_dp_devices():
    problems = check_project(_project(_placed([0, 1], [2, 3])))
    assert [(p.path, p.reason) for p in problems if p.path.startswith("mapping.stages")] == [
        ("mapping.stages.0.devices", "2 devices, a stage needs tp × cp × dp = 4"),
        ("mapping.stages.1.devices", "2 devices, a stage needs tp × cp × dp = 4"),
    ]
    assert not any(p.path == "mapping.cp" for p in problems)


def test_the_studio_places_layers_on_a_stage_sized_group_with_cp():
    """Dropping layers on one GPU takes the tp × cp × dp group around it; the result checks clean."""
    project = _project()
    layout = stage_layout(project, chunks=1)
    group = group_around(layout, 5, project.mapping)
    assert sorted(group) == [4, 5, 6, 7]
    m = place_layers(project.mapping, layout, (0, 3), group)
    assert [(s.layers, s.devices) for s in m.stages] == [((0, 3), [4, 5, 6, 7]), ((3, LAYERS), [0, 1, 2, 3])]
    assert check_project(project.model_copy(update={"mapping": m})) == []
    with pytest.raises(EditRefused, match="tp × cp × dp = 4"):
        place_layers(project.mapping, layout, (0, 3), [1, 2])
