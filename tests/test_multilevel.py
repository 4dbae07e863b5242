"""Multi-level mapping (DFModel): network dimensions, the MILP against enumeration, fusion by hand,
and the optimum never worse than the default mapping."""

from __future__ import annotations

import dataclasses
import json

import pytest
from tilewright.engine.cli import main
from tilewright.engine.errors import InputError
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_project_preset, load_system
from tilewright.engine.ir import Component, Compute, GPTSpec, Interconnect, Mapping, Memory, Op, Project, RunSettings
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.perf.device import device_model
from tilewright.engine.plan.placement import stage_groups
from tilewright.engine.search.multilevel import milp as ml
from tilewright.engine.search.multilevel.fusion import optimize_layer
from tilewright.engine.search.multilevel.map import build_problem, multilevel_map
from tilewright.engine.search.multilevel.netdims import coordinates, device_index, network_dims

from tests.factories import cluster, small_gpt, torus

GB = 1e9


def _project(hardware: Component, mapping: dict, workload=None, **run) -> Project:
    return Project(name="t", hardware=hardware, workload=workload or small_gpt(), mapping=Mapping(**mapping),
                   run=RunSettings(engine="analytic", **run))


def test_network_dimensions_of_a_torus_a_dgx_cluster_and_a_dragonfly():
    t = torus([2, 3, 4])
    dims = network_dims(t, elaborate(t))
    assert [d.size for d in dims] == [4, 3, 2]  # fastest-varying device index first
    c = cluster(nodes=2)
    dims = network_dims(c, elaborate(c))
    assert [d.size for d in dims] == [8, 2]
    assert dims[0].bandwidth == pytest.approx(300 * GB) and dims[1].bandwidth == pytest.approx(25 * GB)
    chip = torus([4]).children[0].model_copy(update={"cols": 12})
    fly = Component(name="fly", kind="system", children=[chip], interconnect=Interconnect(
        topology="dragonfly", group_size=4, link_bandwidth_bytes_per_s=100 * GB,
        global_link_bandwidth_bytes_per_s=10 * GB))
    dims = network_dims(fly, elaborate(fly))
    assert [(d.size, d.bandwidth) for d in dims] == [(4, 100 * GB), (3, 10 * GB)]


def test_device_coordinates_round_trip_and_match_the_torus_grid():
    t = torus([2, 3, 4])
    hw = elaborate(t)
    dims = network_dims(t, hw)
    for dev in hw.devices:
        coord = coordinates(dev.index, dims)
        assert device_index(coord, dims) == dev.index
        assert tuple(reversed(coord)) == dev.coord  # the grid's own coordinates, slowest first


@pytest.mark.parametrize("tp, pp, dp", [(8, 1, 2), (4, 2, 2), (2, 2, 4), (1, 16, 1), (16, 1, 1), (2, 1, 8)])
def test_row_major_layout_reproduces_the_engines_default_groups(tp: int, pp: int, dp: int):
    project = _project(cluster(nodes=2), {"tp": 1, "pp": 1, "dp": 16, "global_batch": 16})
    pb, dims, _ = build_problem(project, 40, [])
    pb.degrees = {"tp": [1, 2, 4, 8, 16], "pp": [1, 2, 4, 8, 16], "dp": [1, 2, 4, 8, 16]}
    lay = ml.row_major_layout(pb, tp, pp, dp)
    assert lay is not None
    hw = elaborate(project.hardware)
    groups = stage_groups(hw.devices, Mapping(tp=tp, pp=pp, dp=dp, global_batch=16))
    assert ml.realize(lay, dims) == [[d for g in st for d in g] for st in groups]


def test_misaligned_default_is_reported_not_guessed():
    project = _project(cluster(nodes=2), {"tp": 1, "pp": 1, "dp": 16, "global_batch": 16})
    pb, _, _ = build_problem(project, 40, [])
    # dims [8, 2]: tp 1, dp 16 aligns; a block of 16 = tp·dp over 8 then 2 aligns too; 3 never divides
    assert ml.row_major_layout(pb, 1, 1, 16) is not None
    assert ml.row_major_layout(pb, 3, 1, 5) is None


@pytest.mark.parametrize("hardware, mapping", [
    (cluster(nodes=2), {"tp": 2, "pp": 2, "dp": 4, "global_batch": 32}),
    (torus([2, 2, 4]), {"tp": 4, "pp": 1, "dp": 4, "global_batch": 32}),
])
def test_milp_optimum_equals_enumeration_of_every_layout(hardware, mapping):
    """Every (degrees, per-dimension split) that fits, timed by the same surrogate: the MILP's optimum is
    the minimum, so the McCormick linearisation and the log-space degree links are exact."""
    project = _project(hardware, mapping, workload=GPTSpec(layers=8, hidden=1024, heads=16, seq_len=512, vocab=8192))
    pb, _, _ = build_problem(project, 40, [])
    best = ml.solve(pb)
    assert best is not None
    feasible = [ml.evaluate(pb, lay, True) for lay in ml.all_layouts(pb) if ml.memory_of(pb, lay) <= pb.capacity]
    brute = min(lay.time_s for lay in feasible)
    assert best.time_s == pytest.approx(brute, rel=1e-6)
    assert ml.memory_of(pb, best) <= pb.capacity


def _chain_ops(elems: int) -> list[Op]:
    return [Op(name="a", kind="elementwise", layer=0, flops=0, in_elems=elems, out_elems=elems),
            Op(name="b", kind="elementwise", layer=0, flops=0, in_elems=elems, out_elems=elems)]


def test_fusing_two_memory_bound_ops_by_hand():
    """Two elementwise ops of E elements, bf16, 1 TB/s. Unfused, the engine's op model moves forward
    in+out = 2E and backward in+out+in = 3E elements per op: 10E·2 B in all. Fusing keeps the middle tensor
    on chip: op a saves its output write and the gradient's read (2E), op b its input read and the input
    gradient's write (2E) — 6E·2 B remain. SRAM holds the tile, so the fused time is 6/10 of the default."""
    e = 1_000_000
    compute = Compute(peak_flops={"bf16": 1e15}, vector_flops=1e15)
    dev = device_model(compute, [Memory(name="hbm", kind="hbm", capacity_bytes=GB, bandwidth_bytes_per_s=1e12)], None,
                       "bf16")
    dev = dataclasses.replace(dev, sram_bytes=64e6)
    r = optimize_layer(_chain_ops(e), dev, 1, 1, False, 2)
    assert r.default_s == pytest.approx(10 * e * 2 / 1e12)
    assert r.optimized_s == pytest.approx(6 * e * 2 / 1e12)
    assert r.fused_edges == [("a", "b")] and r.groups == [["a", "b"]]
    # too little SRAM for even the smallest tile (1/32 of 2 MB, double-buffered): nothing is fused
    tiny = optimize_layer(_chain_ops(e), dataclasses.replace(dev, sram_bytes=100e3), 1, 1, False, 2)
    assert tiny.optimized_s == pytest.approx(tiny.default_s) and tiny.fused_edges == []
    # 0.9 MB of SRAM: a tile of 1/8 fits (2 MB/8 × 2 buffers = 0.5 MB), one of 1/4 (1 MB) does not
    mid = optimize_layer(_chain_ops(e), dataclasses.replace(dev, sram_bytes=0.9e6), 1, 1, False, 2)
    assert mid.fused_edges and max(mid.tiles) <= 1 / 4


def test_no_fusion_across_a_tensor_parallel_collective():
    wl_ops = [op for op in _gpt_block_ops()]
    dev = _a100(40e6)
    r = optimize_layer(wl_ops, dev, 1, 2, False, 2)
    for a, b in r.fused_edges:
        assert not a.endswith(("out_proj", "mlp_down"))  # row-split: all-reduce after
        assert not b.endswith(("qkv", "mlp_up"))  # column-split: all-reduce of its input gradient
    assert r.optimized_s <= r.default_s


def _gpt_block_ops() -> list[Op]:
    from tilewright.engine.workloads import build_workload

    wl = build_workload(GPTSpec(layers=1, hidden=1024, heads=16, seq_len=512, vocab=8192))
    return wl.layer_ops(wl.block_layers[0])


def _a100(sram: float):
    sysm = load_system("dgx-a100")
    d = elaborate(sysm, 8).devices[0]
    return dataclasses.replace(device_model(d.compute, d.memories, None, "bf16"), sram_bytes=sram)


@pytest.mark.parametrize("preset", ["tpu-v4-llama2-7b", "megatron-18b-dgx-a100", "chiplet-bert-large"])
def test_optimum_beats_or_matches_the_default_mapping(preset: str):
    r = multilevel_map(load_project_preset(preset), check=preset != "megatron-18b-dgx-a100")
    assert r.default is not None
    assert r.optimized.time_s <= r.default.time_s * (1 + 1e-9)
    assert r.inter_only.time_s >= r.optimized.time_s * (1 - 1e-9)  # fusion never slows a chip down
    deg = r.optimized.degrees
    assert deg["tp"] * deg["pp"] * deg["dp"] == r.project.mapping.devices
    if r.engine_optimized_s is not None:
        assert r.engine_optimized_s > 0


def test_mapped_project_is_valid_and_places_every_device_once():
    r = multilevel_map(load_project_preset("tpu-v4-llama2-7b"), check=False)
    from tilewright.engine.plan.checks import check_project

    assert check_project(r.project) == []
    devices = [d for st in r.project.mapping.stages for d in st.devices]
    assert sorted(devices) == list(range(64))


def test_bad_projects_are_input_errors(capsys):
    with pytest.raises(InputError, match="inference"):
        multilevel_map(load_project_preset("llama2-70b-h100-inference"))
    small = _project(cluster(nodes=2), {"tp": 2, "pp": 1, "dp": 4, "global_batch": 16})
    with pytest.raises(InputError, match="every device"):
        multilevel_map(small)
    assert main(["map", "llama2-70b-h100-inference"]) == 2
    assert main(["map", "no-such-project"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_cli_json_and_output(tmp_path, capsys):
    out = tmp_path / "mapped.json"
    assert main(["map", "chiplet-bert-large", "--json", "-o", str(out)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["predicted_gain"] >= 1 - 1e-9
    dims = data["optimized"]["dimensions"]
    assert [d["size"] for d in dims] == [4, 4]
    for d in dims:
        assert d["tp"] * d["pp"] * d["dp"] == d["size"]
    assert json.loads(out.read_text())["mapping"]["stages"]


@pytest.mark.parametrize("weights", [None, "bfp8"])
def test_a_grid_chip_is_costed_by_the_engines_op_model(weights: str | None):
    """On a chip with a grid of cores (a Wormhole) the per-chip cost the programme sees is the engine's own
    pass time — spatial split over the cores, the mapping's weight format — and no fusion is claimed (the
    chip's spatial model keeps intermediates itself)."""
    from tilewright.engine.perf.device import remote_memory
    from tilewright.engine.plan.passes import backward_pass, forward_pass
    from tilewright.engine.search.multilevel.costs import tensor_costs
    from tilewright.engine.search.op_settings import OpSettings
    from tilewright.engine.workloads import build_workload

    spec = GPTSpec(name="g", layers=2, hidden=1024, heads=16, seq_len=512, vocab=8192)
    formats = {"weights": weights} if weights else {}
    project = _project(load_system("wormhole-n300"), {"formats": formats}, workload=spec, dtype="bf16")
    hw = elaborate(project.hardware)
    d = hw.devices[0]
    dev = device_model(d.compute, d.memories, remote_memory(hw, 0), "bf16")
    workload = build_workload(spec)
    settings = OpSettings.of(project, workload)
    layers = [workload.layer_ops(li.index) for li in workload.layers]
    blocks = workload.block_layers
    costs = tensor_costs(layers, blocks, dev, dev, [1, 2], 1, False, Recompute.none, settings)
    for t in (1, 2):
        ctx = settings.context(dev, 1, t, False)
        block = [workload.layer_ops(blocks[0])]
        engine = forward_pass(block, ctx).busy_s + backward_pass(block, ctx).busy_s
        assert costs.block[t].default_s == pytest.approx(engine, rel=1e-12)
        assert costs.block[t].fused_s == costs.block[t].default_s
        assert all(len(g) == 1 for layer in costs.fused[t] for g in layer.groups)
    bf16 = OpSettings.of(_project(load_system("wormhole-n300"), {}, workload=spec, dtype="bf16"), workload)
    plain = tensor_costs(layers, blocks, dev, dev, [1], 1, False, Recompute.none, bf16)
    if weights:
        assert costs.block[1].default_s < plain.block[1].default_s
    else:
        assert costs.block[1].default_s == plain.block[1].default_s


def test_a_tpu_fuses_against_its_cmem_not_an_a100s_l2(capsys):
    """``map tpu-v4-llama2-7b`` fused against an A100's 40 MB L2 because the preset lists no on-chip memory (its
    CMEM is not an engine memory level). It takes the TPU v4's 128 MiB CMEM and says so; the result is the one
    ``--sram-mb`` of that size gives; a system tilewright does not know still falls back on the A100's figure,
    naming it as a guess."""
    argv = ["map", "tpu-v4-llama2-7b", "--no-check", "--quiet", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    cmem = 128 * 2**20
    assert data["fusion_sram_bytes"] == cmem
    (note,) = [n for n in data["notes"] if "lists no SRAM" in n]
    assert "CMEM" in note and "A100" not in note
    assert main([*argv, "--sram-mb", repr(cmem / 1e6)]) == 0
    given = json.loads(capsys.readouterr().out)
    assert given["fusion_sram_bytes"] == pytest.approx(cmem)
    assert given["fused_groups"] == data["fused_groups"] and given["optimized"] == data["optimized"]
    assert not any("lists no SRAM" in n for n in given["notes"])
    # a torus of GPU-like devices under a name tilewright does not know: the fallback, said to be a guess
    notes: list[str] = []
    pb, _dims, _ = build_problem(_project(torus([4, 4]), {"tp": 4, "pp": 1, "dp": 4, "global_batch": 16}), None,
                                 notes)
    assert pb.fusion_sram_bytes == 40e6
    assert any("an A100's L2" in n and "not one whose on-chip memory tilewright knows" in n for n in notes), notes
