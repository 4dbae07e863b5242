"""The mapping editor's rules without a window: the stage layout agrees with the engine's plan, Auto-map
and layer placement produce valid mappings (or say why not), and both are single undoable commands."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.io import load_project  # noqa: E402
from tilewright.engine.ir.mapping import Mapping, StagePlacement  # noqa: E402
from tilewright.engine.plan.checks import check_project  # noqa: E402
from tilewright.engine.simulate import make_plan  # noqa: E402
from tilewright.studio.document import ProjectDocument  # noqa: E402
from tilewright.studio.mapping import format_ranges, stage_layout, to_ranges  # noqa: E402
from tilewright.studio.mapping_commands import AutoMap, PlaceLayers  # noqa: E402
from tilewright.studio.mapping_edit import auto_mapping, group_around, place_layers  # noqa: E402
from tilewright.studio.mapping_layers import layer_rows, totals  # noqa: E402
from tilewright.studio.samples import dgx_project, wafer_project  # noqa: E402
from tilewright.studio.tree_edit import EditRefused  # noqa: E402

PRESETS = ["palm-wafer-t18b", "gpt3-dgx-a100", "chiplet-bert-large", "hypar-vgg-a"]


def chiplet():
    return load_project("presets/projects/chiplet-bert-large.json")


@pytest.mark.parametrize("name", PRESETS)
def test_layout_matches_the_engines_plan(name):
    """The canvas must colour what the simulator runs: same devices and layers per stage as the plan
    (interleaved GPT-3 included, whose stages hold three separate layer ranges)."""
    project = load_project(f"presets/projects/{name}.json")
    layout = stage_layout(project)
    plan = make_plan(project)
    assert layout.stages == len(plan.stages) and not layout.problem
    for r, st in enumerate(plan.stages):
        layers = sorted(i for chunk in st.chunk_layers.values() for i in chunk)
        assert [i for a, b in layout.stage_layers[r] for i in range(a, b)] == layers
        assert layout.stage_devices[r] == [d for group in st.groups for d in group]


def test_ranges_read_like_the_canvas_labels():
    assert to_ranges([5, 1, 2, 3, 9]) == [(1, 4), (5, 6), (9, 10)]
    assert format_ranges([(12, 24)]) == "L12–23"
    assert format_ranges([(0, 1), (16, 20)]) == "L0, L16–19"
    layout = stage_layout(load_project("presets/projects/gpt3-dgx-a100.json"))
    assert layout.label(0) == "L0–4, L33–36, L65–68"  # interleave 3: three chunks on stage 0


def test_layout_reports_a_mapping_the_machine_cannot_hold():
    project = wafer_project()
    project = project.model_copy(update={"mapping": Mapping(tp=16, pp=16)})  # 256 devices, 64 exist
    layout = stage_layout(project)
    assert layout.problem and layout.stages == 0


def test_auto_mapping_sets_degrees_and_clears_hand_placement():
    m = Mapping(tp=4, pp=2, stages=[StagePlacement(stage=0, layers=(0, 13), devices=[0, 1, 2, 3]),
                                    StagePlacement(stage=1, layers=(13, 26), devices=[4, 5, 6, 7])])
    out = auto_mapping(m, tp=2, pp=4, dp=2, micro_batch=2, global_batch=64, placement="snake")
    assert (out.tp, out.pp, out.dp, out.micro_batch, out.global_batch) == (2, 4, 2, 2, 64)
    assert out.placement.value == "snake" and out.stages == []
    with pytest.raises(EditRefused, match="global_batch.*multiple"):
        auto_mapping(m, dp=3, global_batch=64)


def test_placing_layers_on_another_group_swaps_devices():
    project = chiplet()
    layout = stage_layout(project, chunks=1)
    group = group_around(layout, 15, project.mapping)  # chiplet[3,3]: its 2 × 2 block in block placement
    assert sorted(group) == [10, 11, 14, 15]
    m = place_layers(project.mapping, layout, (0, 7), group)
    assert [(s.layers, s.devices) for s in m.stages] == [
        ((0, 7), [10, 11, 14, 15]), ((7, 13), [2, 3, 6, 7]), ((13, 19), [8, 9, 12, 13]), ((19, 26), [0, 1, 4, 5]),
    ]
    assert check_project(project.model_copy(update={"mapping": m})) == []


def test_placing_inside_a_stage_splits_it_and_uses_free_devices():
    project = wafer_project()  # tp 4, pp 4 on 64 tiles: plenty of free devices
    layout = stage_layout(project, chunks=1)
    first, last = layout.stage_layers[1][0]
    m = place_layers(project.mapping, layout, (first + 1, first + 2), [40, 41, 42, 43])
    assert m.pp == 6 and [s.stage for s in m.stages] == list(range(6))
    ranges = [s.layers for s in m.stages]
    assert ranges[1] == (first, first + 1) and ranges[2] == (first + 1, first + 2) and ranges[3] == (first + 2, last)
    assert m.stages[2].devices == [40, 41, 42, 43]
    used = [d for s in m.stages for d in s.devices]
    assert len(used) == len(set(used))  # no device serves two stages
    assert check_project(project.model_copy(update={"mapping": m})) == []


def test_a_drop_target_of_several_groups_becomes_several_stages():
    project = wafer_project()
    layout = stage_layout(project, chunks=1)
    m = place_layers(project.mapping, layout, (0, 8), list(range(48, 64)))  # 16 tiles = 4 stage groups
    placed = [s for s in m.stages if s.devices[0] >= 48]
    assert [s.layers for s in placed] == [(0, 2), (2, 4), (4, 6), (6, 8)]


def test_placement_refusals_say_why():
    project = chiplet()
    layout = stage_layout(project, chunks=1)
    with pytest.raises(EditRefused, match="tp × dp = 4"):
        place_layers(project.mapping, layout, (0, 7), [1, 2, 3])
    with pytest.raises(EditRefused, match="no free group"):
        place_layers(project.mapping, layout, (10, 12), [10, 11, 14, 15])  # 5 stages on 16 chiplets
    with pytest.raises(EditRefused, match="layers 0–25"):
        place_layers(project.mapping, layout, (20, 40), [0, 1, 4, 5])


def test_commands_are_single_undo_steps():
    doc = ProjectDocument(chiplet())
    seen = []
    doc.mappingChanged.connect(lambda: seen.append("mapping"))
    doc.push(PlaceLayers(doc, (0, 7), [10, 11, 14, 15], "chiplet[3,3]"))
    assert doc.undo_stack.count() == 1 and doc.undo_stack.undoText() == "Place L0–6 on chiplet[3,3]"
    assert doc.project.mapping.stages[0].devices == [10, 11, 14, 15]
    doc.push(AutoMap(doc, tp=2, pp=8, placement="snake"))
    assert doc.project.mapping.stages == [] and doc.project.mapping.pp == 8
    doc.undo_stack.undo()
    assert doc.project.mapping.stages[0].devices == [10, 11, 14, 15]
    doc.undo_stack.undo()
    assert doc.project.mapping == chiplet().mapping
    doc.undo_stack.redo()
    assert doc.project.mapping.stages[0].layers == (0, 7)
    assert seen == ["mapping"] * 5
    with pytest.raises(EditRefused):
        AutoMap(doc, tp=0)
    assert doc.undo_stack.count() == 2


def test_layer_rows_carry_units():
    rows = layer_rows(dgx_project())  # GPT 1.3B: embedding, 24 blocks, head
    assert len(rows) == 26
    block = rows[1].cells("0")
    assert block[4].endswith(" M") and block[5].endswith("FLOP") and block[6].endswith("B")
    assert block[1] == "0"
    assert totals(rows).startswith("26 layers · 1.")
    assert "parameters" in totals(rows) and "FLOP per sample" in totals(rows)
