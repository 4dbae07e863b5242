"""Memory hierarchy (issue 10): DRAM ports anywhere in a grid, interleaved placement over every port (the
default) or the nearest port, SRAM bandwidth always a bound, residency (``mapping.memory_levels``), fusion on
SRAM-only tiles, the DRAM floor of the analytic engine, and the PALM / WSE-2 presets."""

from __future__ import annotations

import pytest
from tilewright.engine.hardware import elaborate
from tilewright.engine.hardware.interleave import PortSpread, stream_usage
from tilewright.engine.io.presets import load_project_preset, load_system
from tilewright.engine.ir import Mapping, Project, RunSettings
from tilewright.engine.ir.hardware import Component, Compute, Interconnect, Memory
from tilewright.engine.ir.project import EngineKind
from tilewright.engine.perf.tiling import matmul_traffic
from tilewright.engine.plan import train_step
from tilewright.engine.plan.checks import check_project
from tilewright.engine.plan.timing import dram_floor, dram_link_bytes
from tilewright.engine.simulate import make_plan, simulate

from tests.engine_cases import GPT, small_wafer
from tests.factories import wafer

GB = 1e9
ATTENTION = ["attention", "softmax", "attention_dropout"]


def grid(rows: int = 4, cols: int = 6, **memory) -> Component:
    tile = Component(name="tile", kind="tile", rows=rows, cols=cols, compute=Compute(peak_flops={"fp16": 1e12}),
                     memories=[Memory(name="sram", kind="sram", capacity_bytes=1e6, bandwidth_bytes_per_s=500 * GB)])
    dram = {"name": "dram", "kind": "ddr", "capacity_bytes": 8e9, "bandwidth_bytes_per_s": 50 * GB} | memory
    return Component(name="chip", kind="chip", children=[tile],
                     interconnect=Interconnect(topology="mesh", link_bandwidth_bytes_per_s=100 * GB),
                     memories=[Memory(**dram)])


def run(project: Project, engine: str = "analytic", **settings):
    update = {"engine": EngineKind(engine)} | settings
    return simulate(project.model_copy(update={"run": project.run.model_copy(update=update)}))


def with_mapping(project: Project, **changes) -> Project:
    return project.model_copy(update={"mapping": project.mapping.model_copy(update=changes)})


# --- ports anywhere in the grid ------------------------------------------------------------------------


def test_ports_sit_on_a_listed_column_row_and_cell():
    hg = elaborate(grid(placement={"columns": [3], "rows": [0], "cells": [[2, 1]]}, ports_per_edge=2))
    ports = {p.node.split("/", 1)[1]: p for p in hg.memory_ports if p.memory.name == "dram"}
    assert sorted(ports) == ["dram@cell[2,1]", "dram@col3[0]", "dram@col3[1]", "dram@row0[0]", "dram@row0[1]"]
    col = [hg.devices[hg.device_index(a)].coord for a in ports["dram@col3[1]"].attached]
    assert col == [(2, 3), (3, 3)]  # the lower half of column 3: an interior DRAM column, as on Wormhole
    assert [hg.devices[hg.device_index(a)].coord for a in ports["dram@cell[2,1]"].attached] == [(2, 1)]
    assert all(p.ctrl is not None and p.edge is None for p in ports.values())
    # a tile in the middle reaches the column's port without crossing to an edge
    port, route = hg.memory_route(hg.device_index("chip/tile[1,2]"), "dram")
    assert port.node.endswith("@col3[0]")
    assert sum(hg.links[i].kind != "memory" for i in route) == 1


def test_a_port_outside_the_grid_is_refused():
    with pytest.raises(ValueError, match="placement.columns: 9 is outside the 4 x 6 grid"):
        elaborate(grid(placement={"columns": [9]}))


def test_ports_without_a_grid_beneath_are_refused():
    with pytest.raises(ValueError, match="memories.dram.placement: ports need children"):
        Component(name="t", kind="tile", compute=Compute(peak_flops={"fp16": 1e12}),
                  memories=[Memory(name="dram", kind="ddr", capacity_bytes=1e9, bandwidth_bytes_per_s=1e9,
                                   placement={"cells": [[0, 0]]})])


def test_channel_directions_take_their_achievable_fraction():
    interleaved = elaborate(grid(attach=["west"], efficiency=0.9, efficiency_interleaved_read=0.69,
                                 efficiency_interleaved_write=0.5))
    nearest = elaborate(grid(attach=["west"], efficiency=0.9, efficiency_interleaved_read=0.69,
                             efficiency_interleaved_write=0.5, interleave="nearest"))
    for hg, (write, read) in ((interleaved, (0.5, 0.69)), (nearest, (0.9, 0.9))):
        port = next(p for p in hg.memory_ports if p.memory.name == "dram")
        assert hg.links[port.channel_in].bandwidth == pytest.approx(50 * GB * write)
        assert hg.links[port.channel_out].bandwidth == pytest.approx(50 * GB * read)


# --- interleaved usage ---------------------------------------------------------------------------------


@pytest.mark.parametrize("system", ["palm-wafer", "wafer-64x64", "chiplet-mesh"])
@pytest.mark.parametrize("read", [True, False])
def test_interleaved_usage_is_the_average_of_the_routes_to_every_port(system, read):
    hg = elaborate(load_system(system))
    name = next(p for p in hg.memory_ports if p.ctrl).memory.name
    devices = list(range(0, len(hg.devices), max(1, len(hg.devices) // 23)))
    walked: dict[int, float] = {}
    for d in devices:
        ports = hg.ports_of(d, name)
        for p in ports:
            node = hg.devices[d].node
            for lk in hg.route(p.node, node) if read else hg.route(node, p.node):
                walked[lk] = walked.get(lk, 0.0) + 1 / len(ports)
    fast = PortSpread(hg).usage(devices, name, read)
    assert fast.keys() == walked.keys()
    assert all(fast[lk] == pytest.approx(walked[lk], rel=1e-12) for lk in fast)


def test_interleaving_spreads_a_corner_group_over_every_port():
    """Four tiles next to one port: nearest binds them all to it, interleaved gives each port a quarter."""
    devices = [0, 1, 6, 7]  # the top-left 2 × 2 of a 4 × 6 grid
    hg = elaborate(grid(attach=["west", "east"], ports_per_edge=2))
    mem = next(p.memory for p in hg.memory_ports if p.ctrl)
    spread = stream_usage(hg, devices, mem)
    near = stream_usage(hg, devices, mem.model_copy(update={"interleave": "nearest"}))
    channels = [p.channel_out for p in hg.memory_ports if p.ctrl]
    assert [spread.get(c, 0.0) for c in channels] == pytest.approx([1.0, 1.0, 1.0, 1.0])
    assert sorted(near.get(c, 0.0) for c in channels) == [0.0, 0.0, 0.0, 4.0]
    busiest = {name: max(u / hg.links[lk].bandwidth for lk, u in usage.items())
               for name, usage in (("spread", spread), ("near", near))}
    assert busiest["spread"] < busiest["near"]


@pytest.mark.parametrize("interleave", ["interleaved", "nearest"])
@pytest.mark.parametrize("dp", [1, 2])
def test_engines_agree_without_contention_on_dram_streams(interleave, dp):
    hw = wafer()
    hw.children[0].memories[0].interleave = interleave
    project = small_wafer(dp=dp, pp=2, global_batch=8).model_copy(update={"hardware": hw})
    event, analytic = run(project, "event", contention=False), run(project, "analytic")
    assert event.iteration_time_s == pytest.approx(analytic.iteration_time_s, rel=1e-9)
    for k, v in analytic.time_breakdown_s.items():
        assert event.time_breakdown_s.get(k, 0.0) == pytest.approx(v, abs=1e-9 * analytic.iteration_time_s), k


# --- SRAM bandwidth is always a bound -----------------------------------------------------------------------


def test_sram_bandwidth_bounds_a_wafer_without_dram():
    project = load_project_preset("cerebras-wse2-llama2-7b-inference")
    slow = project.model_copy(deep=True)
    slow.hardware.children[0].memories[0].bandwidth_bytes_per_s = 1e9
    fast_r, slow_r = run(project), run(slow)
    assert slow_r.iteration_time_s > 10 * fast_r.iteration_time_s
    assert slow_r.time_breakdown_s["memory_stall"] > 0


# --- residency ------------------------------------------------------------------------------------------------


def big_sram_wafer(**mapping) -> Project:
    hw = wafer()
    hw.children[0].children[0].memories[0].capacity_bytes = 48e6
    return with_mapping(small_wafer().model_copy(update={"hardware": hw}), **mapping)


def test_weights_in_sram_stream_nothing_from_dram_for_them():
    base, held = make_plan(big_sram_wafer()), make_plan(big_sram_wafer(memory_levels={"weights": "sram"}))
    dram = [sum(seg.dram_bytes for ps in plan.stages[0].passes.values() for seg in ps.segments)
            for plan in (base, held)]
    assert dram[1] < dram[0]
    assert run(big_sram_wafer(memory_levels={"weights": "sram"})).iteration_time_s < run(
        big_sram_wafer()).iteration_time_s


def test_residency_is_reported_and_each_level_has_its_own_track():
    result = run(big_sram_wafer(memory_levels={"weights": "sram"}))
    assert any("residency per device" in n and "weights" in n and "in sram 'sram'" in n for n in result.notes)
    tracks = {t.device.rsplit("/", 1)[1]: t for t in result.memory if t.device.startswith("wafer/die[0,0]/tile[0,0]")}
    assert sorted(tracks) == ["dram", "sram"]
    assert tracks["sram"].capacity_bytes == 48e6
    assert tracks["sram"].peak_breakdown()["weights"] > 0 and tracks["dram"].peak_breakdown()["weights"] == 0
    assert tracks["dram"].capacity_bytes == pytest.approx(16 * GB * 2 / 16)  # two ports shared by 16 tiles


def test_auto_keeps_weights_in_sram_when_they_fit_and_dram_when_not():
    assert "in sram 'sram' (auto)" in " ".join(run(big_sram_wafer(memory_levels={"weights": "auto"})).notes)
    small = with_mapping(small_wafer(), memory_levels={"weights": "auto"})  # 3 MB of SRAM: 3.1 MB of weights
    assert "in dram 'dram' (auto)" in " ".join(run(small).notes)


def test_too_much_in_sram_is_out_of_memory_on_the_sram_track():
    result = run(big_sram_wafer(memory_levels={"weights": "sram", "activations": "sram"}))
    assert result.oom is not None and result.oom.device.endswith("/sram")


def test_an_unreachable_memory_is_refused_with_the_field():
    with pytest.raises(ValueError, match=r"mapping.memory_levels.weights: memory 'hbm' is not reachable"):
        make_plan(with_mapping(small_wafer(), memory_levels={"weights": "hbm"}).model_copy(
            update={"hardware": _with_gpu_hbm_elsewhere()}))
    assert check_project(with_mapping(small_wafer(), memory_levels={"weights": "auto"})) == []


def _with_gpu_hbm_elsewhere() -> Component:
    """The small wafer plus a memory called 'hbm' that no tile can reach (a second, unconnected die kind)."""
    hw = wafer()
    other = Component(name="io", kind="chip", compute=Compute(peak_flops={"fp16": 1e12}),
                      memories=[Memory(name="hbm", kind="hbm", capacity_bytes=1e9, bandwidth_bytes_per_s=1e11)])
    return hw.model_copy(update={"children": [*hw.children, other]})


def host_dgx(link: float | None = 32 * GB) -> Component:
    """DGX-A100 nodes with 1 TB of host DDR each (8 channels DDR4-3200 per socket, 2 sockets: 409.6 GB/s)."""
    hw = load_system("dgx-a100")
    node = hw.children[0]
    host = Memory(name="host", kind="ddr", capacity_bytes=1e12, bandwidth_bytes_per_s=409.6 * GB,
                  host_link_bandwidth_bytes_per_s=link)
    node = node.model_copy(update={"memories": [*(m for m in node.memories if m.name != "host"), host]})
    return hw.model_copy(update={"children": [node, *hw.children[1:]]})


def gpu(**mapping) -> Project:
    m = {"tp": 2, "pp": 1, "dp": 1, "micro_batch": 4, "global_batch": 4} | mapping
    return Project(name="offload", hardware=host_dgx(), workload=GPT, mapping=Mapping(**m), run=RunSettings())


def test_weights_in_host_memory_stream_over_the_host_link(monkeypatch):
    """Weights in host memory cross the host link each pass (on this small model Megatron's per-tensor optimizer
    loops, which an offloading runtime's step does not run, would outweigh that traffic: taken away here)."""
    monkeypatch.setattr(train_step, "loop_seconds", lambda *a, **k: 0.0)  # the per-tensor loops, tested apart
    base, offload = run(gpu()), run(gpu(memory_levels={"weights": "host"}))
    assert offload.iteration_time_s > base.iteration_time_s
    plan = make_plan(gpu(memory_levels={"weights": "host"}))
    res = plan.stages[0].residency
    assert res.placed["weights"] == "host" and res.residency.host_bandwidth == pytest.approx(32 * GB)
    # with a wider host link than the memory can share out, the memory's share per GPU binds (8 GPUs a node)
    wide = make_plan(gpu(memory_levels={"weights": "host"}).model_copy(update={"hardware": host_dgx(link=100 * GB)}))
    assert wide.stages[0].residency.residency.host_bandwidth == pytest.approx(409.6 * GB / 8)
    with pytest.raises(ValueError, match="memory_levels.weights: memory 'host' sits above the devices and has no "
                                         "host_link_bandwidth_bytes_per_s"):
        make_plan(gpu(memory_levels={"weights": "host"}).model_copy(update={"hardware": host_dgx(link=None)}))
    # auto never picks a host memory nobody said how to reach
    assert "in dram 'hbm' (auto)" in " ".join(run(gpu(memory_levels={"weights": "auto"}).model_copy(
        update={"hardware": host_dgx(link=None)})).notes)


def test_naming_the_memory_a_gpu_already_uses_changes_nothing():
    assert run(gpu(memory_levels={"weights": "hbm"})).iteration_time_s == run(gpu()).iteration_time_s


# --- fusion on every hierarchy and the DRAM floor ---------------------------------------------------------


def test_fused_attention_is_faster_on_palm_wafer():
    project = load_project_preset("palm-wafer-t18b")
    plain, fused = run(project), run(with_mapping(project, fusion=[ATTENTION]))
    assert fused.iteration_time_s < 0.97 * plain.iteration_time_s


def test_fusion_keeps_nothing_on_chip_when_a_row_does_not_fit():
    tiny = wafer()
    tiny.children[0].children[0].memories[0].capacity_bytes = 1e3
    plain = make_plan(small_wafer().model_copy(update={"hardware": tiny}))
    fused = make_plan(small_wafer(fusion=[["mlp_up", "activation", "mlp_down"]]).model_copy(update={"hardware": tiny}))
    dram = [sum(s.dram_bytes for ps in p.stages[0].passes.values() for s in ps.segments) for p in (plain, fused)]
    assert dram[0] == dram[1]


@pytest.mark.parametrize("placement", ["block", "snake"])
def test_analytic_never_beats_the_dram_floor_of_its_own_traffic(placement):
    project = with_mapping(load_project_preset("palm-wafer-t18b"), placement=placement)
    plan = make_plan(project)
    floor, _ = dram_floor(plan)
    ports = [p for p in plan.hw.memory_ports if p.ctrl]
    total = sum(dram_link_bytes(plan)[p.channel_out] for p in ports)
    everything = total / sum(plan.hw.links[p.channel_out].bandwidth for p in ports)
    analytic = run(project).iteration_time_s
    assert analytic >= floor * (1 - 1e-12) and floor >= everything
    assert run(project, "event").iteration_time_s >= floor * (1 - 1e-9)  # flows never beat it either


# --- presets -------------------------------------------------------------------------------------------


def test_palm_wafer_has_four_ports_per_die_and_one_die_per_stage():
    hg = elaborate(load_system("palm-wafer"))
    die = [p for p in hg.memory_ports if p.owner == "palm-wafer/die[2,1]"]
    assert sorted(p.node.rsplit("@", 1)[1] for p in die) == ["east[0]", "east[1]", "west[0]", "west[1]"]
    plan = make_plan(load_project_preset("palm-wafer-t18b"))
    for st in plan.stages:
        dies = {plan.hw.devices[d].node.split("/")[1] for d in st.groups[0]}
        assert len(dies) == 1


def test_cerebras_wse2_is_an_sram_only_wafer_of_pe_blocks():
    hg = elaborate(load_system("cerebras-wse2"))
    assert len(hg.devices) == 1024 and not [p for p in hg.memory_ports if p.ctrl]
    d = hg.devices[0]
    assert d.memories[0].capacity_bytes * 1024 == pytest.approx(40e9, rel=0.05)  # 40 GB on the wafer (S40)
    assert d.memories[0].bandwidth_bytes_per_s * 1024 == pytest.approx(20e15, rel=0.01)  # 20 PB/s (S40)
    result = run(load_project_preset("cerebras-wse2-llama2-7b-inference"))
    assert result.oom is None and result.tpot_s > 0
    assert any("weights" in n and "in sram 'sram'" in n for n in result.notes)


# --- the tiling model with resident operands ---------------------------------------------------------------


def test_a_resident_operand_is_stationary_and_the_others_move_once():
    m, n, k = 2048, 2304, 6144
    t = matmul_traffic(m, n, k, 1.5e6, frozenset({"b"}))
    assert t.dram_elems == m * k + m * n and t.dataflow == "weights on chip"
    assert matmul_traffic(m, n, k, 1.5e6, frozenset({"a", "c"})).dram_elems == k * n
