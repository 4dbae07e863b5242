"""``Result.dram_ports`` for a device's own (local) DRAM: its bytes are the device's DRAM traffic from the
plan, not the 0 B its never-used channel links carried — and the studio's port rows show them."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_project_preset
from tilewright.engine.simulate import simulate
from tilewright.studio.model.split_traffic import format_traffic
from tilewright.studio.model.traffic_rows import port_loads, port_rows, port_spread, port_utilisation
from tilewright.studio.units import format_percent

PJ = 1e-12


@pytest.fixture(scope="module")
def tpu():
    project = load_project_preset("tpu-v4-llama2-7b")
    return project, simulate(project)


@pytest.fixture(scope="module")
def h100_inference():
    project = load_project_preset("llama2-70b-h100-inference")
    return project, simulate(project)


def _local(result):
    return [p for p in result.dram_ports if p["interleave"] == "local"]


def test_every_tpu_chip_reports_its_hbm_traffic(tpu):
    project, result = tpu
    ports = _local(result)
    assert len(ports) == project.mapping.devices  # one HBM per chip, all 64 chips train
    totals = {p["bytes"] for p in ports}
    assert len(totals) == 1 and totals.pop() > 0  # data parallel: every chip moves the same bytes
    for p in ports:
        assert p["read_bytes"] is None and p["write_bytes"] is None  # priced inside each op: no direction
        # the cost model prices these bytes against the HBM's achievable bandwidth: they fit in the run
        assert p["bytes"] <= p["read_bandwidth_bytes_per_s"] * result.iteration_time_s
    # the same bytes energy prices at the HBM's pJ/byte (the chips have no other DRAM)
    hbm = project.hardware.children[0].memories
    (pj,) = {m.energy_pj_per_byte for m in hbm if m.kind.value != "sram"}
    assert sum(p["bytes"] for p in ports) * pj * PJ == pytest.approx(result.energy.by_part["dram"], rel=1e-9)


def test_decode_reads_every_weight_once_per_output_token(h100_inference):
    project, result = h100_inference
    hbm = [p for p in _local(result) if p["memory"] == "hbm"]
    busy = [p for p in hbm if p["bytes"] > 0]
    assert len(busy) == project.mapping.tp  # the tensor-parallel group that serves; nothing else moves
    weights = result.memory_breakdown_bytes["weights"]  # per device, from the memory tracks
    output_tokens = project.run.inference.output_tokens  # the prefill's token, then one per decode step
    for p in busy:
        assert weights * output_tokens <= p["bytes"] <= p["read_bandwidth_bytes_per_s"] * result.iteration_time_s
    host = [p for p in _local(result) if p["memory"] != "hbm"]
    assert host and all(p["bytes"] == 0.0 for p in host)  # nothing offloads to the node's host memory


def test_ported_memories_still_split_reads_and_writes():
    result = simulate(load_project_preset("palm-wafer-t18b"))
    assert result.dram_ports and not _local(result)
    for p in result.dram_ports:
        assert p["bytes"] == p["read_bytes"] + p["write_bytes"]


def test_studio_rows_show_a_local_port_as_one_total(tpu):
    _, result = tpu
    span = result.iteration_time_s
    ports = _local(result)
    rows = port_rows(ports, span)
    assert len(rows) == len(ports)
    p = ports[0]
    util = p["bytes"] / (p["read_bandwidth_bytes_per_s"] * span)
    assert 0 < util <= 1 and port_utilisation(p, span) == pytest.approx(util)
    row = next(r for r in rows if r.what == p["port"])
    assert row.amount == f"{format_traffic(p['bytes'])} read + written"
    assert row.rate == f"{format_percent(util)} of its bandwidth"
    assert "no bytes" not in port_spread(ports) and "busiest 1× the least busy" in port_spread(ports)
    owner = p["port"].rpartition("/")[0]
    assert port_loads(ports, owner, span) == {"hbm": f"{format_traffic(p['bytes'])} read + written · "
                                                      f"{format_percent(util)} busy"}
