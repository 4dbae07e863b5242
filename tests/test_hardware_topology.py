"""Elaboration facts that hold by construction of each topology: hop counts, which links a route may use,
naming and ordering of devices. Systems are built in code so the tests do not lean on the presets."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tilewright.engine.hardware import HardwareGraph, elaborate
from tilewright.engine.hardware.model import LINK_KINDS, NODE_TYPES
from tilewright.engine.ir.hardware import Component, Compute, EfficiencyCurve, Interconnect, Memory

GB = 1e9


def leaf(name: str = "pe", rows: int = 1, cols: int = 1, mem: bool = False) -> Component:
    mems = [Memory(name="sram", kind="sram", capacity_bytes=1e6, bandwidth_bytes_per_s=100 * GB)] if mem else []
    return Component(
        name=name, kind="tile", rows=rows, cols=cols, compute=Compute(peak_flops={"fp16": 1e12}), memories=mems
    )


def system(child: Component, topology: str, name: str = "sys", **ic) -> Component:
    ic.setdefault("link_bandwidth_bytes_per_s", 10 * GB)
    return Component(
        name=name, kind="system", children=[child], interconnect=Interconnect(topology=topology, **ic)
    )


def wafer(dies=(2, 3), tiles=(3, 4), torus: bool = False) -> Component:
    die = Component(
        name="die", kind="die", rows=dies[0], cols=dies[1], children=[leaf("tile", *tiles)],
        interconnect=Interconnect(topology="mesh", link_bandwidth_bytes_per_s=1024 * GB),
    )
    return Component(
        name="wafer", kind="wafer", children=[die],
        interconnect=Interconnect(topology="torus" if torus else "mesh", link_bandwidth_bytes_per_s=256 * GB),
    )


def cluster(nodes: int = 3, gpus: int = 4, attach: str = "every-device", oversub: float = 1.0) -> Component:
    node = Component(
        name="node", kind="node", rows=nodes, children=[leaf("gpu", 1, gpus)],
        interconnect=Interconnect(topology="switch", link_bandwidth_bytes_per_s=300 * GB),
    )
    return system(
        node, "fat-tree", name="cluster", link_bandwidth_bytes_per_s=25 * GB, attach=attach,
        oversubscription=oversub,
    )


def check_route(hg: HardwareGraph, src: str, dst: str) -> list[int]:
    """The route is a contiguous chain of links from src to dst, and never visits a node twice."""
    r = hg.route(src, dst)
    node = src
    seen = {src}
    for i in r:
        link = hg.links[i]
        assert link.src == node
        node = link.dst
        assert node not in seen
        seen.add(node)
    assert node == dst
    return r


def levels(hg: HardwareGraph, route: list[int]) -> set[str]:
    return {hg.links[i].level for i in route}


# --- mesh, torus, ring -----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 7), st.integers(1, 7), st.data())
def test_mesh_route_is_manhattan(rows, cols, data):
    hg = elaborate(system(leaf(rows=rows, cols=cols), "mesh"))
    a = data.draw(st.integers(0, rows * cols - 1))
    b = data.draw(st.integers(0, rows * cols - 1))
    (ra, ca), (rb, cb) = hg.devices[a].coord, hg.devices[b].coord
    r = check_route(hg, hg.devices[a].node, hg.devices[b].node)
    assert len(r) == abs(ra - rb) + abs(ca - cb)


def test_mesh_routes_x_before_y():
    hg = elaborate(system(leaf(rows=4, cols=4), "mesh"))
    r = hg.device_route(0, 15)  # (0,0) -> (3,3): along row 0 first
    assert [hg.links[i].dst for i in r[:3]] == ["sys/pe[0,1]", "sys/pe[0,2]", "sys/pe[0,3]"]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 7), st.integers(1, 7), st.data())
def test_torus_route_is_wrap_aware(rows, cols, data):
    hg = elaborate(system(leaf(rows=rows, cols=cols), "torus"))
    a = data.draw(st.integers(0, rows * cols - 1))
    b = data.draw(st.integers(0, rows * cols - 1))
    (ra, ca), (rb, cb) = hg.devices[a].coord, hg.devices[b].coord

    def ring(x, y, n):
        return min(abs(x - y), n - abs(x - y))

    r = check_route(hg, hg.devices[a].node, hg.devices[b].node)
    assert len(r) == ring(ra, rb, rows) + ring(ca, cb, cols)


def test_torus_3d_dims_and_diameter():
    hg = elaborate(system(leaf(cols=64), "torus", dims=[4, 4, 4]))
    assert {len(d.coord) for d in hg.devices} == {3}
    longest = max(len(hg.device_route(0, b)) for b in range(64))
    assert longest == 6  # 2 + 2 + 2 on a 4-ring in each dimension
    # 6 neighbours per chip, two directions each
    assert hg.graph.out_degree(hg.devices[21].node) == 6


def test_ring_uses_the_short_way_round():
    hg = elaborate(system(leaf(cols=10), "ring"))
    assert len(hg.device_route(0, 9)) == 1
    assert len(hg.device_route(0, 5)) == 5
    assert len(hg.device_route(2, 8)) == 4


# --- mesh of meshes ------------------------------------------------------------------------------------


def test_mesh_of_meshes_is_one_global_grid():
    hg = elaborate(wafer(dies=(2, 3), tiles=(3, 4)))
    coords = [d.coord for d in hg.devices]
    assert len(set(coords)) == len(coords) == 6 * 12
    assert {c[0] for c in coords} == set(range(6)) and {c[1] for c in coords} == set(range(12))
    for a, b in itertools.product(range(0, 72, 7), range(0, 72, 5)):
        (ra, ca), (rb, cb) = coords[a], coords[b]
        r = check_route(hg, hg.devices[a].node, hg.devices[b].node)
        assert len(r) == abs(ra - rb) + abs(ca - cb)


def test_crossing_a_die_boundary_uses_die_to_die_links():
    hg = elaborate(wafer(dies=(2, 3), tiles=(3, 4)))
    same_die = hg.route("wafer/die[0,0]/tile[0,0]", "wafer/die[0,0]/tile[2,3]")
    assert levels(hg, same_die) == {"wafer/die"}
    assert all(hg.links[i].bandwidth == 1024 * GB for i in same_die)
    across = hg.route("wafer/die[0,0]/tile[1,3]", "wafer/die[0,1]/tile[1,0]")
    assert len(across) == 1 and hg.links[across[0]].level == "wafer"
    assert hg.links[across[0]].bandwidth == 256 * GB
    far = check_route(hg, "wafer/die[0,0]/tile[0,0]", "wafer/die[1,2]/tile[2,3]")
    assert levels(hg, far) == {"wafer", "wafer/die"}
    assert sum(hg.links[i].level == "wafer" for i in far) == 3  # one die boundary per die step


def test_facing_borders_are_joined_pairwise():
    hg = elaborate(wafer(dies=(1, 2), tiles=(3, 4)))
    d2d = [lk for lk in hg.links if lk.level == "wafer"]
    assert len(d2d) == 2 * 3  # one link per facing tile row, per direction
    for lk in d2d:
        assert hg.devices[hg.device_index(lk.src)].coord[0] == hg.devices[hg.device_index(lk.dst)].coord[0]


def test_torus_of_meshes_wraps_around_the_wafer():
    hg = elaborate(wafer(dies=(1, 3), tiles=(2, 2), torus=True))
    r = check_route(hg, "wafer/die[0]/tile[0,0]", "wafer/die[2]/tile[0,1]")
    assert len(r) == 1 and hg.links[r[0]].level == "wafer"


# --- switches ------------------------------------------------------------------------------------------


def test_switch_every_device_routes_and_levels():
    hg = elaborate(cluster(nodes=3, gpus=4))
    assert hg.summary()["switches"] == 4  # three NVSwitch-like node switches and the fabric
    intra = check_route(hg, "cluster/node[0]/gpu[1]", "cluster/node[0]/gpu[3]")
    assert len(intra) == 2 and levels(hg, intra) == {"cluster/node"}
    inter = check_route(hg, "cluster/node[0]/gpu[1]", "cluster/node[2]/gpu[3]")
    assert len(inter) == 2 and levels(hg, inter) == {"cluster"}  # own rail straight to the fabric
    assert all(hg.links[i].kind == "switch" for i in intra + inter)
    assert hg.common_level(0, 3) == "cluster/node" and hg.common_level(0, 11) == "cluster"


def test_switch_one_per_child_goes_through_gateways():
    hg = elaborate(cluster(nodes=2, gpus=4, attach="one-per-child"))
    r = check_route(hg, "cluster/node[0]/gpu[2]", "cluster/node[1]/gpu[3]")
    path = [hg.links[i].dst for i in r]
    assert "cluster/node[0]/gpu[0]" in path and "cluster/node[1]/gpu[0]" in path
    assert levels(hg, r) == {"cluster", "cluster/node"}
    assert len([lk for lk in hg.links if lk.level == "cluster"]) == 2 * 2


def test_fat_tree_oversubscription_divides_bandwidth():
    hg = elaborate(cluster(nodes=2, gpus=2, oversub=4.0))
    fabric = {lk.bandwidth for lk in hg.links if lk.level == "cluster"}
    assert fabric == {25 * GB / 4}


# --- graph topologies -----------------------------------------------------------------------------------


def test_fully_connected_is_one_hop():
    hg = elaborate(system(leaf(cols=6), "fully-connected"))
    assert len(hg.links) == 6 * 5
    assert all(len(check_route(hg, a.node, b.node)) == 1 for a in hg.devices for b in hg.devices if a != b)


def test_dragonfly_groups_and_global_links():
    hg = elaborate(
        system(leaf(cols=12), "dragonfly", group_size=4, global_link_bandwidth_bytes_per_s=40 * GB)
    )
    glob = [lk for lk in hg.links if lk.bandwidth == 40 * GB]
    assert len(glob) == 2 * 3  # one per pair of the 3 groups, both directions
    assert len(hg.device_route(0, 3)) == 1  # same group
    for a, b in itertools.product(range(12), repeat=2):
        if a // 4 != b // 4:
            r = check_route(hg, hg.devices[a].node, hg.devices[b].node)
            assert 1 <= len(r) <= 3 and any(hg.links[i].bandwidth == 40 * GB for i in r)


def test_htree_is_a_binary_tree_of_routers():
    hg = elaborate(system(leaf(rows=4, cols=4), "htree"))
    assert hg.summary()["routers"] == 15
    assert len(check_route(hg, hg.devices[0].node, hg.devices[1].node)) == 2
    assert len(check_route(hg, hg.devices[0].node, hg.devices[15].node)) == 8  # up 4 levels, down 4


def test_explicit_edge_list_chain():
    hg = elaborate(system(leaf(cols=4), "edges", edge_list=[(0, 1), (1, 2), (2, 3)]))
    assert len(hg.links) == 6
    assert len(check_route(hg, hg.devices[0].node, hg.devices[3].node)) == 3


# --- naming, ordering, links ---------------------------------------------------------------------------


def test_node_ids_and_depth_first_order():
    hg = elaborate(wafer(dies=(2, 2), tiles=(3, 1)))
    names = [d.node for d in hg.devices]
    # [r,c] in a true grid, [i] in a line; depth first, row-major
    assert names[:4] == ["wafer/die[0,0]/tile[0]", "wafer/die[0,0]/tile[1]", "wafer/die[0,0]/tile[2]",
                         "wafer/die[0,1]/tile[0]"]
    assert names[-1] == "wafer/die[1,1]/tile[2]"
    assert [d.index for d in hg.devices] == list(range(12))
    assert {d.path for d in hg.devices} == {"wafer/die/tile"}


@pytest.mark.parametrize("topology", ["mesh", "torus", "ring", "switch", "fat-tree", "fully-connected",
                                      "dragonfly", "htree"])
def test_links_are_positive_and_come_in_pairs(topology):
    hg = elaborate(system(leaf(rows=3, cols=3, mem=True), topology))
    assert all(lk.bandwidth > 0 and lk.peak_bandwidth >= lk.bandwidth for lk in hg.links)
    assert {lk.kind for lk in hg.links} <= set(LINK_KINDS)
    assert {t for _, t in hg.graph.nodes(data="type")} <= set(NODE_TYPES)
    pairs = {(lk.src, lk.dst) for lk in hg.links}
    assert all((b, a) in pairs for a, b in pairs)
    assert hg.graph.number_of_edges() == len(hg.links)
    for i, lk in enumerate(hg.links):
        assert lk.id == i and hg.link_between(lk.src, lk.dst) == i


def test_link_bandwidth_is_link_times_count_times_efficiency():
    hg = elaborate(system(leaf(cols=3), "ring", links=2, efficiency=0.5, link_bandwidth_bytes_per_s=10 * GB))
    assert {lk.bandwidth for lk in hg.links} == {10 * GB}
    assert {lk.peak_bandwidth for lk in hg.links} == {20 * GB}


def test_efficiency_curve_sets_large_and_small_message_bandwidth():
    curve = EfficiencyCurve(points=[(1e3, 0.1), (1e6, 0.6)])
    hg = elaborate(system(leaf(cols=2), "ring", efficiency_curve=curve, link_bandwidth_bytes_per_s=10 * GB))
    assert {lk.bandwidth for lk in hg.links} == {6 * GB}
    assert hg.link_bandwidth(0, 1e3) == pytest.approx(1 * GB)
    assert hg.link_bandwidth(0) == pytest.approx(6 * GB)


def test_routes_are_cached_and_not_aliased():
    hg = elaborate(system(leaf(rows=3, cols=3), "mesh"))
    r = hg.device_route(0, 8)
    r.append(-1)
    assert hg.device_route(0, 8) == r[:-1]
