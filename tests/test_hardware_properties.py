"""Properties of elaboration over random valid component trees: whatever the topology mix, routes are
contiguous chains from source to destination, hop counts agree with routes, and every memory a device
owns is reachable over a memory channel."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from tilewright.engine.hardware import elaborate
from tilewright.engine.ir.hardware import Component, Compute, Interconnect, Memory

from tests.strategies import components

GB = 1e9


def walk(hg, src: str, route: list[int]) -> str:
    node = src
    for i in route:
        assert hg.links[i].src == node
        node = hg.links[i].dst
    return node


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(components())
def test_random_systems_route_soundly(comp):
    comp = comp.model_copy(update={"rows": 1, "cols": 1})  # a root is one instance
    if comp.device_count() > 2000:
        return
    hg = elaborate(comp)
    assert len(hg.devices) == comp.device_count()
    assert all(lk.bandwidth > 0 for lk in hg.links)
    n = len(hg.devices)
    picks = sorted({0, n - 1, n // 2, n // 3})
    for a in picks:
        for b in picks:
            src, dst = hg.devices[a].node, hg.devices[b].node
            r = hg.device_route(a, b)
            assert walk(hg, src, r) == dst
            assert hg.hops(src, dst) == len(r)
        for m in hg.devices[a].memories:
            port, r = hg.memory_route(a, m.name)
            assert walk(hg, hg.devices[a].node, r) == port.node
            assert hg.links[r[-1]].kind == "memory"
    for port in hg.memory_ports[:8]:
        r = hg.route(hg.devices[0].node, port.node)
        assert walk(hg, hg.devices[0].node, r) == port.node


def test_device_with_children_reaches_them():
    """A computing component that also has children (a host chip with cores, say) joins its children's
    fabric through its own link to the first child."""
    core = Component(name="core", kind="core", cols=4, compute=Compute(peak_flops={"fp16": 1e12}))
    chip = Component(
        name="chip", kind="chip", compute=Compute(peak_flops={"fp16": 5e12}), children=[core],
        interconnect=Interconnect(topology="ring", link_bandwidth_bytes_per_s=50 * GB),
        memories=[Memory(name="l2", kind="sram", capacity_bytes=1e6, bandwidth_bytes_per_s=1e12)],
    )
    hg = elaborate(chip)
    assert [d.node for d in hg.devices] == ["chip", "chip/core[0]", "chip/core[1]", "chip/core[2]",
                                            "chip/core[3]"]
    for b in range(1, 5):
        r = hg.device_route(0, b)
        assert walk(hg, "chip", r) == hg.devices[b].node
        back = hg.device_route(b, 0)
        assert walk(hg, hg.devices[b].node, back) == "chip"
    assert len(hg.device_route(0, 1)) == 1 and len(hg.device_route(0, 3)) == 3
    port, r = hg.memory_route(2, "l2")  # a core reaches its parent's memory
    assert port.node == "chip/l2" and walk(hg, "chip/core[1]", r) == "chip/l2"
