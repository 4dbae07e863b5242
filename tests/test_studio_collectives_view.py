"""Expert and context parallelism made visible: the links view and the canvas tell the expert all-to-all apart
from the data-parallel all-reduce (what each link carried, busy time by category from the Gantt's link lanes;
a "Carrying" choice listing only the links a collective used; a "Link traffic" canvas overlay with
spokes stacked by share), and the canvas colours the engine's expert-parallel groups and context rings —
by hand on made-up runs, and on real MoE runs whose all-to-all crosses two nodes."""

from __future__ import annotations

import dataclasses
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from tilewright.engine.io.presets import load_system  # noqa: E402
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings  # noqa: E402
from tilewright.engine.results import CATEGORIES, Series, Timeline  # noqa: E402
from tilewright.studio.model.link_carriage import LinkCarriage, link_carriage  # noqa: E402
from tilewright.studio.model.palette import CATEGORY_COLOURS  # noqa: E402
from tilewright.studio.model.run_record import prepare_record  # noqa: E402
from tilewright.studio.samples import dgx_project  # noqa: E402
from tilewright.studio.ui.canvas.heat import LinkPlaces  # noqa: E402
from tilewright.studio.ui.canvas.legend import NO_TRAFFIC, Size, traffic_legend  # noqa: E402
from tilewright.studio.ui.canvas.overlay_controller import Overlay  # noqa: E402
from tilewright.studio.ui.canvas.traffic import dominant, grid_link_traffic, shares, spoke_traffic  # noqa: E402
from tilewright.studio.ui.results.links_view import ANY_TRAFFIC, LinksView  # noqa: E402
from tilewright.studio.ui.results.synthetic import tiny_result  # noqa: E402
from tilewright.studio.ui.results.time_cursor import TimeCursor  # noqa: E402

A = "sys/node[0]/gpu[0] → sys/switch"
B = "sys/switch → sys/node[1]/gpu[0]"
C = "sys/node[1]/gpu[0] → sys/switch"  # busy, but without a Gantt lane: its traffic is not split


def mixed_run():
    """Link A: all-to-all 0–3 s and 5–6 s (4 s), all-reduce 8–9 s (1 s); link B: all-reduce 2–4 s only;
    a compute lane's all-to-all slice must not count as link traffic."""
    tl = Timeline()
    stage = tl.lane("stage 0", "compute", "2 devices from sys/node[0]/gpu[0]")
    a, b = tl.lane(A, "links", "25 GB/s"), tl.lane(B, "links", "25 GB/s")
    tl.add(stage, 0.0, 7.0, "ep_comm", "dispatch")
    tl.add(a, 0.0, 3.0, "ep_comm", "80 %")
    tl.add(a, 5.0, 1.0, "ep_comm", "60 %")
    tl.add(a, 8.0, 1.0, "dp_comm", "100 %")
    tl.add(b, 2.0, 2.0, "dp_comm", "50 %")
    links = [Series(A, "fraction", [0.0, 3.0, 5.0, 6.0, 8.0, 9.0], [0.8, 0.0, 0.6, 0.0, 1.0, 0.0], 1.0),
             Series(B, "fraction", [0.0, 2.0, 4.0], [0.0, 0.5, 0.0], 1.0),
             Series(C, "fraction", [0.0], [0.9], 1.0)]
    return dataclasses.replace(tiny_result(), timeline=tl, link_utilisation=links)


def test_busy_time_by_category_per_link():
    carriage = link_carriage(mixed_run().timeline)
    assert carriage.by_link == {A: {"ep_comm": 4.0, "dp_comm": 1.0}, B: {"dp_comm": 2.0}}
    assert carriage.categories() == ["ep_comm", "dp_comm"]  # 4 link-seconds, then 3
    assert carriage.carries(A, "ep_comm") and not carriage.carries(B, "ep_comm") and not carriage.carries(C, "dp_comm")
    assert carriage.describe(A) == "expert all-to-all 4 s (80 %) · dp comm 1 s (20 %)"
    assert carriage.describe(C) == ""


def test_carrying_lists_only_the_links_of_that_collective(qtbot):
    view = LinksView(TimeCursor())
    qtbot.addWidget(view)
    view.set_result(mixed_run())
    names = lambda: [s.name for s, _ in view.ranked]  # noqa: E731
    assert view.carrying.currentText() == ANY_TRAFFIC and view.carrying.isEnabled()
    assert names() == [C, A, B]  # busiest first: 90 %, 40 %, 10 %
    assert [view.carrying.itemText(i) for i in range(view.carrying.count())] == [
        ANY_TRAFFIC, "expert all-to-all", "dp comm"]
    a_row = names().index(A)
    assert "busy carrying expert all-to-all 4 s (80 %)" in view.model.index(a_row).data(Qt.ItemDataRole.ToolTipRole)
    view.carrying.setCurrentIndex(1)
    assert names() == [A] and view.model.rowCount() == 1 and view.selected() == [0]
    assert "1 of 3 links" in view.heading.text() and "expert all-to-all" in view.heading.text()
    assert "carrying expert all-to-all" in view.export_title()
    assert len(view.curves) == 1
    view.carrying.setCurrentIndex(2)
    assert names() == [A, B]
    view.carrying.setCurrentIndex(0)
    assert names() == [C, A, B] and "3 links" in view.heading.text()


def test_a_run_with_one_kind_of_traffic_has_nothing_to_choose(qtbot):
    view = LinksView(TimeCursor())
    qtbot.addWidget(view)
    record = prepare_record(dgx_project(), tiny_result(), 0.5)
    view.set_result(record.result, record.ranked_links, record.carriage)
    assert not view.carrying.isEnabled() and view.model.rowCount() == 2


@pytest.fixture
def moe_across_nodes() -> Project:
    """16 experts, ep 16 over dp 16 on DGX-H100s: the all-to-all crosses the two nodes' network links."""
    spec = GPTSpec(name="moe16", layers=2, hidden=1024, heads=16, seq_len=1024, vocab=32000,
                   moe={"experts": 16, "top_k": 2, "expert_ffn": 2048})
    return Project(name="moe16", hardware=load_system("dgx-h100"), workload=spec,
                   mapping=Mapping(tp=1, dp=16, ep=16, micro_batch=1, global_batch=32),
                   run=RunSettings(dtype="bf16", engine="event"))


def test_a_moe_run_shows_which_links_the_all_to_all_loads(make_window, qtbot, moe_across_nodes):
    w = make_window(moe_across_nodes, size=(1280, 720))
    with qtbot.waitSignal(w.runner.done, timeout=120_000):
        w.run_simulation()
    links = w.results.links
    w.results.tabs.setCurrentWidget(links)
    qtbot.waitUntil(lambda: links.carrying.count() > 1, timeout=10_000)
    timeline = w.results.record.result.timeline
    carried_ep = set()  # independently of link_carriage: walk the slices
    ep = CATEGORIES.index("ep_comm")
    arrays = timeline.arrays()
    for lane, category, dur in zip(arrays["lane"], arrays["category"], arrays["dur"], strict=True):
        if timeline.lanes[lane].group == "links" and category == ep and dur > 0:
            carried_ep.add(timeline.lanes[lane].name)
    assert carried_ep, "the all-to-all crosses nodes: some network link must carry it"
    labels = [links.carrying.itemText(i) for i in range(links.carrying.count())]
    assert "expert all-to-all" in labels and "dp comm" in labels
    links.carrying.setCurrentIndex(labels.index("expert all-to-all"))
    assert {s.name for s, _ in links.ranked} == carried_ep
    assert links.model.rowCount() == len(carried_ep) and all(
        "expert all-to-all" in links.model.index(i).data(Qt.ItemDataRole.ToolTipRole) for i in range(len(carried_ep)))


# -- on the canvas --------------------------------------------------------------------------------------
def test_traffic_gathers_both_directions_onto_spokes_and_mesh_links():
    up, down, other = ("s/n[0]", "s/sw"), ("s/sw", "s/n[0]"), ("s/n[1]", "s/sw")
    east, west = ("s/g/c[0]", "s/g/c[1]"), ("s/g/c[1]", "s/g/c[0]")
    places = LinkPlaces(mesh={"s/g": {east: (0, 1), west: (0, 1)}},
                        spokes={up: ("s/n", 0), down: ("s/n", 0), other: ("s/n", 1)})
    carried = {up: {"ep_comm": 3.0}, down: {"ep_comm": 1.0, "dp_comm": 4.0}, other: {"dp_comm": 2.0},
               east: {"ep_comm": 1.0}, west: {"dp_comm": 0.5}}
    assert spoke_traffic(places, carried) == {("s/n", 0): {"ep_comm": 4.0, "dp_comm": 4.0},
                                              ("s/n", 1): {"dp_comm": 2.0}}
    assert spoke_traffic(places, carried, bundled=True) == {("s/n", -1): {"ep_comm": 4.0, "dp_comm": 6.0}}
    assert grid_link_traffic(places, "s/g", carried) == {(0, 1): {"ep_comm": 1.0, "dp_comm": 0.5}}
    # the timeline's order (dp_comm before ep_comm), whatever the order the split was built in
    assert shares({"ep_comm": 1.0, "dp_comm": 3.0}) == [("dp_comm", 0.75), ("ep_comm", 0.25)]
    assert dominant({"ep_comm": 1.0, "dp_comm": 0.5}) == "ep_comm" and dominant({}) is None


def test_the_canvas_draws_the_all_to_all_apart_from_the_all_reduce(make_window, qtbot, moe_across_nodes):
    w = make_window(moe_across_nodes, size=(1280, 720))
    demo = w.canvas.demo
    modes = [demo.mode_box.itemText(i) for i in range(demo.mode_box.count())]
    traffic_row = modes.index("Link traffic")
    assert not demo.mode_box.model().item(traffic_row).isEnabled()  # nothing to show before a run
    with qtbot.waitSignal(w.runner.done, timeout=120_000):
        w.run_simulation()
    assert demo.mode_box.model().item(traffic_row).isEnabled()
    demo.set_mode(Overlay.traffic)
    links = w.canvas.scene.links
    assert links.traffic, "the nodes' spokes to the fat-tree carry the all-to-all and the all-reduce"
    result = w.runner.last_result
    # independently: sum the link lanes' slices of every link between node 0 and the fat-tree (node 0's spoke;
    # the links inside the node, to its own switch, are inside the cell)
    fat_tree = f"{w.doc.project.hardware.name}/switch"
    node0 = {s.name for s in result.link_utilisation if fat_tree in (s.src, s.dst) and "/node[0]/" in s.src + s.dst}
    arrays, lanes = result.timeline.arrays(), result.timeline.lanes
    expected: dict[str, float] = {}
    for lane, category, dur in zip(arrays["lane"], arrays["category"], arrays["dur"], strict=True):
        if lanes[lane].name in node0 and lanes[lane].group == "links":
            expected[CATEGORIES[category]] = expected.get(CATEGORIES[category], 0.0) + float(dur)
    key = next(k for k in links.spoke_keys if k[1] == 0)
    assert set(links.traffic[key]) == set(expected) == {"ep_comm", "dp_comm"}
    for category, seconds in expected.items():
        assert links.traffic[key][category] == pytest.approx(seconds)
    line = links.spokes[links.spoke_keys.index(key)]
    pieces = links.spoke_segments(line, key)
    colours = {colour: piece.length() / line.length() for piece, colour in pieces}
    total = sum(expected.values())
    assert colours[CATEGORY_COLOURS["ep_comm"]] == pytest.approx(expected["ep_comm"] / total)
    assert colours[CATEGORY_COLOURS["dp_comm"]] == pytest.approx(expected["dp_comm"] / total)
    assert "expert all-to-all" in w.canvas.legend.text() and "dp comm" in w.canvas.legend.text()
    demo.set_mode(Overlay.stages)
    assert links.traffic is None and "Pipeline stages" in w.canvas.legend.text()


def test_a_run_without_split_links_says_so_in_the_key(qtbot):
    """The analytic engine records no links: the key says why the links keep their colour."""
    class Bare:
        carriage = LinkCarriage()

    assert NO_TRAFFIC in traffic_legend(Bare(), Size.full)  # type: ignore[arg-type]


# -- expert and context groups on the canvas ----------------------------------------------------------
def grouped_project(**mapping) -> Project:
    spec = GPTSpec(name="moe8", layers=4, hidden=1024, heads=16, seq_len=2048, vocab=32000,
                   moe={"experts": 8, "top_k": 2, "expert_ffn": 2048})
    return Project(name="groups", hardware=load_system("dgx-a100"), workload=spec,
                   mapping=Mapping(micro_batch=1, global_batch=16, **mapping),
                   run=RunSettings(dtype="bf16", engine="analytic"))


def engine_stage_groups(project: Project) -> list[list[list[int]]]:
    """Each stage's dp × cp replicas as the engine's plan holds them."""
    from tilewright.engine.plan.plan import build_plan
    from tilewright.studio.mapping import elaborated, workload_graph

    hw = elaborated(project.hardware, project.mapping.devices)
    return [st.groups for st in build_plan(project, hw, workload_graph(project.workload)).stages]


@pytest.mark.parametrize("mapping", [
    dict(tp=2, pp=2, dp=2, cp=2, ep=2),  # ep over dp × cp replicas, tp 2 inside each
    dict(tp=2, pp=1, dp=4, cp=1, ep=4, expert_tp=1, sequence_parallel=True),  # folded: ep × etp over tp × dp
])
def test_groups_are_the_engines(mapping):
    """Every all-to-all group the engine forms (``group_comm``: replicas k·ep … or the folded groups) is one
    colour, and so is every context ring (replicas d·cp …); different groups, different colours."""
    from tilewright.engine.plan.group_comm import folded, folded_groups
    from tilewright.studio.mapping import stage_layout
    from tilewright.studio.model.parallel_groups import GroupKind, parallel_groups

    project = grouped_project(**mapping)
    m = project.mapping
    layout = stage_layout(project)
    experts = parallel_groups(project, layout, GroupKind.expert)
    context = parallel_groups(project, layout, GroupKind.context)
    assert experts is not None and (context is None) == (m.cp == 1)
    seen_ep: set[int] = set()
    for groups in engine_stage_groups(project):
        etp = m.expert_tp
        if folded(groups, etp):
            ep_sets = folded_groups(groups, m.ep, etp)[0]
        else:
            ep_sets = [[groups[k * m.ep + e][i] for e in range(m.ep)]
                       for k in range(len(groups) // m.ep) for i in range(len(groups[0]))]
        for members in ep_sets:
            assert len({int(experts.of_device[d]) for d in members}) == 1, members
        seen_ep |= {int(experts.of_device[d]) for g in groups for d in g}
        if context is not None:
            rings = [[groups[d * m.cp + c][i] for c in range(m.cp)]
                     for d in range(len(groups) // m.cp) for i in range(len(groups[0]))]
            for members in rings:
                assert len({int(context.of_device[d]) for d in members}) == 1, members
            assert len({int(context.of_device[d]) for g in groups for d in g}) == len(groups) // m.cp
    assert len(seen_ep) == experts.count == m.pp * m.tp * m.dp * m.cp // (m.ep * (m.expert_tp or m.tp))


def test_the_canvas_colours_expert_groups_and_context_rings(make_window):
    project = grouped_project(tp=2, pp=2, dp=2, cp=2, ep=2)
    w = make_window(project, size=(1600, 1000))
    demo, overlay = w.canvas.demo, w.canvas.overlay
    demo.set_mode(Overlay.experts)  # no run needed: the groups are the mapping's
    assert "Expert-parallel groups" in w.canvas.legend.text() and "ep 2" in w.canvas.legend.text()
    groups = overlay.groups(overlay.group_kind)
    items = [item for item in w.canvas.scene.grids.values() if item.colours is not None]
    assert items and all(len(item.colours.palette) == groups.count for item in items)
    assert any("ep group" in label for item in items for label in item.colours.labels or [])
    demo.set_mode(Overlay.context)
    assert "Context-parallel rings" in w.canvas.legend.text() and "cp 2" in w.canvas.legend.text()
    assert overlay.groups(overlay.group_kind).count == 2 * 2  # pp × (dp × cp / cp) rings of tp × cp devices
    w.workload.editors["cp"].type_and_commit("1")
    assert w.workload.apply_auto_map()
    assert "cp 1: every device runs whole sequences" in w.canvas.legend.text()


@pytest.mark.parametrize("kind_name, mapping", [("context", dict(tp=2, cp=2))])
def test_an_inference_project_draws_no_groups_the_engine_does_not_form(kind_name, mapping):
    """The engine runs an inference pass at cp 1 whatever the mapping keeps from training
    (``plan.plan.build_plan``): the canvas draws no rings for it, and the key says the degree is for training
    instead of claiming it is 1."""
    from tilewright.engine.simulate import make_plan, simulate
    from tilewright.studio.mapping import stage_layout
    from tilewright.studio.model.parallel_groups import GroupKind, idle_degree, parallel_groups

    kind = GroupKind(kind_name)
    train = grouped_project(**mapping)
    infer = Project.model_validate({**train.model_dump(), "run": {**train.run.model_dump(), "mode": "infer"}})
    assert parallel_groups(train, stage_layout(train), kind) is not None  # the same mapping trains with them
    prefix = "ep:" if kind is GroupKind.expert else "cp:"
    segments = [s for p in make_plan(train).stages[0].passes.values() for s in p.segments]
    exchanged = [name for s in segments for name, _ in ((s.comm,) if s.comm else ()) + s.hidden]
    assert any(k.startswith(prefix) for k in exchanged)  # the groups exchange when training (timed or hidden) …
    category = "ep_comm" if kind is GroupKind.expert else "cp_comm"
    served = simulate(infer)
    assert served.mode == "infer" and served.time_breakdown_s.get(category, 0.0) == 0  # … and form nowhere there
    degree = train.mapping.ep if kind is GroupKind.expert else train.mapping.cp
    assert parallel_groups(infer, stage_layout(infer), kind) is None
    assert idle_degree(infer, kind) == degree and idle_degree(train, kind) == 1
    from types import SimpleNamespace

    from tilewright.studio.ui.canvas.legend import group_legend

    layout = stage_layout(infer)
    overlay = SimpleNamespace(layout=layout, doc=SimpleNamespace(project=infer),
                              groups=lambda k: parallel_groups(infer, layout, k))
    key = group_legend(overlay, kind)  # type: ignore[arg-type]
    assert f"{kind_name[0]}p {degree}: training only" in key and f"{kind_name[0]}p 1:" not in key


def test_an_inference_project_serving_experts_in_parallel_draws_the_groups_the_engine_forms():
    """ep 2 dividing dp 2: the served pass runs expert parallelism with data-parallel attention
    (``plan.served_experts``): the engine times its all-to-all and the canvas draws those groups, none idle."""
    from tilewright.engine.simulate import simulate
    from tilewright.studio.mapping import stage_layout
    from tilewright.studio.model.parallel_groups import GroupKind, idle_degree, parallel_groups

    train = grouped_project(tp=2, dp=2, ep=2)
    infer = Project.model_validate({**train.model_dump(), "run": {**train.run.model_dump(), "mode": "infer"}})
    assert simulate(infer).time_breakdown_s.get("ep_comm", 0.0) > 0
    assert parallel_groups(infer, stage_layout(infer), GroupKind.expert) is not None
    assert idle_degree(infer, GroupKind.expert) == 1
