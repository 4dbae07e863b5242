"""Multicast as a first-class NoC transfer: a row/column tree (``hardware.grid.multicast_route``) moved by the
event engine's real flow network on an elaborated 4 × 4 chiplet mesh — one flow that forks, its bytes once
on every tree link, its time the longest branch's latency plus the bytes at the bottleneck."""

from __future__ import annotations

import pytest
import simpy
from tilewright.engine.engines.event.network import FlowNetwork
from tilewright.engine.hardware import fabrics as fab
from tilewright.engine.hardware.elaborate import elaborate
from tilewright.engine.hardware.grid import multicast_edges, multicast_route
from tilewright.engine.io.presets import load_system

SIZE = 3.0e6  # bytes


@pytest.fixture(scope="module")
def mesh():
    hw = elaborate(load_system("chiplet-mesh"))
    inst = hw.instance_of(hw.devices[0].node)
    while not isinstance(inst.fabric, fab.GridFabric):
        inst = inst.parent
    return hw, inst.fabric.domain


def _run(hw, transfers):
    """transfers: (usage, bytes, latency) all starting at 0 → (finish times, network)."""
    env = simpy.Environment()
    net = FlowNetwork(env, [lk.bandwidth for lk in hw.links])
    finish = [0.0] * len(transfers)

    def go(i, usage, nbytes, latency):
        yield net.transfer(usage, nbytes, latency)
        finish[i] = env.now

    for i, t in enumerate(transfers):
        env.process(go(i, *t))
    env.run()
    return finish, net


def _hop(hw, usage):
    """One hop's latency and the slowest link's bandwidth of a route (the mesh's links are all alike)."""
    links = [hw.links[i] for i in usage]
    assert len({lk.latency_s for lk in links}) == 1
    return links[0].latency_s, min(lk.bandwidth for lk in links)


def test_a_unicast_alone_takes_hops_latency_plus_size_over_bandwidth(mesh):
    hw, d = mesh
    a, b = d.nodes[0, 0], d.nodes[2, 3]
    route = hw.route(a, b)
    usage = {lk: 1.0 for lk in route}
    lat, bw = _hop(hw, usage)
    hops = d.distance(a, b)
    assert len(route) == hops == 5
    (finish,), _ = _run(hw, [(usage, SIZE, hops * lat)])
    assert finish == pytest.approx(hops * lat + SIZE / bw, rel=1e-12)


def test_a_row_multicast_crosses_each_link_once(mesh):
    hw, d = mesh
    src, dsts = d.nodes[1, 0], [d.nodes[1, c] for c in (1, 2, 3)]  # to k = 3 tiles along the row
    usage, depth = multicast_route(d, src, dsts, hw.link_between)
    assert depth == 3 and len(usage) == 3  # a line: one link per hop, each once
    assert set(usage) == set(hw.route(src, dsts[-1]))  # the tree is the route to the farthest tile
    lat, bw = _hop(hw, usage)
    (finish,), net = _run(hw, [(usage, SIZE, depth * lat)])
    assert finish == pytest.approx(depth * lat + SIZE / bw, rel=1e-12)
    carried = net.link_bytes()
    assert {lk: carried[lk] for lk in usage} == pytest.approx({lk: SIZE for lk in usage})  # once per link
    for lk in usage:  # each tree link's trace: the whole bandwidth while the bytes cross, then nothing
        trace = net.link_trace(lk)
        assert trace.loads[0] == pytest.approx(bw) and trace.loads[-1] == 0.0
        moved = sum(load * (t1 - t0) for t0, t1, load in zip(trace.times, trace.times[1:], trace.loads, strict=False))
        assert moved == pytest.approx(SIZE)


def test_a_tree_to_a_block_forks_along_the_row_then_down_each_column(mesh):
    hw, d = mesh
    dst_coords = [(r, c) for r in range(4) for c in range(4) if (r, c) != (0, 0)]  # every other tile
    edges, depth = multicast_edges((0, 0), dst_coords, d.shape, d.wrap)
    assert depth == 6  # the farthest tile, (3, 3), is 3 + 3 hops away
    assert len(edges) == len(set(edges)) == len(dst_coords)  # a tree over 1 + k nodes has k links
    row = [e for e in edges if e[0][0] == e[1][0]]
    assert row == [((0, c), (0, c + 1)) for c in range(3)]  # x first: along the source's row only
    usage, depth2 = multicast_route(d, d.nodes[0, 0], [d.nodes[rc] for rc in dst_coords], hw.link_between)
    assert depth2 == depth and len(usage) == len(edges)
    lat, bw = _hop(hw, usage)
    (finish,), net = _run(hw, [(usage, SIZE, depth * lat)])
    assert finish == pytest.approx(depth * lat + SIZE / bw, rel=1e-12)
    assert all(net.link_bytes()[lk] == pytest.approx(SIZE) for lk in usage)


def test_two_multicasts_sharing_a_link_split_it_max_min_fairly(mesh):
    hw, d = mesh
    # from (0, 0) along row 0 to (0, 3), and from (0, 1) to (0, 2), (0, 3): they share (0,1)→(0,2)→(0,3)
    first, depth1 = multicast_route(d, d.nodes[0, 0], [d.nodes[0, c] for c in (1, 2, 3)], hw.link_between)
    second, depth2 = multicast_route(d, d.nodes[0, 1], [d.nodes[0, 2], d.nodes[0, 3]], hw.link_between)
    shared = set(first) & set(second)
    assert len(shared) == 2
    lat, bw = _hop(hw, first)
    (t1, t2), net = _run(hw, [(first, SIZE, 0.0), (second, SIZE, 0.0)])
    # each gets half of the shared links for the whole transfer (equal sizes finish together)
    assert t1 == pytest.approx(2 * SIZE / bw, rel=1e-9) and t2 == pytest.approx(2 * SIZE / bw, rel=1e-9)
    for lk in shared:
        assert net.link_bytes()[lk] == pytest.approx(2 * SIZE)
        assert net.link_trace(lk).loads[0] == pytest.approx(bw)  # full, split between the two
    # a shorter second multicast: half rate while both run, then the first alone at the full rate
    (t1, t2), _ = _run(hw, [(first, SIZE, 0.0), (second, SIZE / 2, 0.0)])
    assert t2 == pytest.approx(SIZE / bw, rel=1e-9)
    assert t1 == pytest.approx(SIZE / bw + (SIZE - SIZE / 2) / bw, rel=1e-9)
