"""Collectives on real topologies: the α–β costs the algorithms are known for."""

from __future__ import annotations

import pytest
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.perf.collectives import Collective, collective, ring_phase

from tests.factories import cluster

GB = 1e9


def _bw(hw, coll):
    return {hw.links[lk].bandwidth for ph in coll.phases for lk in ph.usage}


def test_ring_all_reduce_inside_a_switched_node_matches_the_bus_formula():
    hw = elaborate(cluster(1))
    n = 8
    coll = collective(hw, "all-reduce", list(range(n)), 1 * GB)
    assert coll.algorithm == "ring"
    (bw,) = _bw(hw, coll)
    ideal = 2 * (n - 1) / n * 1 * GB / bw  # each GPU's link carries 2(p-1)/p of the data
    assert coll.time(hw) == pytest.approx(ideal, rel=0.01)


def test_across_nodes_is_hierarchical_and_beats_a_flat_ring():
    hw = elaborate(cluster(4))
    group = list(range(32))
    coll = collective(hw, "all-reduce", group, 1 * GB)
    assert coll.algorithm == "hierarchical" and len(coll.phases) == 3
    # the cross-node phase moves only 1/8 of the data per rail (half each way round a 4-node ring)
    assert coll.phases[1].bytes_per_member == pytest.approx(2 * 3 / 4 * GB / 8 / 2, rel=1e-9)
    flat = Collective("all-reduce", "ring", (ring_phase(hw, group, 2 * 31, 2 * 31 / 32 * GB),))
    assert coll.time(hw) < flat.time(hw) / 2


def test_torus_uses_every_dimension_and_beats_a_one_dimensional_ring():
    hw = elaborate(load_system("tpu-v4-torus"))
    plane = [d.index for d in hw.devices if d.coord[2] == 0]  # a 4 × 4 plane of the 4 × 4 × 4 torus
    coll = collective(hw, "all-reduce", plane, 1 * GB)
    assert coll.algorithm == "torus" and len(coll.phases) == 4
    line = [d.index for d in hw.devices if d.coord[1] == 0 and d.coord[2] == 0]
    flat = collective(hw, "all-reduce", line, 1 * GB)
    assert flat.algorithm == "ring"
    # 16 members in 2 dims move about as much per member as 4 in one, so time is comparable, not 4× more
    assert coll.time(hw) < 1.5 * flat.time(hw)


def test_small_messages_use_a_tree():
    hw = elaborate(cluster(1))
    assert collective(hw, "all-reduce", list(range(8)), 4096).algorithm == "tree"


def test_reduce_scatter_moves_half_of_all_reduce():
    hw = elaborate(cluster(1))
    ar = collective(hw, "all-reduce", list(range(8)), GB).time(hw)
    rs = collective(hw, "reduce-scatter", list(range(8)), GB).time(hw)
    assert rs == pytest.approx(ar / 2, rel=0.02)
