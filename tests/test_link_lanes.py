"""Which links get Gantt lanes (``engines.event.links.laned_links``): the busiest overall and, in turn with them,
the busiest for each category that loaded links — so the Mixtral preset's expert all-to-all on each node's NVLinks
has lanes although the data-parallel reduction on the NICs fills the run's busiest links — within the same
budget of lanes and slices."""

from __future__ import annotations

from collections import Counter

import pytest
from tilewright.engine.engines.event import links as lane_choice
from tilewright.engine.engines.event.engine import EventEngine
from tilewright.engine.engines.event.links import laned_links
from tilewright.engine.engines.event.simulation import Simulation
from tilewright.engine.engines.result_builder import build_result
from tilewright.engine.io.presets import load_project_preset
from tilewright.engine.plan.program import program_for
from tilewright.engine.results.timeline import CATEGORIES
from tilewright.engine.simulate import make_plan


def test_every_category_gets_its_busiest_links_within_the_budget():
    """Links 0-5 carry a heavy reduction, 6-9 a light all-to-all, link 3 a little of it too: the two take links
    in turn, the reduction first (its busiest link is the run's), each its own busiest."""
    per = {lk: {"dp_comm": 100.0 - lk} for lk in range(6)}
    per[3]["ep_comm"] = 1.0
    per |= {lk: {"ep_comm": 20.0 - lk} for lk in range(6, 10)}
    bandwidth = [1.0] * 10
    ranked = sorted(per, key=lambda lk: -sum(per[lk].values()) / bandwidth[lk])
    assert laned_links(ranked, per, bandwidth, budget=4) == {0, 1, 6, 7}
    assert laned_links(ranked, per, bandwidth, budget=3) == {0, 1, 6}
    assert laned_links(ranked, per, bandwidth, budget=1) == {0}
    assert laned_links(ranked, per, bandwidth, budget=20) == set(range(10))
    # a category ranks links by its own bytes over their bandwidth: link 9's all-to-all on a tenth of the
    # bandwidth is the heaviest load of the run, so it comes first
    slow = [1.0] * 9 + [0.1]
    assert laned_links(ranked, per, slow, budget=1) == {9}
    assert laned_links(ranked, per, slow, budget=3) == {9, 0, 6}


@pytest.fixture(scope="module")
def mixtral():
    """The Mixtral preset's event run (ep 8 inside each node, dp over the NICs): its simulation and result."""
    sim = Simulation(program_for(make_plan(load_project_preset("mixtral-8x7b-dgx-h100"))))
    sim.run()
    return sim, build_result(sim.program, EventEngine().measure(sim))


def _link_lane_categories(result) -> dict[str, Counter]:
    tl = result.timeline
    a = tl.arrays()
    out: dict[str, Counter] = {}
    for lane, c, dur in zip(a["lane"], a["category"], a["dur"], strict=True):
        if tl.lanes[lane].group in ("links", "memory"):
            out.setdefault(tl.lanes[lane].name, Counter())[CATEGORIES[c]] += dur
    return out


def test_the_mixtral_all_to_all_has_link_lanes(mixtral):
    sim, result = mixtral
    per = sim.net.link_category_bytes()
    hw = sim.plan.hw
    busiest = result.link_utilisation[:lane_choice.MAX_LINK_LANES]
    by_name = {f"{hw.links[lk].src} → {hw.links[lk].dst}": cats for lk, cats in per.items()}
    # the run's busiest links carry no expert traffic: lanes for them alone would show none of it
    assert not any(by_name[s.name].get("ep_comm", 0.0) > 0 for s in busiest)
    lanes = _link_lane_categories(result)
    assert len(lanes) <= lane_choice.MAX_LINK_LANES
    assert any(split.get("ep_comm", 0.0) > 0 for split in lanes.values())
    assert any(split.get("dp_comm", 0.0) > 0 for split in lanes.values())
    assert result.link_utilisation[0].name in lanes  # the busiest link keeps its lane
    nvlinks = [name for name in lanes if "node[" in name.split(" → ")[0] and "node[" in name.split(" → ")[1]]
    assert nvlinks and all(by_name[name].get("ep_comm", 0.0) > 0 for name in nvlinks)
    carried = {c for cats in per.values() for c, n in cats.items() if n > 0}
    assert carried <= {c for split in lanes.values() for c in split}  # every category that loaded links shows


def test_laned_links_keep_full_series_and_the_slice_budget(mixtral, monkeypatch):
    """Lanes cost what they did: at most ``MAX_LINK_LANES`` of them, at most ``MAX_LINK_SLICES`` slices, and
    every laned link's series at full resolution even past the point budget."""
    sim = Simulation(mixtral[0].program)  # a fresh recorder: measuring adds the link lanes to it
    sim.run()
    monkeypatch.setattr(lane_choice, "MAX_SERIES_POINTS", 0)
    monkeypatch.setattr(lane_choice, "MAX_LINK_SLICES", 500)
    result = build_result(sim.program, EventEngine().measure(sim))
    lanes = {lane.name for lane in result.timeline.lanes if lane.group in ("links", "memory")}
    tl = result.timeline
    a = tl.arrays()
    link_slices = sum(1 for lane in a["lane"] if tl.lanes[lane].group in ("links", "memory"))
    assert len(lanes) <= lane_choice.MAX_LINK_LANES and link_slices <= 500
    full = [s.name for s in result.link_utilisation if len(s.times) != lane_choice.COARSE_WINDOWS]
    assert lanes <= set(full) and len(full) <= lane_choice.MAX_LINK_LANES
