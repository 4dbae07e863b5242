"""Memory ports and growth: memory traffic reaches the right port over the right links, a port's
bandwidth is shared by its users, and growing adds exactly the instances a run needs."""

from __future__ import annotations

import pytest
from tilewright.engine.hardware import elaborate, grow
from tilewright.engine.ir.hardware import Component, Compute, Interconnect, Memory

GB = 1e9


def tile_grid(rows: int, cols: int, ports_per_edge: int = 1) -> Component:
    tile = Component(
        name="tile", kind="tile", rows=rows, cols=cols, compute=Compute(peak_flops={"fp16": 1e12}),
        memories=[Memory(name="sram", kind="sram", capacity_bytes=1e6, bandwidth_bytes_per_s=500 * GB,
                         efficiency=0.8)],
    )
    return Component(
        name="chip", kind="chip", children=[tile],
        interconnect=Interconnect(topology="mesh", link_bandwidth_bytes_per_s=100 * GB),
        memories=[Memory(name="dram", kind="ddr", capacity_bytes=8e9, bandwidth_bytes_per_s=50 * GB,
                         efficiency=0.9, attach=["west", "east"], ports_per_edge=ports_per_edge)],
    )


def noc_hops(hg, route: list[int]) -> int:
    return sum(hg.links[i].kind != "memory" for i in route)


def test_local_memory_is_one_channel_of_effective_bandwidth():
    hg = elaborate(tile_grid(2, 2))
    port, r = hg.memory_route(3, "sram")
    assert port.node == "chip/tile[1,1]/sram" and port.edge is None
    assert len(r) == 1 and hg.links[r[0]].kind == "memory"
    assert hg.links[r[0]].bandwidth == pytest.approx(400 * GB)
    _, back = hg.memory_route(3, "sram", read=True)
    assert hg.links[back[0]].src == port.node and hg.links[back[0]].dst == "chip/tile[1,1]"


def test_edge_ports_sit_on_their_edges_and_share_one_channel():
    hg = elaborate(tile_grid(4, 5))
    ports = [p for p in hg.memory_ports if p.memory.name == "dram"]
    assert [p.edge.value for p in ports] == ["west", "east"]
    west, east = ports
    assert {hg.devices[hg.device_index(n)].coord[1] for n in west.attached} == {0}
    assert {hg.devices[hg.device_index(n)].coord[1] for n in east.attached} == {4}
    assert len(west.attached) == 4
    for i in range(len(hg.devices)):
        _, r = hg.memory_route(i, "dram")
        assert r[-1] in (west.channel_in, east.channel_in)  # every writer shares a port's channel
    assert hg.links[west.channel_in].bandwidth == pytest.approx(45 * GB)


def test_memory_route_picks_the_nearest_port():
    hg = elaborate(tile_grid(4, 5))
    for d in hg.devices:
        port, r = hg.memory_route(d.index, "dram")
        col = d.coord[1]
        expected = "west" if col <= 2 else "east"  # tie in the middle column goes to the lower index
        assert port.edge.value == expected
        assert noc_hops(hg, r) == min(col, 4 - col)
        node = d.node
        for i in r:
            assert hg.links[i].src == node
            node = hg.links[i].dst
        assert node == port.node


def test_ports_spread_evenly_along_the_edge():
    hg = elaborate(tile_grid(6, 3, ports_per_edge=3))
    west = [p for p in hg.memory_ports if p.edge is not None and p.edge.value == "west"]
    assert [len(p.attached) for p in west] == [2, 2, 2]
    rows = [sorted(hg.devices[hg.device_index(n)].coord[0] for n in p.attached) for p in west]
    assert rows == [[0, 1], [2, 3], [4, 5]]


def test_port_route_between_memories():
    hg = elaborate(tile_grid(2, 3))
    west = next(p for p in hg.memory_ports if p.edge is not None and p.edge.value == "west")
    r = hg.route(west.node, "chip/tile[0,2]/sram")
    assert hg.links[r[0]].src == west.node and hg.links[r[-1]].dst == "chip/tile[0,2]/sram"
    assert noc_hops(hg, r) == 2


def test_unknown_memory_raises():
    hg = elaborate(tile_grid(2, 2))
    with pytest.raises(KeyError):
        hg.memory_route(0, "hbm")


# --- growth ------------------------------------------------------------------------------------------


def cluster(nodes: int = 1, dims: list[int] | None = None) -> Component:
    gpu = Component(name="gpu", kind="chip", cols=8, compute=Compute(peak_flops={"bf16": 1e14}))
    node = Component(
        name="node", kind="node", rows=nodes, growable=True, children=[gpu],
        interconnect=Interconnect(topology="switch", link_bandwidth_bytes_per_s=300 * GB),
    )
    return Component(
        name="dgx", kind="system", children=[node],
        interconnect=Interconnect(topology="fat-tree", link_bandwidth_bytes_per_s=25 * GB, dims=dims),
    )


@pytest.mark.parametrize(("needed", "nodes"), [(1, 1), (8, 1), (9, 2), (1536, 192), (1537, 193)])
def test_grow_is_minimal(needed, nodes):
    root = cluster()
    grown = grow(root, needed)
    assert grown.children[0].rows == nodes
    assert root.children[0].rows == 1  # the caller's tree is untouched


def test_grow_never_shrinks_and_refits_dims():
    assert grow(cluster(nodes=4), 8).children[0].rows == 4
    grown = grow(cluster(nodes=2, dims=[2]), 40)
    assert grown.interconnect.dims == [5]


def test_elaborate_grows_and_names_nodes():
    hg = elaborate(cluster(), devices_needed=24)
    assert len(hg.devices) == 24
    assert hg.devices[-1].node == "dgx/node[2]/gpu[7]"


def test_growable_root_grows_by_its_child():
    root = cluster().model_copy(update={"growable": True})
    root = root.model_copy(update={"children": [root.children[0].model_copy(update={"growable": False})]})
    assert len(elaborate(root, devices_needed=20).devices) == 24


def test_too_few_devices_and_nothing_to_grow():
    fixed = cluster().model_copy(
        update={"children": [cluster().children[0].model_copy(update={"growable": False})]}
    )
    with pytest.raises(ValueError, match="needed"):
        elaborate(fixed, devices_needed=9)


def test_root_must_be_one_instance():
    with pytest.raises(ValueError, match="single instance"):
        elaborate(cluster().model_copy(update={"rows": 2}))


def test_read_route_matches_route_from_the_port():
    hg = elaborate(tile_grid(4, 5))
    for d in hg.devices:
        port, r = hg.memory_route(d.index, "dram", read=True)
        assert r == hg.route(port.node, d.node)
        assert r[0] == port.channel_out
