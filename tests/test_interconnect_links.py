"""Per-axis links, wrap on some axes, boundary links between merged grids, framing and collective costs in
the hardware IR: how they elaborate, how they are validated, and that old files do not notice them."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import Component, Compute, Interconnect
from tilewright.engine.ir.links import Framing

GB = 1e9


def at(hw, r: int, c: int) -> int:
    return next(d.index for d in hw.devices if d.coord == (r, c))


def link(hw, a: int, b: int):
    (lk,) = hw.device_route(a, b)
    return hw.links[lk]


def test_per_axis_links_and_a_wrap_on_one_axis_only():
    hw = elaborate(load_system("blackhole-galaxy"))
    eff = Framing(payload_bytes=8192, header_bytes=48, frame_bytes=1500, frame_overhead_bytes=50).efficiency()
    down, right = link(hw, at(hw, 0, 0), at(hw, 1, 0)), link(hw, at(hw, 0, 0), at(hw, 0, 1))
    assert (down.lanes, right.lanes) == (3, 4)
    assert down.bandwidth == pytest.approx(3 * 25 * GB * eff) and right.peak_bandwidth == 4 * 25 * GB
    assert len(hw.device_route(at(hw, 2, 7), at(hw, 2, 0))) == 1  # the 8-chip axis wraps
    assert len(hw.device_route(at(hw, 3, 5), at(hw, 0, 5))) == 3  # the 4-chip axis does not


def tiles_on_chips(**boundary) -> Component:
    tile = Component(name="tile", kind="tile", rows=4, cols=4, compute=Compute(peak_flops={"bf16": 1e12}))
    noc = Interconnect(topology="mesh", link_bandwidth_bytes_per_s=32 * GB, link_latency_s=9e-9)
    chip = Component(name="chip", kind="chip", cols=2, children=[tile], interconnect=noc)
    eth = Interconnect(topology="mesh", link_bandwidth_bytes_per_s=12.5 * GB, link_latency_s=1e-6,
                       boundary=boundary or None)
    return Component(name="sys", kind="system", children=[chip], interconnect=eth)


def test_boundary_links_are_shared_by_the_tile_pairs_of_a_facing_edge():
    plain = elaborate(tiles_on_chips())
    hw = elaborate(tiles_on_chips(links=2, latency_s=5e-7, bandwidth_bytes_per_s=25 * GB))
    a, b = at(hw, 1, 3), at(hw, 1, 4)  # facing tiles of the two chips
    assert link(plain, a, b).bandwidth == 12.5 * GB and link(plain, a, b).latency_s == 1e-6
    crossing = link(hw, a, b)
    assert crossing.lanes == pytest.approx(2 / 4) and crossing.bandwidth == pytest.approx(25 * GB / 2)
    assert crossing.latency_s == 5e-7 and crossing.level == "sys"
    edge = [link(hw, at(hw, r, 3), at(hw, r, 4)).bandwidth for r in range(4)]
    assert sum(edge) == pytest.approx(2 * 25 * GB)  # the edge carries exactly its two physical links
    assert link(hw, at(hw, 1, 1), at(hw, 1, 2)).bandwidth == 32 * GB  # on-chip links untouched


def test_framing_efficiency_is_the_ethernet_formula():
    f = Framing(payload_bytes=6144, header_bytes=48, frame_bytes=1500, frame_overhead_bytes=50)
    assert f.efficiency() == pytest.approx(6144 / (6144 + 48 + 50 * 5))
    assert Framing(payload_bytes=100).efficiency() == 1.0


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"topology": "switch", "axis_links": [1, 2]}, "only for mesh, torus or ring"),
        ({"topology": "mesh", "axis_wrap": [True, False]}, "axis_wrap: only for a torus"),
        ({"topology": "mesh", "dims": [2, 4], "axis_links": [1, 2, 3]}, "3 values for 2 grid axes"),
        ({"topology": "mesh", "axis_links": [1], "axis_bandwidth_bytes_per_s": [1e9, 2e9]}, "disagree"),
        ({"topology": "mesh", "collective": {"reduce_sync_packets": 20}}, "needs framing"),
        ({"topology": "fat-tree", "collective": {"fixed_s": 1e-6}}, "collective.fixed_s: apply to mesh"),
        ({"topology": "mesh", "collective": {"protocols": [{"name": "LL"}]}}, "protocols: for switch"),
        ({"topology": "switch", "boundary": {"links": 1}}, "boundary"),
    ],
)
def test_interconnect_validation_says_what_is_wrong(fields, message):
    with pytest.raises(ValidationError, match=message):
        Interconnect(link_bandwidth_bytes_per_s=1e9, **fields)


def test_per_axis_lists_must_match_the_grid_they_build():
    chip = Component(name="chip", kind="chip", rows=2, cols=4, compute=Compute(peak_flops={"bf16": 1e12}))
    ic = Interconnect(topology="mesh", link_bandwidth_bytes_per_s=1e9, axis_links=[1, 2, 3])
    with pytest.raises(ValidationError, match="3 values, but the grid has 2 axes"):
        Component(name="sys", kind="system", children=[chip], interconnect=ic)


def test_interconnects_without_the_new_fields_save_as_before():
    ic = Interconnect(topology="torus", link_bandwidth_bytes_per_s=50e9, link_latency_s=5e-7)
    dumped = ic.model_dump(mode="json")
    assert not {"axis_bandwidth_bytes_per_s", "axis_links", "axis_wrap", "boundary", "framing",
                "collective"} & set(dumped)
    assert Interconnect.model_validate(json.loads(json.dumps(dumped))) == ic


def test_n300_and_t3000_presets_follow_their_sources():
    n300 = elaborate(load_system("wormhole-n300"))
    assert len(n300.devices) == 2
    eth = link(n300, 0, 1)
    assert eth.lanes == 1 and eth.peak_bandwidth == 12.5 * GB and eth.latency_s == 711e-9
    t3k = elaborate(load_system("wormhole-t3000"))
    assert len(t3k.devices) == 8 and {d.coord for d in t3k.devices} == {(r, c) for r in range(2) for c in range(4)}
