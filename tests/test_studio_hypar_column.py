"""The workload panel's HyPar column: HyPar's per-layer, per-level choice for CNN workloads, the mapping's
own choice next to it, and Apply as one undoable step that writes what the engine's ``apply_partition``
writes."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from tilewright.engine.io import load_project  # noqa: E402
from tilewright.engine.ir.mapping import LayerParallelism, Mapping  # noqa: E402
from tilewright.engine.search.hypar.partition import hypar, hypar_layers  # noqa: E402
from tilewright.engine.search.hypar.report import apply_partition  # noqa: E402
from tilewright.engine.workloads import build_workload  # noqa: E402
from tilewright.studio.hypar_choice import accelerators_for, mapped_choices  # noqa: E402
from tilewright.studio.mapping_layers import COLUMNS  # noqa: E402

VGG = "presets/projects/hypar-vgg-a.json"
HYPAR, MAPPED = len(COLUMNS), len(COLUMNS) + 1


def _column(table, col: int) -> dict[int, str]:
    items = [table.topLevelItem(i) for i in range(table.topLevelItemCount())]
    return {int(item.text(0)): item.text(col) for item in items}


def test_hypar_column_shows_every_weighted_layer_and_apply_is_one_undo_step(make_window):
    project = load_project(VGG)
    w = make_window(project)
    panel, table, stack = w.workload, w.workload.table, w.doc.undo_stack
    layers = hypar_layers(build_workload(project.workload))
    m = project.mapping
    best = hypar(layers, accelerators_for(m.devices), m.global_batch, project.run.dtype.value)
    assert len(best.levels) > 1  # a multi-level partition: the compact form is what is checked

    shown = _column(table, HYPAR)
    assert not table.isColumnHidden(HYPAR) and table.isColumnHidden(MAPPED)  # nothing mapped yet
    assert set(shown) == {layer.index for layer in layers}
    for i, layer in enumerate(layers):
        assert shown[layer.index].split("·") == [lv.choices[i] for lv in best.levels]
    assert panel.hypar.isVisibleTo(panel) and "HyPar" in panel.hypar.summary.text()
    assert " GB " in panel.hypar.summary.text() and " % of " in panel.hypar.summary.text()  # with units

    before, steps = w.doc.project.mapping, stack.count()
    assert panel.hypar.apply_button.isEnabled()
    panel.hypar.apply_button.click()
    assert stack.count() == steps + 1 and stack.undoText() == "Apply HyPar"
    assert w.doc.project.mapping == apply_partition(project, best).mapping != before
    assert not table.isColumnHidden(MAPPED)
    assert _column(table, MAPPED) == shown  # the mapping now holds every level of every layer
    assert not panel.hypar.apply_button.isEnabled() and panel.hypar.apply_button.text() == "HyPar applied"

    stack.undo()
    assert w.doc.project.mapping == before
    assert table.isColumnHidden(MAPPED) and panel.hypar.apply_button.isEnabled()
    assert _column(table, HYPAR) == shown
    stack.redo()
    assert _column(table, MAPPED) == shown


def test_no_hypar_column_for_a_transformer(make_window):
    w = make_window(load_project("presets/projects/chiplet-bert-large.json"))
    assert w.workload.table.isColumnHidden(HYPAR) and w.workload.table.isColumnHidden(MAPPED)
    assert not w.workload.hypar.isVisibleTo(w.workload)


def test_a_batch_hypar_cannot_split_says_why_and_offers_no_apply(make_window):
    project = load_project(VGG)
    data = project.mapping.model_dump() | {"tp": 16, "dp": 1, "micro_batch": 5, "global_batch": 100}
    w = make_window(project.model_copy(update={"mapping": Mapping.model_validate(data)}))
    section = w.workload.hypar
    assert not w.workload.table.isColumnHidden(HYPAR)  # the choice still shows
    assert "cannot apply" in section.summary.text() and "100" in section.summary.text()
    assert not section.apply_button.isEnabled() and not section.apply()


def test_mapped_choices_read_levels_or_a_single_choice_for_every_level():
    mapping = Mapping(layer_parallelism=[LayerParallelism(layer=1, levels=["dp", "mp"]),
                                         LayerParallelism(layer=2, parallelism="mp")])
    assert mapped_choices(mapping, [0, 1, 2]) == {0: "dp (default)", 1: "dp·mp", 2: "mp (every level)"}
    assert mapped_choices(Mapping(), [0, 1]) == {}
