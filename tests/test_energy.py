"""Energy per iteration / request: counted from the plan in one place, checked against what the event
engine's flow network actually moves, by hand on the IR's figures, and the same for both engines."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.engines.energy import iteration_energy, iteration_traffic
from tilewright.engine.engines.event.simulation import Simulation
from tilewright.engine.ir import Component, Project
from tilewright.engine.plan.program import program_for
from tilewright.engine.results.result import LASTING_PARTS
from tilewright.engine.simulate import make_plan, simulate

from tests.engine_cases import dgx, llama_inference, small_cluster, small_wafer

PJ = 1e-12


def with_energy(comp: Component, pj_per_bit: float, sram: float, dram: float) -> Component:
    """The same hardware with every interconnect at ``pj_per_bit`` and every SRAM / DRAM at its pJ/byte."""
    update: dict = {"children": [with_energy(c, pj_per_bit, sram, dram) for c in comp.children]}
    if comp.interconnect is not None:
        update["interconnect"] = comp.interconnect.model_copy(update={"energy_pj_per_bit": pj_per_bit})
    update["memories"] = [
        m.model_copy(update={"energy_pj_per_byte": sram if m.kind.value == "sram" else dram}) for m in comp.memories
    ]
    return comp.model_copy(update=update)


def energetic(project: Project, pj_per_bit: float = 5.0, sram: float = 1.0, dram: float = 20.0) -> Project:
    return project.model_copy(update={"hardware": with_energy(project.hardware, pj_per_bit, sram, dram)})


def _quiet(project: Project, **run) -> Project:
    return project.model_copy(update={"run": project.run.model_copy(update={"contention": False} | run)})


CASES = {
    "dgx": lambda: dgx(),
    "dgx-zero-interleaved": lambda: dgx(tp=2, pp=2, dp=2, zero=1, interleave=2),
    "cluster": small_cluster,
    "wafer-dram": small_wafer,
    "inference": llama_inference,
}


@pytest.mark.parametrize("coarse", [False, True], ids=["slices", "pass-slices"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_counted_link_bytes_are_what_the_flow_network_moves(name, coarse, monkeypatch):
    """Per device (every replica and member simulated), the event engine's flows carry exactly the
    bytes the energy count charges, link by link — tensor-parallel collectives folded into compute
    (private links: inference here) included, whether the Gantt gets a slice per segment or per pass."""
    import tilewright.engine.engines.event.simulation as simulation

    if coarse:
        monkeypatch.setattr(simulation, "SEGMENT_SLICE_LIMIT", 0)
    project = CASES[name]()
    plan = make_plan(project)
    program = program_for(plan)
    sim = Simulation(program, contention=False, aggregate=False)
    sim.run()
    moved = {lk: b for lk, b in sim.net.link_bytes().items() if b > 0}
    counted = {lk: b for lk, b in iteration_traffic(program).link_bytes.items() if b > 0}
    assert moved and set(moved) == set(counted)
    for lk, b in counted.items():
        assert moved[lk] == pytest.approx(b, rel=1e-9), plan.hw.links[lk]


def test_energy_by_hand_on_a_wafer():
    project = energetic(small_wafer(), pj_per_bit=2.0, sram=0.5, dram=30.0)
    plan = make_plan(project)
    program = program_for(plan)
    traffic = iteration_traffic(program)
    energy = iteration_energy(program, traffic)
    hw = plan.hw
    noc = sum(b for lk, b in traffic.link_bytes.items() if hw.links[lk].kind == "noc")
    assert noc > 0 and sum(traffic.remote_bytes) > 0 and sum(traffic.local_bytes) > 0
    assert energy.by_part["noc"] == pytest.approx(noc * 8 * 2.0 * PJ)
    assert energy.by_part["sram"] == pytest.approx(sum(traffic.local_bytes) * 0.5 * PJ)
    assert energy.by_part["dram"] == pytest.approx(sum(traffic.remote_bytes) * 30.0 * PJ)
    assert energy.by_part["compute"] is None  # the IR has no energy per FLOP
    assert energy.total_j == pytest.approx(sum(v for v in energy.by_part.values() if v))
    assert any("2 pJ/bit" in s for s in energy.sources) and any("30 pJ/byte" in s for s in energy.sources)
    # every device's own traffic, counted once per device: FLOPs match the plan's hardware FLOPs
    assert sum(traffic.flops) == pytest.approx(plan.hardware_flops, rel=1e-6)


def test_dgx_links_and_hbm():
    project = energetic(dgx(tp=2, pp=2, dp=2), pj_per_bit=4.0, dram=25.0)
    plan = make_plan(project)
    program = program_for(plan)
    traffic = iteration_traffic(program)
    energy = iteration_energy(program, traffic)
    off_chip = sum(b for lk, b in traffic.link_bytes.items() if plan.hw.links[lk].kind != "memory")
    assert energy.by_part["links"] + energy.by_part["noc"] == pytest.approx(off_chip * 8 * 4.0 * PJ)
    assert energy.by_part["dram"] == pytest.approx(sum(traffic.local_bytes) * 25.0 * PJ)
    assert energy.by_part["sram"] == 0.0


@pytest.mark.parametrize("name", ["dgx", "wafer-dram", "inference"])
def test_both_engines_report_the_same_energy(name):
    project = energetic(CASES[name]())
    event = simulate(_quiet(project, engine="event"))
    analytic = simulate(_quiet(project, engine="analytic"))
    assert event.energy is not None and event.energy.total_j > 0
    counted = [k for k in event.energy.by_part if k not in LASTING_PARTS]  # the idle draws follow each one's time
    shared = {k: analytic.energy.by_part[k] for k in counted}
    assert {k: event.energy.by_part[k] for k in counted} == pytest.approx(shared)
    assert event.energy.power_w == analytic.energy.power_w


def test_energy_in_json_and_summary():
    result = simulate(energetic(dgx()))
    m = json.loads(json.dumps(result.metrics_json()))
    assert m["energy_j"] == pytest.approx(result.energy.total_j)
    assert m["average_power_w"] == pytest.approx(m["energy_j"] / m["iteration_time_s"])
    assert set(m["energy_breakdown_j"]) == {"compute", "sram", "dram", "noc", "links", "static", "host"}
    assert m["energy_sources"]
    text = result.summary_text()
    assert " J per iteration" in text and " W" in text and "energy by part" in text


def test_folded_collectives_show_in_link_series_with_their_bytes():
    """Tensor-parallel collectives on private links run as compute (no flows); their bytes and loads are
    booked on the network anyway: each link's utilisation integrates to the bytes it carried."""
    from tilewright.engine.engines.event.engine import EventEngine

    project = llama_inference()
    plan = make_plan(project)
    program = program_for(plan)
    sim = Simulation(program)
    sim.run()
    result = EventEngine().run(plan)
    counted = iteration_traffic(program).link_bytes
    by_name = {f"{plan.hw.links[lk].src} → {plan.hw.links[lk].dst}": lk for lk, b in counted.items() if b > 0}
    assert by_name and {s.name for s in result.link_utilisation} == set(by_name)
    for s in result.link_utilisation:
        lk = by_name[s.name]
        carried = s.mean(result.iteration_time_s) * result.iteration_time_s * plan.hw.links[lk].bandwidth
        assert carried == pytest.approx(counted[lk], rel=1e-6), s.name
        assert max(s.values) <= 1.0 + 1e-9


def test_bookings_may_come_in_any_order():
    import simpy
    from tilewright.engine.engines.event.network import FlowNetwork

    net = FlowNetwork(simpy.Environment(), [100.0, 50.0])
    usage = {0: 1.0, 1: 1.0}
    assert net.account(usage, 100.0, 5.0) == pytest.approx(7.0)  # the 50 B/s link is the bottleneck
    assert net.account(usage, 50.0, 0.0, 2.0) == 2.0  # earlier, spread over [0, 2)
    trace = net.link_traces([1])[1]
    assert trace.times.tolist() == [0.0, 2.0, 5.0, 7.0]
    assert trace.loads.tolist() == pytest.approx([25.0, 0.0, 50.0, 0.0])
    assert net.link_bytes() == {0: 150.0, 1: 150.0}


def test_a_design_without_energy_figures_says_so_instead_of_0_joules():
    from tilewright.engine.io.presets import load_project_preset

    text = simulate(load_project_preset("hypar-vgg-a")).summary_text()  # no pJ figures in that preset
    assert "energy           not known" in text and "0 J per" not in text
