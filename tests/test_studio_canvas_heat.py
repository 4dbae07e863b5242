"""The heat map on the layout: a run's links and devices coloured by utilisation, at the shared time
cursor or averaged, with a legend in percent — on real simulator results of small systems."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from tilewright.engine.simulate import simulate  # noqa: E402
from tilewright.studio.document import ProjectDocument  # noqa: E402
from tilewright.studio.model.level_cells import level_cells  # noqa: E402
from tilewright.studio.samples import dgx_project, wafer_project  # noqa: E402
from tilewright.studio.ui.canvas import CanvasWidget  # noqa: E402
from tilewright.studio.ui.canvas.heat import place_links  # noqa: E402
from tilewright.studio.ui.canvas.overlay_controller import Overlay  # noqa: E402
from tilewright.studio.ui.selection import Selection  # noqa: E402


@pytest.fixture
def make_canvas(qtbot):
    def make(project):
        doc = ProjectDocument(project)
        widget = CanvasWidget(doc, Selection(doc))
        qtbot.addWidget(widget)
        widget.resize(1100, 750)
        widget.show()
        qtbot.waitExposed(widget)
        return widget

    return make


@pytest.fixture(scope="module")
def wafer_run():
    project = wafer_project()
    return project, simulate(project)


@pytest.fixture(scope="module")
def dgx_run():
    project = dgx_project()
    return project, simulate(project)


def test_links_are_placed_between_cells_on_spokes_and_on_ports():
    from tilewright.studio.mapping import stage_layout

    project = wafer_project()
    devices = stage_layout(project).devices
    wafer = project.hardware
    cells = level_cells(wafer, "wafer", "wafer", devices)
    keys = [("wafer/die[0,0]/tile[0,3]", "wafer/die[0,1]/tile[0,0]"),  # die-to-die: cells 0 and 1
            ("wafer/die[0,0]/tile[0,0]", "wafer/die[0,0]/tile[0,1]"),  # inside one die: not a canvas link
            ("wafer/dram@west[0]/ctrl", "wafer/dram@west[0]")]
    places = place_links(keys, cells, "wafer")
    assert places.mesh == {"wafer/die": {keys[0]: (0, 1)}}
    assert places.ports == {keys[2]: "dram@west[0]"}
    drilled = level_cells(wafer.children[0], "wafer/die", "wafer/die[1,0]", devices)
    assert drilled["wafer/die/tile"].nodes[5] == "wafer/die[1,0]/tile[1,1]"
    assert place_links([keys[1]], drilled, "wafer/die[1,0]").mesh == {}
    spokes = place_links([("cluster/node[1]/gpu[0]", "cluster/switch")],
                         level_cells(dgx_project().hardware, "cluster", "cluster",
                                     stage_layout(dgx_project()).devices), "cluster")
    assert spokes.spokes == {("cluster/node[1]/gpu[0]", "cluster/switch"): ("cluster/node", 1)}


def test_heat_averaged_and_at_cursor_colour_cells_links_and_ports(make_canvas, wafer_run):
    project, result = wafer_run
    w = make_canvas(project)
    w.show_result(result)
    overlay = w.overlay
    dies = w.scene.grids["wafer/die"]
    stages = dies.colours
    w.demo.set_mode(Overlay.average)
    assert overlay.heat_active and dies.colours is not stages
    average = dies.colours.pixels.copy()
    assert average.max() > 0  # some tiles computed
    assert w.scene.frame.heat and max(w.scene.frame.heat.values()) > 0  # DRAM ports carried traffic
    text = w.legend.text()
    assert "%" in text and "averaged over" in text and " s" in text
    w.demo.set_mode(Overlay.cursor)
    span = w.demo.span
    pictures = set()
    for f in (0.05, 0.3, 0.6, 0.9):
        w.demo.cursor.move_to(span * f)
        pictures.add(dies.colours.pixels.tobytes())
        assert "at " in w.legend.text()
    assert len(pictures) > 1  # the picture changes as the cursor moves
    w.demo.set_mode(Overlay.stages)
    assert dies.colours is stages and w.scene.frame.heat is None


def test_links_between_chiplets_glow(make_canvas):
    from tilewright.engine.io import load_project

    project = load_project("presets/projects/chiplet-bert-large.json")
    w = make_canvas(project)
    w.show_result(simulate(project))
    w.demo.set_mode(Overlay.average)
    chiplets = w.scene.grids["chiplet-mesh/chiplet"]
    links = chiplets.colours.links
    assert links and max(links.values()) > 0
    assert all(b - a in (1, 4) for a, b in links)  # only neighbours on the 4 × 4 mesh
    from tilewright.studio.ui.canvas.cell_paint import link_segments

    segments = link_segments(chiplets.grid_shape, 0, (0, 3, 0, 3), links)
    assert sum(len(v) for v in segments.values()) == len(links)


def test_switch_spokes_and_bar_take_the_heat(make_canvas, dgx_run):
    project, result = dgx_run
    w = make_canvas(project)
    w.show_result(result)
    w.demo.set_mode(Overlay.average)
    heat = w.scene.links.heat
    assert heat and max(heat.values()) > 0 and all(k[0] == "cluster/node" for k in heat)
    w.scene.drill_into("cluster/node", 1)
    assert w.scene.level_node == "cluster/node[1]"
    gpus = w.scene.grids["cluster/node/gpu"].colours
    assert gpus is not None and np.all(gpus.cells >= 0)  # node[1]'s GPUs have a busy share


def test_heat_survives_undo_of_the_mapping_and_a_new_project(make_canvas, wafer_run):
    project, result = wafer_run
    w = make_canvas(project)
    w.show_result(result)
    w.demo.set_mode(Overlay.average)
    w.scene.doc.replace(dgx_project())
    assert w.overlay.result is None and w.overlay.mode is Overlay.stages
    assert not w.demo.play_button.isEnabled()


def _analytic(project):
    data = project.model_dump(mode="json")
    data["run"]["engine"] = "analytic"
    return type(project).model_validate(data)


def test_analytic_heat_colours_devices_from_stage_lanes_and_says_links_are_missing(make_canvas):
    from tilewright.engine.io import load_project
    from tilewright.studio.model.metrics import average_device_activity
    from tilewright.studio.ui.canvas.heat import heat_frame

    project = _analytic(load_project("presets/projects/chiplet-bert-large.json"))
    result = simulate(project)
    assert not result.link_utilisation  # what the analytic engine does not record
    w = make_canvas(project)
    w.show_result(result)
    w.demo.set_mode(Overlay.average)
    nodes = [d.node for d in w.overlay.layout.devices]
    lanes = result.lane_devices
    expected = average_device_activity(result)
    assert set(expected) == {d for devices in lanes.values() for d in devices}  # every lane's devices
    frame = w.overlay.frame
    known = ~np.isnan(frame.devices)
    wanted = [expected[n] for n, k in zip(nodes, known, strict=True) if k]
    assert known.any() and np.allclose(frame.devices[known], wanted)
    assert w.scene.grids[next(iter(w.scene.grids))].colours.pixels.max() > 0  # tiles lit, not blank
    assert any("no link data for analytic runs" in n for n in frame.notes)
    assert "no link data for analytic runs" in w.legend.text()
    assert "traffic ÷ bandwidth" not in w.legend.text()  # no claim about link colours it cannot back
    at = heat_frame(result, nodes, 0.5 * w.demo.span)
    assert at.notes == frame.notes and not np.isnan(at.devices).all()


def test_an_event_run_with_link_series_has_no_notes(make_canvas, wafer_run):
    project, result = wafer_run
    assert result.link_utilisation
    w = make_canvas(project)
    w.show_result(result)
    w.demo.set_mode(Overlay.average)
    assert w.overlay.frame.notes == []
    assert "no link data" not in w.legend.text() and "traffic ÷ bandwidth" in w.legend.text()


def test_a_result_without_lanes_on_devices_says_so():
    from tilewright.studio.ui.canvas.heat import heat_frame
    from tilewright.studio.ui.results.synthetic import metrics_only_result

    bare = metrics_only_result(engine="analytic", iteration_time_s=2.0)
    frame = heat_frame(bare, ["a", "b"], None)
    assert np.isnan(frame.devices).all() and frame.links == {}
    assert frame.notes == ["no device activity: this analytic run has no timeline lanes on devices",
                           "no link data for analytic runs"]
