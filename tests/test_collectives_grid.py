"""Collectives on grids: lines on open axes, rings only where the ring closes in one step, row then column,
hierarchical across chips — and the physics each one must obey."""

from __future__ import annotations

import pytest
import simpy
from tilewright.engine.engines.event.network import FlowNetwork
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import Component, Compute, Interconnect
from tilewright.engine.perf.collective_phase import merge_phases
from tilewright.engine.perf.collectives import collective, point_to_point, ring_phase

GB = 1e9
MiB = 2**20


def chips(rows: int, cols: int, topology: str = "mesh", **ic) -> Component:
    """A grid of plain chips joined by 10 GB/s, 1 us links (no framing, no collective costs)."""
    chip = Component(name="chip", kind="chip", rows=rows, cols=cols, compute=Compute(peak_flops={"bf16": 1e14}))
    link = Interconnect(topology=topology, link_bandwidth_bytes_per_s=10 * GB, link_latency_s=1e-6, **ic)
    return Component(name="sys", kind="system", children=[chip], interconnect=link)


def galaxy_open_mesh() -> Component:
    """The Blackhole Galaxy preset without its wrap links: a Galaxy-style open 4 × 8 mesh."""
    data = load_system("blackhole-galaxy").model_dump(mode="json")
    data["interconnect"].update(topology="mesh", axis_wrap=None)
    return Component.model_validate(data)


def at(hw, r: int, c: int) -> int:
    return next(d.index for d in hw.devices if d.coord == (r, c))


def run_alone(hw, usage, nbytes: float, latency: float) -> float:
    env = simpy.Environment()
    net = FlowNetwork(env, [lk.bandwidth for lk in hw.links])
    done = net.transfer(usage, nbytes, latency)
    env.run(done)
    return env.now


@pytest.mark.parametrize("system", ["wormhole-t3000", "mesh"])
def test_a_single_flow_alone_on_a_mesh_takes_hops_latency_plus_size_over_bandwidth(system):
    hw = elaborate(load_system(system) if system != "mesh" else chips(4, 8))
    a, b = at(hw, 0, 0), at(hw, 1, 3)
    nbytes = 64 * MiB
    (ph,) = point_to_point(hw, [(a, b)], nbytes).phases
    route = hw.device_route(a, b)
    assert len(route) == 4
    lat = hw.links[route[0]].latency_s
    bw = hw.links[route[0]].bandwidth
    expected = 4 * lat + nbytes / bw
    assert ph.time(hw) == pytest.approx(expected, rel=1e-12)
    assert run_alone(hw, ph.usage, ph.bytes_per_member, ph.latency_s) == pytest.approx(expected, rel=1e-9)


def test_line_moves_the_bottleneck_share_and_all_reduce_is_reduce_scatter_then_all_gather():
    hw = elaborate(chips(1, 4))
    group, n, t = list(range(4)), 4, 64 * MiB
    ag = collective(hw, "all-gather", group, t)
    rs = collective(hw, "reduce-scatter", group, t)
    ar = collective(hw, "all-reduce", group, t)
    assert ag.algorithm == rs.algorithm == ar.algorithm == "line"
    assert ag.time(hw) == pytest.approx((n - 1) / n * t / (10 * GB) + (n - 1) * 1e-6, rel=1e-12)
    assert rs.time(hw) == pytest.approx(ag.time(hw), rel=1e-12)
    assert len(ar.phases) == 2 and ar.time(hw) == pytest.approx(rs.time(hw) + ag.time(hw), rel=1e-12)


def test_an_open_line_has_no_ring_and_a_wrapped_axis_does():
    hw = elaborate(chips(1, 8))
    with pytest.raises(ValueError, match="ring"):
        collective(hw, "all-gather", list(range(8)), MiB, algorithm="ring")
    galaxy = elaborate(load_system("blackhole-galaxy"))
    row = [at(galaxy, 0, c) for c in range(8)]
    ring = collective(galaxy, "all-gather", row, MiB, algorithm="ring")
    wrap = galaxy.device_route(row[7], row[0])
    assert len(wrap) == 1 and wrap[0] in ring.phases[0].usage  # the ring closes over the wrap link
    assert collective(galaxy, "all-gather", row, MiB).algorithm == "ring"
    half = collective(galaxy, "all-gather", row[:4], MiB)  # part of the axis: the wrap is no use
    assert half.algorithm == "line"


def test_open_4x8_mesh_all_reduce_never_pays_a_ring_closing_route():
    hw = elaborate(galaxy_open_mesh())
    group = list(range(len(hw.devices)))
    for nbytes in (64 * 1024, MiB, 64 * MiB):
        best = collective(hw, "all-reduce", group, nbytes)
        line = collective(hw, "all-reduce", group, nbytes, algorithm="line")
        assert best.time(hw) <= line.time(hw)
        for ph in best.phases:  # every link a phase loads joins grid neighbours: no wrap exists to use
            for lk in ph.usage:
                src, dst = hw.links[lk].src, hw.links[lk].dst
                assert hw.hops(src, dst) == 1
    # the old choice: one snake ring of 32 whose closing route runs back over 3 chips, paid on all 62 steps
    plain = elaborate(chips(4, 8))
    t = 64 * 1024
    old = ring_phase(plain, group, 2 * 31, 2 * 31 / 32 * t).time(plain)
    assert collective(plain, "all-reduce", group, t).time(plain) < old / 5


def test_row_then_column_beats_one_snake_line_on_a_wormhole_4x8_mesh():
    data = load_system("wormhole-t3000").model_dump(mode="json")
    data["children"][0].update(rows=4, cols=8)
    hw = elaborate(Component.model_validate(data))
    group = list(range(32))
    best = collective(hw, "all-reduce", group, 64 * 1024)
    line = collective(hw, "all-reduce", group, 64 * 1024, algorithm="line")
    assert best.algorithm.startswith("mesh") and len(best.phases) == 4
    assert best.time(hw) < 0.6 * line.time(hw)  # research prototype: 88 us against 195 us


def test_torus_bucket_time_is_unchanged():
    hw = elaborate(load_system("tpu-v4-torus"))
    plane = [d.index for d in hw.devices if d.coord[2] == 0]
    t = 1 * GB
    coll = collective(hw, "all-reduce", plane, t)
    assert coll.algorithm == "torus" and len(coll.phases) == 4
    # the bucket algorithm as it was: a bidirectional ring per line of each dimension, data shrinking
    scatter, size = [], t
    for axis in (0, 1):
        lines: dict = {}
        for d in sorted(plane, key=lambda i: hw.devices[i].coord):
            c = hw.devices[d].coord
            lines.setdefault(c[:axis] + c[axis + 1 :], []).append(d)
        scatter.append(merge_phases([ring_phase(hw, line, 3, 3 / 4 * size) for line in lines.values()]))
        size /= 4
    old = 2 * sum(ph.time(hw) for ph in scatter)
    assert coll.time(hw) == pytest.approx(old, rel=1e-12)
    assert [ph.usage for ph in coll.phases[:2]] == [ph.usage for ph in scatter]


def test_two_chip_line_all_gather_equals_the_bidirectional_line_formula():
    """Each direction carries one member's half, injected by its one worker: on Wormhole two workers fill a link
    (the preset's workers_to_fill_link), so the half moves at half the link (tests/test_tiled_ccl_workers.py)."""
    hw = elaborate(load_system("wormhole-n300"))
    t = 16 * MiB
    coll = collective(hw, "all-gather", [0, 1], t)
    hop, eth = 711e-9, 12.5 * GB * 6144 / (6144 + 48 + 50 * 5)  # S8 framing: 5 frames of <= 1,500 B
    launch, handshake, crossings = 2.37e-6, 4 * hop, 3 * 1 * hop  # diameter 1, crossed 3 times
    assert coll.algorithm == "line"
    assert coll.time(hw) == pytest.approx(launch + handshake + crossings + 2 * (2 - 1) / 2 * t / eth, rel=1e-12)


def test_reduce_scatter_pays_store_and_forward_and_neighbour_syncs():
    hw = elaborate(load_system("wormhole-n300"))
    t = 16 * MiB
    rs = collective(hw, "reduce-scatter", [0, 1], t).time(hw)
    hop, eth = 711e-9, 12.5 * GB * 6144 / (6144 + 48 + 50 * 5)
    line = 2.37e-6 + 4 * hop + 3 * 1 * hop + (2 - 1) / 2 * t / eth  # the line at the full link: several workers
    syncs = (t / 2) / (20 * 6144)  # a round trip every 20 packets of 6,144 B (S8)
    assert rs - line == pytest.approx((hop + 2 * 300e-9) + syncs * 2 * hop, rel=1e-9)


def test_ring_of_the_t3000_is_a_cycle_of_neighbour_links():
    hw = elaborate(load_system("wormhole-t3000"))
    coll = collective(hw, "all-gather", list(range(8)), 16 * MiB)
    assert coll.algorithm == "ring"
    (ph,) = coll.phases
    assert len(ph.usage) == 16 and set(ph.usage.values()) == {1}  # 8 neighbour links, both directions


def test_the_runtime_offers_no_tree_on_tenstorrent_fabrics():
    hw = elaborate(load_system("wormhole-t3000"))
    assert collective(hw, "all-reduce", list(range(8)), 16 * 1024).algorithm == "ring"
    with pytest.raises(ValueError, match="tree"):
        collective(hw, "all-reduce", list(range(8)), 16 * 1024, algorithm="tree")
    plain = elaborate(chips(2, 4))
    assert collective(plain, "all-reduce", list(range(8)), 16 * 1024, algorithm="tree").algorithm == "tree"


def chip_of_tiles(boundary: dict | None) -> Component:
    tile = Component(name="tile", kind="tile", rows=2, cols=2, compute=Compute(peak_flops={"bf16": 1e12}))
    noc = Interconnect(topology="mesh", link_bandwidth_bytes_per_s=100 * GB, link_latency_s=1e-9)
    chip = Component(name="chip", kind="chip", cols=2, children=[tile], interconnect=noc)
    eth = Interconnect(topology="mesh", link_bandwidth_bytes_per_s=10 * GB, link_latency_s=1e-6, boundary=boundary)
    return Component(name="sys", kind="system", children=[chip], interconnect=eth)


def test_hierarchical_reduces_inside_chips_then_across():
    hw = elaborate(chip_of_tiles({"links": 1}))
    group = list(range(8))
    t = 64 * MiB
    hier = collective(hw, "all-reduce", group, t, algorithm="hierarchical")
    assert hier.algorithm == "hierarchical"
    inner, *cross, outer = hier.phases
    assert all(hw.links[lk].level == "sys/chip" for lk in inner.usage)
    assert any(hw.links[lk].level == "sys" for ph in cross for lk in ph.usage)
    assert cross[0].bytes_per_member <= t / 4  # only the 1/4 shard of each chip crosses
    best = collective(hw, "all-reduce", group, t)
    assert best.time(hw) <= hier.time(hw)


def test_search_sees_the_engine_choice_at_every_size():
    """Search fits each algorithm as a line in the message size and takes the cheapest: the engine's choice,
    with the reduce-scatter's size-dependent handshakes included."""
    from tilewright.engine.search.comm import CommModel

    hw = elaborate(galaxy_open_mesh())
    model = CommModel(hw)
    group = tuple(range(32))
    for kind in ("all-reduce", "reduce-scatter", "all-gather"):
        for nbytes in (128 * 1024, MiB, 16 * MiB, 1024 * MiB):
            engine = collective(hw, kind, list(group), nbytes).time(hw)
            assert model.collective_time(kind, group, nbytes) == pytest.approx(engine, rel=1e-9), (kind, nbytes)
