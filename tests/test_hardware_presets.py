"""System presets: they load, are written canonically, cite their numbers, elaborate, and obey the
physical facts of the machines they describe."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tilewright.engine.hardware import elaborate
from tilewright.engine.ir.hardware import Component

PRESETS = Path(__file__).resolve().parents[1] / "presets" / "systems"
NAMES = [
    "dgx-a100", "dgx-h100", "palm-wafer", "hypar-array-16", "tpu-v4-torus", "chiplet-mesh", "wafer-64x64",
    "wormhole-n150", "blackhole-p150",
]
NAMES += ["wormhole-n300", "wormhole-t3000", "blackhole-galaxy"]  # multi-chip Tenstorrent meshes
GB = 1e9


def load(name: str) -> Component:
    return Component.model_validate_json((PRESETS / f"{name}.json").read_text())


def test_every_listed_preset_exists():
    assert {p.stem for p in PRESETS.glob("*.json")} >= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_preset_is_canonical_json(name):
    comp = load(name)
    text = (PRESETS / f"{name}.json").read_text()
    canonical = json.dumps(comp.model_dump(mode="json", exclude_defaults=False), sort_keys=True, indent=2)
    assert text.strip() == canonical
    assert comp.name == name


@pytest.mark.parametrize("name", NAMES)
def test_preset_numbers_are_commented(name):
    for path, comp in load(name).walk():
        assert comp.comment, path
        parts = [comp.compute, comp.interconnect, *comp.memories]
        for part in (p for p in parts if p is not None):
            assert part.comment, f"{path}: {type(part).__name__}"


@pytest.mark.parametrize("name", NAMES)
def test_preset_elaborates_with_sound_links_and_routes(name):
    hg = elaborate(load(name), devices_needed=16 if name.startswith("dgx") else None)
    assert hg.devices and all(lk.bandwidth > 0 and lk.latency_s >= 0 for lk in hg.links)
    rng = np.random.default_rng(0)
    n = len(hg.devices)
    for a, b in rng.integers(0, n, size=(40, 2)):
        src, dst = hg.devices[a].node, hg.devices[b].node
        node = src
        for i in hg.route(src, dst):
            assert hg.links[i].src == node
            node = hg.links[i].dst
        assert node == dst
        assert hg.hops(src, dst) == len(hg.route(src, dst))


@pytest.mark.parametrize("name", NAMES)
def test_efficiency_curves_are_physical(name):
    for _, comp in load(name).walk():
        curve = comp.compute.efficiency if comp.compute else None
        if curve is None:
            continue
        values = [v for _, v in curve.points]
        assert all(0 < v <= 1 for v in values)
        assert values == sorted(values)  # bigger operations never run less efficiently


# --- DGX -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dgx-a100", "dgx-h100"])
def test_dgx_intra_node_uses_nvswitch_and_inter_node_uses_infiniband(name):
    hg = elaborate(load(name), devices_needed=32)
    root = hg.root.name
    for a, b in [(0, 7), (9, 14)]:
        r = hg.device_route(a, b)
        assert r and all(hg.links[i].level == f"{root}/node" for i in r)
    for a, b in [(0, 8), (7, 31), (12, 20)]:
        r = hg.device_route(a, b)
        assert any(hg.links[i].level == root for i in r)


def test_dgx_a100_bandwidths_and_growth():
    hg = elaborate(load("dgx-a100"), devices_needed=1536)
    assert hg.summary()["devices"] == 1536
    assert hg.root.children[0].rows == 192
    nv = hg.links[hg.device_route(0, 1)[0]]
    ib = hg.links[hg.device_route(0, 8)[0]]
    assert nv.peak_bandwidth == 300 * GB and ib.peak_bandwidth == 25 * GB
    assert nv.bandwidth < nv.peak_bandwidth and ib.bandwidth < ib.peak_bandwidth
    gpu = hg.devices[0]
    assert gpu.compute.peak("bf16") == 312e12
    assert gpu.memories[0].bandwidth_bytes_per_s == pytest.approx(2.039e12)


def test_dgx_a100_totals_count_every_node():
    s = elaborate(load("dgx-a100"), devices_needed=16).summary()
    assert s["power_w"] == pytest.approx(2 * 6500)  # DGX A100 maximum system power
    assert s["cost_usd"] == pytest.approx(2 * 199_000)
    assert s["area_mm2"] == pytest.approx(16 * 826)


def test_dgx_h100_is_faster_everywhere():
    a = elaborate(load("dgx-a100"), devices_needed=16)
    h = elaborate(load("dgx-h100"), devices_needed=16)
    assert h.devices[0].compute.peak("bf16") > a.devices[0].compute.peak("bf16")
    for pair in [(0, 1), (0, 8)]:
        assert h.links[h.device_route(*pair)[0]].bandwidth > a.links[a.device_route(*pair)[0]].bandwidth


# --- wafers, arrays, tori --------------------------------------------------------------------------------


def test_palm_wafer_memory_route_edge_versus_centre():
    hg = elaborate(load("palm-wafer"))
    assert len(hg.devices) == 320
    edge = hg.device_index("palm-wafer/die[2,1]/tile[1,0]")
    port, r = hg.memory_route(edge, "dram")
    assert port.owner == "palm-wafer/die[2,1]" and port.edge.value == "west"
    # one hop onto the port's controller, then the shared DRAM channel; no NoC link
    assert len(r) == 2 and r[-1] == port.channel_in
    centre = hg.device_index("palm-wafer/die[2,1]/tile[1,1]")
    port_c, rc = hg.memory_route(centre, "dram")
    assert port_c.owner == "palm-wafer/die[2,1]"
    assert len(rc) > len(r) and any(hg.links[i].kind == "noc" for i in rc)


def test_palm_wafer_die_to_die_link_on_boundary():
    hg = elaborate(load("palm-wafer"))
    r = hg.route("palm-wafer/die[0,0]/tile[0,0]", "palm-wafer/die[0,1]/tile[0,0]")
    assert len(r) == 4
    assert [hg.links[i].level for i in r].count("palm-wafer") == 1
    assert min(hg.links[i].bandwidth for i in r) == 256 * GB


def test_tpu_v4_cube_is_a_3d_torus():
    hg = elaborate(load("tpu-v4-torus"))
    assert len(hg.devices) == 64
    assert max(hg.hops(hg.devices[0].node, d.node) for d in hg.devices) == 6
    assert all(hg.graph.out_degree(d.node) == 6 + 1 for d in hg.devices)  # 6 ICI links + HBM channel


def test_hypar_array_is_an_htree():
    hg = elaborate(load("hypar-array-16"))
    s = hg.summary()
    assert s["devices"] == 16 and s["routers"] == 15
    assert hg.hops(hg.devices[0].node, hg.devices[15].node) == 8


def test_chiplet_mesh_hbm_on_package_edges():
    hg = elaborate(load("chiplet-mesh"))
    ports = [p for p in hg.memory_ports if p.edge is not None]
    assert sorted(p.edge.value for p in ports) == ["east", "east", "west", "west"]
    for p in ports:
        cols = {hg.devices[hg.device_index(n)].coord[1] for n in p.attached}
        assert cols == ({0} if p.edge.value == "west" else {3})


def test_wafer_64x64_elaborates_globally():
    """4,096 tiles on one global mesh (the < 0.3 s bar is benchmarks/bench_elaborate.py's)."""
    hg = elaborate(load("wafer-64x64"))
    assert len(hg.devices) == 4096
    assert hg.hops(hg.devices[0].node, hg.devices[-1].node) == 126
    port, r = hg.memory_route(64 * 32 + 31, "dram")
    assert sum(hg.links[i].kind == "noc" for i in r) == 31
