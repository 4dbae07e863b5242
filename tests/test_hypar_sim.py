"""A HyPar partition simulated: bytes conserved against the search's count, the two engines agree, the
all-dp partition is the ordinary data-parallel run, memory follows the weight shares, and the command line."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from tilewright.engine.cli import main
from tilewright.engine.engines.event.simulation import Simulation
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_project_preset, load_system
from tilewright.engine.io.project_file import project_from_data
from tilewright.engine.ir.mapping import LayerParallelism
from tilewright.engine.ir.project import Project
from tilewright.engine.perf.collectives import Collective, pairwise_exchange
from tilewright.engine.plan.plan import Plan
from tilewright.engine.plan.program import program_for
from tilewright.engine.search.hypar.compare import COMM, comparison_projects
from tilewright.engine.search.hypar.partition import Partition, evaluate, hypar, hypar_layers
from tilewright.engine.search.hypar.report import apply_partition
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

from tests.factories import cluster

SYSTEM = "hypar-array-16"
# Three fc layers on 4 devices, two micro-batches: every transition (dp→mp, mp→mp, mp→dp), partial sums
# and ΔW at both levels, and a layer whose choice flips between levels.
SMALL_LEVELS = {0: ["dp", "mp"], 1: ["mp", "mp"], 2: ["mp", "dp"]}


def _project(hardware: dict, workload: dict, dp: int, micro_batch: int, global_batch: int,
             levels: dict[int, list[str]], **mapping) -> Project:
    lp = [{"layer": i, "levels": c} for i, c in levels.items()]
    data = {
        "name": "hypar-test", "hardware": hardware, "workload": workload,
        "mapping": {"dp": dp, "micro_batch": micro_batch, "global_batch": global_batch, "layer_parallelism": lp,
                    **mapping},
        "run": {"dtype": "fp32"},
    }
    return project_from_data(data, "test")


def small(hardware: dict | None = None, **mapping) -> Project:
    hw = hardware or load_system(SYSTEM).model_dump(mode="json")
    return _project(hw, {"kind": "mlp", "layer_sizes": [256, 512, 128, 10]}, 4, 4, 32, SMALL_LEVELS, **mapping)


def vgg_hypar() -> tuple[Project, Partition]:
    base = load_project_preset("hypar-vgg-a")
    best = hypar(hypar_layers(build_workload(base.workload)), 16, 128)
    return apply_partition(base, best), best


def partition_of(project: Project) -> Partition:
    """The search's own count for the partition a project holds."""
    layers = hypar_layers(build_workload(project.workload))
    m = project.mapping
    n = m.dp.bit_length() - 1
    per_layer = {lp.layer: lp.choices(n) for lp in m.layer_parallelism}
    levels = [[per_layer.get(lay.index, ["dp"] * n)[h] for lay in layers] for h in range(n)]
    return evaluate(layers, levels, m.dp, m.global_batch, project.run.dtype.value)


def injection_links(plan: Plan) -> set[int]:
    """Network links leaving a device: what crosses them is what the devices send (no device forwards)."""
    hw = plan.hw
    return {i for i, lk in enumerate(hw.links) if lk.kind == "network" and hw.is_device(lk.src)}


def collective_bytes(coll: Collective, links: set[int]) -> float:
    return sum(ph.bytes_per_member * sum(u for lk, u in ph.usage.items() if lk in links) for ph in coll.phases)


def executed(plan: Plan, measure: Callable[[Collective], float]) -> float:
    """``measure`` summed over every collective the engines run in one step: segment collectives once per
    micro-batch, the gradient reduction (both buckets) once."""
    total = 0.0
    for r, st in enumerate(plan.stages):
        for ps in st.passes.values():
            for seg in ps.segments:
                if seg.comm:
                    total += plan.micro_batches * measure(plan.tp_collective(r, 0, *seg.comm))
        for c in st.chunk_layers:
            total += sum(measure(part) for part in plan.dp_buckets(r, c))
    return total


def network_bytes(plan: Plan) -> dict[int, float]:
    """Bytes per link that the event engine's flow network carried in one step."""
    sim = Simulation(program_for(plan), contention=False, aggregate=True)
    sim.run()
    return sim.net.link_bytes()


def comm_s(project: Project) -> float:
    return sum(simulate(project).time_breakdown_s.get(k, 0.0) for k in COMM)


# --- bytes conserved --------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [small, lambda: vgg_hypar()[0]], ids=["small-mlp", "vgg-a-16"])
def test_bytes_moved_per_step_equal_the_search_count(make):
    project = make()
    plan = make_plan(project)
    part = partition_of(project)
    assert part.total_bytes > 0
    links = injection_links(plan)
    assert executed(plan, lambda c: collective_bytes(c, links)) == pytest.approx(part.total_bytes, rel=1e-12)
    carried = network_bytes(plan)
    assert sum(b for lk, b in carried.items() if lk in links) == pytest.approx(part.total_bytes, rel=1e-12)
    # every device sends its level's share to its partner i XOR N/2^h on the real routes
    hw, n = plan.hw, project.mapping.dp
    hops = sum(
        part.level_bytes(lv) / n * sum(len(hw.device_route(d, d ^ (n >> lv.level))) for d in range(n))
        for lv in part.levels
    )
    assert sum(carried.values()) == pytest.approx(hops, rel=1e-12)


def test_bytes_conserved_on_a_switched_cluster_too():
    project = small(cluster().model_dump(mode="json"))
    plan = make_plan(project)
    part = partition_of(project)
    hw = plan.hw
    hops = sum(
        part.level_bytes(lv) / 4 * sum(len(hw.device_route(d, d ^ (4 >> lv.level))) for d in range(4))
        for lv in part.levels
    )
    assert executed(plan, lambda c: sum(ph.bytes_per_member * sum(ph.usage.values()) for ph in c.phases)) == (
        pytest.approx(hops, rel=1e-12)
    )


def test_all_dp_partition_moves_what_the_ordinary_dp_run_moves():
    base = load_project_preset("hypar-vgg-a")
    ordinary = make_plan(base)
    layers = hypar_layers(build_workload(base.workload))
    every_dp = base.model_copy(deep=True)
    every_dp.mapping.layer_parallelism = [LayerParallelism(layer=lay.index, parallelism="dp") for lay in layers]
    plan = make_plan(every_dp)
    assert type(plan) is not type(ordinary)  # really the HyPar plan
    links = injection_links(plan)
    expect = executed(ordinary, lambda c: collective_bytes(c, links))
    assert expect > 0
    assert executed(plan, lambda c: collective_bytes(c, links)) == pytest.approx(expect, rel=1e-9)
    moved = {k: sum(b for lk, b in network_bytes(p).items() if lk in links) for k, p in (("o", ordinary), ("h", plan))}
    assert moved["h"] == pytest.approx(moved["o"], rel=1e-9)
    # same per-device work: every op at the same batch share as plain data parallelism
    ro, rh = simulate(base), simulate(every_dp)
    assert rh.time_breakdown_s["compute"] == pytest.approx(ro.time_breakdown_s["compute"], rel=1e-9)
    assert rh.memory_breakdown_bytes["weights"] == pytest.approx(ro.memory_breakdown_bytes["weights"], rel=1e-12)


# --- engines ------------------------------------------------------------------------------------------------


CASES = {
    "vgg-a-16": lambda: vgg_hypar()[0],
    "small-mlp": small,
    "small-mlp-overlap": lambda: small(overlap_grad_reduce=True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_event_equals_analytic_without_contention(name):
    event = CASES[name]()
    event.run.contention = False
    analytic = event.model_copy(deep=True)
    analytic.run.engine = "analytic"
    re_, ra = simulate(event), simulate(analytic)
    assert ra.iteration_time_s == pytest.approx(re_.iteration_time_s, rel=0.005)
    assert re_.time_breakdown_s["tp_comm"] > 0 and re_.time_breakdown_s["dp_comm"] > 0


@pytest.mark.parametrize("name", ["vgg-a-16", "small-mlp"])
def test_aggregated_equals_per_device(name):
    agg = CASES[name]()
    full = agg.model_copy(deep=True)
    full.run.aggregate = False
    ra, rf = simulate(agg), simulate(full)
    assert rf.iteration_time_s == pytest.approx(ra.iteration_time_s, rel=1e-9)
    assert rf.events > ra.events


def test_hypar_spends_less_time_communicating_than_all_dp_on_the_hypar_array():
    base = load_project_preset("hypar-vgg-a")
    best = hypar(hypar_layers(build_workload(base.workload)), 16, 128)
    hybrid, all_dp = comparison_projects(base, best)
    assert hybrid.hardware.name == all_dp.hardware.name == SYSTEM
    assert comm_s(hybrid) < comm_s(all_dp)


def test_exchanges_happen_inside_the_passes_and_weight_gradients_after():
    project, _ = vgg_hypar()
    plan = make_plan(project)
    st = plan.stages[0]
    kinds = {seg.comm[0] for ps in st.passes.values() for seg in ps.segments if seg.comm}
    assert kinds and all(k.startswith("exchange-L") for k in kinds)
    forward = [seg.layer for seg in st.passes[(0, "F")].segments if seg.comm]
    fc = [lay.index for lay in hypar_layers(plan.workload) if lay.name.startswith("fc")]
    assert set(fc) <= set(forward)  # mp layers exchange partial sums after their forward
    assert len(plan.dp_buckets(0, 0)[1].phases) == project.mapping.dp.bit_length() - 1  # ΔW at every level


# --- memory -------------------------------------------------------------------------------------------------


def test_memory_follows_the_weight_shares():
    base = load_project_preset("hypar-vgg-a")
    layers = hypar_layers(build_workload(base.workload))
    n, levels = base.mapping.dp, base.mapping.dp.bit_length() - 1
    fc = layers[-2]

    def weights(choices: dict[int, list[str]]) -> tuple[float, float]:
        p = base.model_copy(deep=True)
        p.mapping.layer_parallelism = [
            LayerParallelism(layer=lay.index, levels=choices.get(lay.index, ["dp"] * levels)) for lay in layers
        ]
        st = make_plan(p).stages[0]
        return st.state.weights, st.act_bytes[0]

    w_dp, act_dp = weights({})
    w_mp, act_mp = weights({fc.index: ["mp"] * levels})
    w_half, _ = weights({fc.index: ["dp"] * (levels - 1) + ["mp"]})
    elem = 4
    assert w_dp - w_mp == pytest.approx(fc.weights * (1 - 1 / n) * elem, rel=1e-12)  # holds 1/N of them
    assert w_dp - w_half == pytest.approx(fc.weights * elem / 2, rel=1e-12)
    assert act_mp > act_dp  # the all-mp layer keeps the whole batch's activations


def test_single_choice_means_every_level():
    project, _ = vgg_hypar()
    levels = project.mapping.dp.bit_length() - 1
    explicit = project.model_copy(deep=True)
    single = project.model_copy(deep=True)
    lp = [LayerParallelism(layer=x.layer, parallelism="mp") for x in project.mapping.layer_parallelism]
    single.mapping.layer_parallelism = lp
    explicit.mapping.layer_parallelism = [LayerParallelism(layer=x.layer, levels=["mp"] * levels) for x in lp]
    for p in (single, explicit):
        p.run.engine = "analytic"
    assert simulate(single).iteration_time_s == simulate(explicit).iteration_time_s
    assert partition_of(single).total_bytes == pytest.approx(make_plan(single).comm.bytes_per_step(1), rel=1e-12)


# --- the pairwise exchange -----------------------------------------------------------------------------------


def test_pairwise_exchange_swaps_both_ways_on_the_real_topology():
    hw = elaborate(load_system(SYSTEM), devices_needed=16)
    group = list(range(16))
    out = {i for i, lk in enumerate(hw.links) if lk.kind == "network" and hw.is_device(lk.src)}
    into = {i for i, lk in enumerate(hw.links) if lk.kind == "network" and hw.is_device(lk.dst)}
    times = []
    for stride in (1, 2, 4, 8):
        (ph,) = pairwise_exchange(hw, group, stride, 1e6).phases
        assert sum(u for lk, u in ph.usage.items() if lk in out) == 16  # every member sends once
        assert sum(u for lk, u in ph.usage.items() if lk in into) == 16  # and receives once
        times.append(ph.time(hw))
    assert times[-1] > times[0]  # the top cut shares the tree's root links
    assert not pairwise_exchange(hw, group, 8, 0.0).phases
    with pytest.raises(ValueError):
        pairwise_exchange(hw, list(range(6)), 4, 1.0)


# --- input and command line ---------------------------------------------------------------------------------


def test_levels_and_parallelism_must_agree():
    with pytest.raises(ValueError, match="top-level"):
        LayerParallelism(layer=0, parallelism="dp", levels=["mp", "dp"])
    with pytest.raises(ValueError, match="give parallelism"):
        LayerParallelism(layer=0)
    assert LayerParallelism(layer=0, levels=["mp", "dp"]).parallelism == "mp"


def test_cli_writes_every_level_and_run_simulates_it(tmp_path, capsys):
    out = tmp_path / "hybrid.json"
    argv = ["hypar", "--model", "vgg-a", "--accelerators", "16", "--batch", "128", "--system", SYSTEM,
            "--write-project", str(out), "--json"]
    assert main(argv) == 0
    levels = [lv["choices"] for lv in json.loads(capsys.readouterr().out)["levels"]]
    lp = json.loads(out.read_text())["mapping"]["layer_parallelism"]
    assert [x["levels"] for x in lp] == [[lv[i]["parallelism"] for lv in levels] for i in range(len(lp))]
    assert main(["run", str(out), "--engine", "analytic", "--json"]) == 0
    hybrid = json.loads(capsys.readouterr().out)["time_breakdown_s"]
    assert main(["run", str(out), "--engine", "analytic", "--json", "--set", "mapping.layer_parallelism=[]"]) == 0
    all_dp = json.loads(capsys.readouterr().out)["time_breakdown_s"]
    assert hybrid["tp_comm"] > 0 and all_dp["tp_comm"] == 0
    assert sum(hybrid[k] for k in COMM) < sum(all_dp[k] for k in COMM)


def test_cli_simulate_compares_with_all_dp(capsys):
    argv = ["hypar", "--model", "vgg-a", "--accelerators", "16", "--batch", "128", "--system", SYSTEM,
            "--simulate", "--engine", "analytic", "--json"]
    assert main(argv) == 0
    sim = json.loads(capsys.readouterr().out)["simulated"]
    assert sim["system"] == SYSTEM
    assert sim["hypar"]["comm_s"] < sim["all_dp"]["comm_s"]
    assert sim["speedup"] == pytest.approx(sim["all_dp"]["iteration_time_s"] / sim["hypar"]["iteration_time_s"])
    assert main(argv[:-1]) == 0
    assert "Simulated on hypar-array-16" in capsys.readouterr().out


def test_cli_quiet_silences_the_progress_of_simulate(capsys):
    """``--simulate`` runs two simulations: each announced on stderr (one line apiece into a pipe, as ``search``
    and ``sweep`` do), and ``--quiet`` silences them as it does on the other long commands."""
    argv = ["hypar", "--model", "vgg-a", "--accelerators", "16", "--batch", "128", "--system", SYSTEM,
            "--simulate", "--engine", "analytic", "--json"]
    assert main(argv) == 0
    loud = capsys.readouterr()
    lines = loud.err.splitlines()
    assert any("HyPar partition" in ln for ln in lines) and any("data parallelism" in ln for ln in lines), lines
    assert main([*argv, "--quiet"]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == ""
    assert json.loads(quiet.out)["simulated"] == json.loads(loud.out)["simulated"]


def test_cli_bad_partitions_exit_2(tmp_path, capsys):
    out = tmp_path / "hybrid.json"
    assert main(["hypar", "--model", "vgg-a", "--accelerators", "16", "--batch", "128", "--project", "hypar-vgg-a",
                 "--write-project", str(out)]) == 0
    capsys.readouterr()
    data = json.loads(out.read_text())
    data["mapping"]["layer_parallelism"][3]["levels"] = ["dp", "mp"]
    data["mapping"]["layer_parallelism"][3]["parallelism"] = "dp"
    data["mapping"]["layer_parallelism"][4]["layer"] = 3
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    assert main(["run", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: mapping.layer_parallelism.3.levels: 2 choices" in err
    assert f"{bad}: mapping.layer_parallelism.4.layer: layer 3 is listed twice" in err
    assert main(["run", str(out), "--dp", "12", "--set", "mapping.global_batch=96"]) == 2
    assert "mapping.dp: 12 is not a power of two" in capsys.readouterr().err
    assert main(["hypar", "--model", "vgg-a", "--accelerators", "16", "--batch", "128", "--simulate"]) == 2
    assert "--simulate" in capsys.readouterr().err
    assert main(["hypar", "--model", "vgg-a", "--accelerators", "16", "--batch", "8", "--system", SYSTEM,
                 "--simulate"]) == 2


def test_on_tiled_chips_each_run_reports_how_its_ops_split_over_a_chips_cores(capsys):
    """On Wormhole chips (8 × 8 cores each) both simulated runs cost every op with its spatial split over a
    chip's cores, and report those splits: the hybrid's model-parallel layers split differently from the
    all-dp run's, since they hand each chip other matrix shapes."""
    args = "hypar --model vgg-a --accelerators 8 --batch 64 --system wormhole-t3000 --dtype bf16 --engine analytic"
    args = [*args.split(), "--simulate"]
    assert main([*args, "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)["simulated"]
    hybrid, all_dp = sim["hypar"]["spatial_splits"], sim["all_dp"]["spatial_splits"]
    assert hybrid and all_dp
    assert {row["where"] for row in hybrid} == {"stage 0, forward"}
    assert hybrid != all_dp
    assert main(args) == 0
    assert "per chip, forward ops split" in capsys.readouterr().out
