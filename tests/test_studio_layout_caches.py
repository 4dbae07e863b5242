"""What the canvas draws from is computed once per project value and can be computed ahead, off the GUI
thread: the stage layout and the level cells are shared while the project is unchanged and recomputed
after an edit (an undo command makes a new project, its undo brings the old one back); the memory
figures of every design read off one elaborated system graph equal those of elaborating each design on
its own; and opening through the worker leaves the GUI thread none of that work."""

from __future__ import annotations

import os
import threading

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.hardware import elaborate  # noqa: E402
from tilewright.engine.io import load_project  # noqa: E402
from tilewright.engine.io.presets import preset_path  # noqa: E402
from tilewright.studio import mapping, opening, summary  # noqa: E402
from tilewright.studio.commands import SetMappingField  # noqa: E402
from tilewright.studio.document import ProjectDocument  # noqa: E402
from tilewright.studio.model import level_cells as cells  # noqa: E402
from tilewright.studio.samples import wafer_project  # noqa: E402


@pytest.fixture
def fresh_figures(monkeypatch):
    monkeypatch.setattr(summary, "_FIGURES", {})


def _designs(project):
    return list(opening._components(project.hardware))


@pytest.mark.parametrize("preset", ["palm-wafer-t18b", "chiplet-bert-large", "gpt3-dgx-a100", "tpu-v4-llama2-7b"])
def test_figures_from_the_system_graph_equal_each_design_elaborated_alone(preset, fresh_figures, monkeypatch):
    project = load_project(preset_path("projects", preset))
    alone = {
        c.name: (summary.instance_memory(c), {m.name: summary.own_ports(c, m) for m in c.memories})
        for c in _designs(project)
    }
    monkeypatch.setattr(summary, "_FIGURES", {})
    graph = elaborate(project.hardware, devices_needed=project.mapping.devices)
    summary.remember_instances(graph)
    if graph.root is project.hardware:  # grown to the run, its designs are not the declared ones
        monkeypatch.setattr(summary, "elaborate", lambda *_a, **_k: pytest.fail("elaborated a design again"))
    for c in _designs(project):
        memory, ports = alone[c.name]
        assert summary.instance_memory(c) == pytest.approx(memory), c.name
        assert {m.name: summary.own_ports(c, m) for m in c.memories} == ports, c.name


def test_the_edge_ports_of_a_die_are_counted_from_its_first_instance(fresh_figures):
    project = load_project(preset_path("projects", "palm-wafer-t18b"))  # 5 × 4 dies, DRAM on two edges
    die = project.hardware.children[0]
    dram = next(m for m in die.memories if m.attach)
    summary.remember_instances(elaborate(project.hardware))
    graph = elaborate(die.model_copy(update={"rows": 1, "cols": 1}))
    expected = sum(p.memory.name == dram.name for p in graph.memory_ports)
    assert summary.own_ports(die, dram) == expected > 1
    tiles = die.children[0].count
    assert summary.instance_memory(die)["sram"] == pytest.approx(tiles * die.children[0].memories[0].capacity_bytes)


def test_the_layout_is_shared_until_an_edit_and_comes_back_with_its_undo(qapp):
    doc = ProjectDocument(wafer_project())
    before = mapping.stage_layout(doc.project)
    assert mapping.stage_layout(doc.project) is before
    assert mapping.stage_layout(doc.project, chunks=1) is not before  # another question, another answer
    doc.push(SetMappingField(doc, "pp", 2))
    after = mapping.stage_layout(doc.project)
    assert after is not before and after.stages == 2 and before.stages == 4
    doc.undo_stack.undo()
    assert mapping.stage_layout(doc.project) is before
    assert mapping.display_hardware(doc.project) is mapping.display_hardware(doc.project)


def test_level_cells_are_shared_for_the_same_level_and_devices():
    project = wafer_project()
    hw, layout = project.hardware, mapping.stage_layout(project)
    first = cells.level_cells(hw, hw.name, hw.name, layout.devices)
    assert cells.level_cells(hw, hw.name, hw.name, layout.devices) is first
    other = cells.level_cells(hw, hw.name, hw.name, list(layout.devices))  # another device list
    assert other is not first and other.keys() == first.keys()


def test_opening_through_the_worker_leaves_the_gui_thread_only_items(make_window, qtbot, monkeypatch):
    """Every computation the canvas and the workload panel read is done by the opening worker."""
    monkeypatch.setattr(opening, "BACKGROUND_DEVICES", 0)
    monkeypatch.setattr(summary, "_FIGURES", {})
    on_gui: list[str] = []

    def watched(module, name):
        real = getattr(module, name)

        def call(*args, **kwargs):
            if threading.current_thread() is threading.main_thread():
                on_gui.append(name)
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, call)

    for module, name in (
        (mapping, "_stage_layout"),
        (mapping, "elaborate"),
        (mapping, "grow"),
        (summary, "elaborate"),
        (cells, "_level_cells"),
    ):
        watched(module, name)
    w = make_window(load_project(preset_path("projects", "chiplet-bert-large")))
    project = wafer_project().model_copy(update={"name": "opened"})
    on_gui.clear()
    with qtbot.waitSignal(w.opened, timeout=60_000):
        w.open_project(project)
    qtbot.wait(100)
    assert w.doc.project is project and w.canvas.scene.grids
    assert on_gui == []


def test_a_cell_drawn_from_samples_still_counts_every_device_and_stage():
    """A die of 64 × 64 tiles is drawn from 16 × 16 samples; its label and a layer drop onto it use all
    4,096 tiles, so every stage placed on it is named."""
    from tilewright.studio.ui.canvas.overlay import stage_colours

    project = load_project(preset_path("projects", "palm-wafer-t18b"))
    die = project.hardware.children[0].model_copy(update={"rows": 1, "cols": 1})
    tile = die.children[0].model_copy(update={"rows": 64, "cols": 64})
    die = die.model_copy(update={"children": [tile]})
    project = project.model_copy(update={"hardware": project.hardware.model_copy(update={"children": [die]})})
    hw, layout = project.hardware, mapping.stage_layout(project)
    assert not layout.problem and layout.stages > 1
    grid = cells.level_cells(hw, hw.name, hw.name, layout.devices)[f"{hw.name}/die"]
    assert grid.raster.shape[1:] == (cells.MAX_RASTER, cells.MAX_RASTER)
    assert grid.devices(0) == list(range(64 * 64)) == grid.all_devices()
    assert stage_colours(grid, layout).labels[0].endswith(f"{layout.stages} stages")
