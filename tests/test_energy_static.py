"""The power drawn whatever the devices do — each device's idle power (``static``) and the hosts around them
(``host``) — and the energy of a FLOP (``Compute.energy_pj_per_flop``): derived by hand on a small run, the
same for both engines per second of their own time, shown with units, and invisible to old project files."""

from __future__ import annotations

import json
import math

import pytest
from tilewright.engine.engines.energy import iteration_energy, iteration_traffic
from tilewright.engine.io.presets import load_project_preset, load_system, preset_path
from tilewright.engine.io.project_file import project_from_data, project_to_data
from tilewright.engine.ir import Component, DType, Project
from tilewright.engine.plan.program import program_for
from tilewright.engine.results.csv_export import metrics_rows
from tilewright.engine.simulate import make_plan, simulate
from tilewright.studio.ui.results.summary import result_tables

from tests.engine_cases import dgx, small_wafer
from tests.test_energy import energetic

PJ = 1e-12
NEW_FIELDS = ("energy_pj_per_flop", "idle_power_w")


def with_device_energy(project: Project, idle_w: float | None, pj_per_flop: dict[str, float]) -> Project:
    """The same project with every computing component's idle power and pJ/FLOP replaced."""

    def walk(comp: Component) -> Component:
        update: dict = {"children": [walk(c) for c in comp.children]}
        if comp.compute is not None:
            update["compute"] = comp.compute.model_copy(
                update={"idle_power_w": idle_w, "energy_pj_per_flop": {DType(k): v for k, v in pj_per_flop.items()}})
        return comp.model_copy(update=update)

    return project.model_copy(update={"hardware": walk(project.hardware)})


def _run(project: Project, engine: str):
    return simulate(project.model_copy(update={"run": project.run.model_copy(update={"engine": engine})}))


def test_small_run_by_hand():
    """8 A100s in one DGX node (tp 2, pp 2, dp 2): idle × time × devices + FLOPs × pJ/FLOP + bytes × pJ/byte
    + the node's own power × time, each from its own count."""
    project = with_device_energy(energetic(dgx(tp=2, pp=2, dp=2), pj_per_bit=3.0, dram=20.0), 50.0, {"bf16": 2.0})
    result = _run(project, "analytic")
    plan = make_plan(project)
    traffic = iteration_traffic(program_for(plan))
    t, parts = result.iteration_time_s, result.energy.by_part
    devices = project.mapping.tp * project.mapping.pp * project.mapping.dp
    node = project.hardware.children[0]
    nodes = math.ceil(devices / node.devices_per_instance())
    assert devices == 8 and nodes == 1 and node.power_w == 3300.0
    assert parts["static"] == pytest.approx(50.0 * t * devices)
    assert parts["host"] == pytest.approx(3300.0 * t * nodes)
    assert parts["compute"] == pytest.approx(plan.hardware_flops * 2.0 * PJ, rel=1e-6)  # the plan's own FLOP count
    assert parts["dram"] == pytest.approx(sum(traffic.local_bytes) * 20.0 * PJ)
    links = sum(b for lk, b in traffic.link_bytes.items() if plan.hw.links[lk].kind != "memory")
    assert parts["links"] + parts["noc"] == pytest.approx(links * 8 * 3.0 * PJ)
    # the hosts' rated power bounds rather than models: reported apart, left out of the total
    assert result.energy.total_j == pytest.approx(sum(v for k, v in parts.items() if k != "host"))
    assert result.energy.host_j == parts["host"]
    assert result.metrics_json()["host_energy_upper_bound_j"] == pytest.approx(parts["host"])
    m = result.metrics_json()
    assert m["average_power_w"] == pytest.approx(result.energy.total_j / t)
    assert m["average_power_per_device_w"] == pytest.approx(result.energy.total_j / t / devices)


def test_two_nodes_pay_two_hosts_and_idle_time_follows_each_engine():
    """16 devices span two DGX nodes; each engine's static and host joules are the same watts × its own time."""
    project = with_device_energy(dgx(tp=4, pp=2, dp=2), 60.0, {"bf16": 1.0})
    event, analytic = _run(project, "event"), _run(project, "analytic")
    for r in (event, analytic):
        assert r.energy.by_part["static"] == pytest.approx(60.0 * 16 * r.iteration_time_s)
        assert r.energy.by_part["host"] == pytest.approx(2 * 3300.0 * r.iteration_time_s)
    assert event.energy.by_part["compute"] == pytest.approx(analytic.energy.by_part["compute"])


def test_a_holder_inside_another_is_charged_once():
    """A system whose root also carries a power figure (its own, which holds its nodes'): the nodes nearest the
    devices are charged, the root is not added on top."""
    project = with_device_energy(dgx(tp=4, pp=2, dp=2), 60.0, {"bf16": 1.0})
    nested = project.model_copy(update={"hardware": project.hardware.model_copy(update={"power_w": 99_000.0})})
    r = _run(nested, "analytic")
    assert r.energy.by_part["host"] == pytest.approx(2 * 3300.0 * r.iteration_time_s)


def test_inference_charges_only_the_devices_it_uses():
    """A request on tp × pp devices: the static part counts those devices, not every GPU of the system."""
    project = load_project_preset("llama2-70b-h100-inference")
    result = _run(project, "analytic")
    used = project.mapping.tp * project.mapping.pp
    idle = project.hardware.device_template().idle_power_w
    assert idle and result.devices == used
    assert result.energy.by_part["static"] == pytest.approx(idle * used * result.iteration_time_s)


def test_no_figures_means_not_known_not_zero():
    result = _run(small_wafer(), "analytic")  # neither idle power nor pJ/FLOP nor a host power in that IR
    assert result.energy.by_part["static"] is None and result.energy.by_part["host"] is None
    assert result.energy.by_part["compute"] is None
    assert iteration_energy(program_for(make_plan(small_wafer()))).by_part["static"] is None  # no time: not priced


def test_a_format_takes_the_figure_of_the_units_it_runs_on():
    a100 = load_system("dgx-a100").device_template()
    h100 = load_system("dgx-h100").device_template()
    assert DType.fp8 not in a100.peak_flops  # fp8 runs on the fp16 units, and costs what fp16 costs
    assert a100.flop_energy_pj("fp8") == a100.energy_pj_per_flop[DType.fp16]
    assert h100.flop_energy_pj("fp8") == h100.energy_pj_per_flop[DType.fp8]
    assert h100.flop_energy_pj("int8") is None  # its own units, no figure: not borrowed from another format
    assert a100.flop_energy_pj("tf32") is None


def test_fp8_run_prices_its_flops_at_the_fp8_figure():
    project = with_device_energy(dgx(), 0.0, {"bf16": 1.0, "fp8": 0.25})
    bf16 = _run(project, "analytic")
    fp8 = _run(project.model_copy(update={"run": project.run.model_copy(update={"dtype": DType.fp8})}), "analytic")
    assert bf16.energy.by_part["compute"] == pytest.approx(bf16.hardware_flops_per_iteration * 1.0 * PJ, rel=1e-6)
    assert fp8.energy.by_part["compute"] == pytest.approx(fp8.hardware_flops_per_iteration * 0.25 * PJ, rel=1e-6)


def _strip(data):
    """``data`` without the new fields anywhere: what a project file written before them holds."""
    if isinstance(data, dict):
        return {k: _strip(v) for k, v in data.items() if k not in NEW_FIELDS}
    if isinstance(data, list):
        return [_strip(v) for v in data]
    return data


@pytest.mark.parametrize("name", ["gpt3-dgx-a100", "mixtral-8x7b-dgx-h100", "wormhole-n150-llama2-7b-inference"])
def test_old_project_files_load_and_save_back_unchanged(name):
    old = _strip(json.loads(preset_path("projects", name).read_text()))
    project = project_from_data(old, name)
    assert project.hardware.device_template().idle_power_w is None
    assert project_to_data(project) == old  # no new key appears while the fields hold their defaults
    result = _run(project, "analytic")
    assert result.energy.by_part["static"] is None and result.energy.by_part["compute"] is None


def test_cli_json_csv_and_summary_show_the_new_parts_with_units():
    result = _run(load_project_preset("gpt3-dgx-a100"), "analytic")
    m = json.loads(json.dumps(result.metrics_json()))
    assert m["energy_breakdown_j"]["static"] > 0 and m["energy_breakdown_j"]["host"] > 0
    text = result.summary_text()
    assert f"static {text.split('static ')[1].split(' J')[0]} J" in text and "host " in text
    assert "W per device" in text
    units = {key: unit for key, _, unit in metrics_rows(result)}
    assert units["energy_breakdown_j.static"] == "J" and units["energy_breakdown_j.host"] == "J"
    assert units["average_power_per_device_w"] == "W"
    tables = dict(result_tables(result))
    energy = dict(tables["Energy per iteration"])
    assert energy["static (idle devices)"].endswith("J") and energy["host (node, rated max)"].endswith("J")
    assert dict(tables["Run"])["average power per device (hosts excluded)"].endswith("W")
