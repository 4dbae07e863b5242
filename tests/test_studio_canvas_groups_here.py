"""Expert groups and context rings on a grown DGX: the canvas key places them on the cells shown (which GPUs
of an opened node form a ring; how many of a node's devices one ring takes when the node is one cell), and
the traffic key says where a collective's traffic is when no link drawn at this level carried it (inside the
nodes, or outside the opened one) instead of listing a colour no drawn link wears."""

from __future__ import annotations

import os
import re

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.io.presets import load_system  # noqa: E402
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings  # noqa: E402
from tilewright.engine.results import CATEGORIES  # noqa: E402
from tilewright.studio.model.palette import category_label  # noqa: E402
from tilewright.studio.ui.canvas.legend import Size, group_legend, traffic_legend  # noqa: E402
from tilewright.studio.ui.canvas.overlay_controller import Overlay  # noqa: E402

NODE = re.compile(r"/node\[(\d+)\]/gpu\[(\d+)\]$")


def gpt_over_two_nodes(**mapping) -> Project:
    """16 H100s (the DGX preset grows to two nodes of 8): a small GPT, or a small MoE with ``experts``."""
    experts = mapping.pop("experts", 0)
    moe = {"moe": {"experts": experts, "top_k": 2, "expert_ffn": 2048}} if experts else {}
    spec = GPTSpec(name="g", layers=2, hidden=1024, heads=16, seq_len=2048, vocab=32000, **moe)
    return Project(name="two-nodes", hardware=load_system("dgx-h100"), workload=spec,
                   mapping=Mapping(micro_batch=1, global_batch=16, **mapping),
                   run=RunSettings(dtype="bf16", engine="event"))


def engine_rings(project: Project) -> list[set[str]]:
    """The devices (node names) of each tp × cp block the engine runs one context ring over: the replicas
    d·cp … d·cp + cp − 1 of each stage (``plan.group_comm``), all their tensor ranks."""
    from tilewright.engine.plan.plan import build_plan
    from tilewright.studio.mapping import elaborated, stage_layout, workload_graph

    hw = elaborated(project.hardware, project.mapping.devices)
    names = [d.node for d in stage_layout(project).devices]
    cp = project.mapping.cp
    out = []
    for stage in build_plan(project, hw, workload_graph(project.workload)).stages:
        for d in range(len(stage.groups) // cp):
            out.append({names[dev] for c in range(cp) for dev in stage.groups[d * cp + c]})
    return out


def test_the_key_names_the_gpus_of_each_context_ring_in_an_opened_node(make_window):
    project = gpt_over_two_nodes(tp=2, cp=2, dp=4)
    w = make_window(project, size=(1280, 720))
    w.canvas.demo.set_mode(Overlay.context)
    overlay, scene = w.canvas.overlay, w.canvas.scene
    rings = engine_rings(project)
    assert len(rings) == 4 and all(len(r) == 4 for r in rings)  # tp 2 × cp 2 devices each, one per dp replica
    # at the top, a node is one cell holding two rings: the key says how many of its devices one ring takes
    top = group_legend(overlay, overlay.group_kind, Size.full)
    per_node = {r: len({NODE.search(n).group(1) for n in ring}) for r, ring in enumerate(rings)}
    assert set(per_node.values()) == {1}  # a ring never leaves its node here
    first_node = NODE.search(sorted(rings[0])[0]).group(1)
    assert f"4 of node {first_node}'s 8 devices" in top.replace("&#x27;", "'")
    # opened, each GPU is its own cell: the ring's GPUs by their indices, as the engine groups them
    scene.drill_into(f"{project.hardware.name}/node", 0)
    inside = group_legend(overlay, overlay.group_kind, Size.full)
    for g, ring in enumerate(rings):
        node0 = sorted(int(NODE.search(n).group(2)) for n in ring if NODE.search(n).group(1) == "0")
        if not node0:
            assert f"&nbsp;{g}&nbsp;&nbsp;stage 0 · gpu" not in inside  # a ring of node 1: not placed here
            continue
        assert node0 == list(range(node0[0], node0[-1] + 1))  # tp fastest, then cp: consecutive GPUs
        assert f"&nbsp;{g}&nbsp;&nbsp;stage 0 · gpu {node0[0]}–{node0[-1]}" in inside
    title = group_legend(overlay, overlay.group_kind, Size.title)
    assert "here: ring 0 = gpu 0–3" in title
    # and what the window shows fits it, at 1280 × 720
    legend = w.canvas.legend
    assert "here:" in legend.text() and legend.width() <= w.canvas.view.width() - 2 * 10


def links_by_place(result, hw_name: str) -> dict[str, dict[str, float]]:
    """Per category, busy link-seconds on links inside one node (both ends in node[k]), on links between a
    node and the top level (drawn at the top as the node's spoke), and on links leaving node[0]."""
    lanes = {lane.name for lane in result.timeline.lanes if lane.group == "links"}
    arrays, tl_lanes = result.timeline.arrays(), result.timeline.lanes
    busy: dict[str, dict[str, float]] = {}
    for lane, category, dur in zip(arrays["lane"], arrays["category"], arrays["dur"], strict=True):
        name = tl_lanes[lane].name
        if name in lanes:
            busy.setdefault(name, {})
            c = CATEGORIES[category]
            busy[name][c] = busy[name].get(c, 0.0) + float(dur)
    out: dict[str, dict[str, float]] = {"inside": {}, "top": {}, "leaving0": {}, "in0": {}}
    node_of = re.compile(rf"^{re.escape(hw_name)}/node\[(\d+)\]/")
    for s in result.link_utilisation:
        for c, sec in busy.get(s.name, {}).items():
            a, b = node_of.match(s.src), node_of.match(s.dst)
            places = []
            if a and b and a.group(1) == b.group(1):
                places.append("inside")
                if a.group(1) == "0":
                    places.append("in0")
            elif bool(a) != bool(b):
                places.append("top")
            if (a and a.group(1) == "0") != (b and b.group(1) == "0"):
                places.append("leaving0")
            for p in places:
                out[p][c] = out[p].get(c, 0.0) + sec
    return out


@pytest.mark.parametrize("mapping", [dict(tp=1, dp=16, ep=8, experts=8), dict(tp=2, cp=2, dp=4)])
def test_the_traffic_key_says_where_undrawn_traffic_is(make_window, qtbot, mapping):
    """ep 8 inside each node (the all-to-all never leaves it) and cp rings inside each node: at the top the
    key must not offer their colour as if a drawn spoke wore it; opened, it must not send the user back down."""
    project = gpt_over_two_nodes(**mapping)
    w = make_window(project, size=(1280, 720))
    with qtbot.waitSignal(w.runner.done, timeout=120_000):
        w.run_simulation()
    w.canvas.demo.set_mode(Overlay.traffic)
    overlay = w.canvas.overlay
    where = links_by_place(w.runner.last_result, project.hardware.name)
    hidden = "ep_comm" if project.mapping.ep > 1 else "cp_comm"
    assert where["inside"].get(hidden, 0) > 0 and hidden not in where["top"]  # the case the key must explain
    key = traffic_legend(overlay, Size.full)
    for category in overlay.carriage.categories():
        row = key.split(category_label(category), 1)[1].split("<br><span style='background", 1)[0]
        if category in where["top"]:
            assert "inside the" not in row and "no link drawn" not in row, category
        elif category in where["inside"]:
            assert "inside the nodes: open one to see it" in row, category
    assert "inside the nodes" in w.canvas.legend.text()  # the key on screen says it too, in whatever size fits
    w.canvas.scene.drill_into(f"{project.hardware.name}/node", 0)
    opened = traffic_legend(overlay, Size.full)
    assert hidden in where["in0"]
    row = opened.split(category_label(hidden), 1)[1].split("<br><span style='background", 1)[0]
    assert "inside the" not in row and "outside this node" not in row  # drawn on the node's NVSwitch spokes
    for category in overlay.carriage.categories():
        row = opened.split(category_label(category), 1)[1].split("<br><span style='background", 1)[0]
        if category not in where["in0"] and category in where["leaving0"]:
            assert "outside this node: Backspace goes up to see it" in row, category
