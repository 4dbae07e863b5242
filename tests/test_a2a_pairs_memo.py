"""An all-to-all's pairwise routes are worked out once per hardware graph and groups (``experts._pairs_phase``): a
DeepSeek-V3 import on 1,024 H100s spent 99 % of its five minutes re-routing the same expert groups at every size
and in every plan of the search. The memo must give what a fresh graph computes."""

from __future__ import annotations

from tilewright.engine.hardware import elaborate
from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.io.presets import load_system
from tilewright.engine.plan.experts import all_to_all


def _graph() -> HardwareGraph:
    return elaborate(load_system("dgx-h100"), devices_needed=32)


def test_routes_are_walked_once_per_group_and_match_a_fresh_graph(monkeypatch):
    hw = _graph()
    group = [0, 3, 9, 17, 26, 31]  # across nodes: NVLink and InfiniBand routes
    calls = []
    walk = HardwareGraph.device_route
    monkeypatch.setattr(HardwareGraph, "device_route", lambda self, a, b: calls.append((a, b)) or walk(self, a, b))
    small = all_to_all(hw, group, 1e6)
    first = len(calls)
    assert first == len(group) * (len(group) - 1)
    large = all_to_all(hw, group, 64e6)
    assert len(calls) == first  # the second size re-routes nothing
    monkeypatch.setattr(HardwareGraph, "device_route", walk)
    fresh = all_to_all(_graph(), group, 64e6)  # another graph: its own routes, the same figures
    assert [p.usage for p in large.phases] == [p.usage for p in fresh.phases]
    assert large.time(hw) == fresh.time(_graph())
    assert [p.usage for p in small.phases] == [p.usage for p in large.phases]
    assert small.phases[0].usage is not large.phases[0].usage  # each phase its own dict
