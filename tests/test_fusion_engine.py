"""Operator fusion in the engine (``mapping.fusion``): fused intermediates skip the DRAM round trip, the
multi-level mapper's chosen fusion is written into the mapping and confirmed by the engine."""

from __future__ import annotations

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import load_project_preset, load_system
from tilewright.engine.ir import Mapping, Project, RunSettings
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.plan.checks import check_project
from tilewright.engine.plan.passes import fused_edges
from tilewright.engine.search.multilevel.map import multilevel_map
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

from tests.engine_cases import GPT, small_wafer

MLP = ["mlp_up", "activation", "mlp_down"]


def _gpt(fusion=(), tp: int = 2, engine: str = "analytic") -> Project:
    return Project(name="fusion", hardware=load_system("dgx-a100"), workload=GPT,
                   mapping=Mapping(tp=tp, pp=1, dp=1, micro_batch=4, global_batch=4, fusion=[list(c) for c in fusion]),
                   run=RunSettings(engine=engine))


def _layer_ops(project: Project, names: list[str]):
    graph = build_workload(project.workload)
    ops = graph.layer_ops(graph.block_layers[0])
    return [op for op in ops if op.name.split(".", 1)[-1] in names]


def test_fused_edges_of_a_chain():
    assert fused_edges([MLP]) == {("mlp_up", "activation"), ("activation", "mlp_down")}


def test_a_fused_output_and_input_skip_dram_forward_and_backward():
    project = _gpt()
    plan = make_plan(project)
    dev = plan.stages[0].dev
    up, act, _down = _layer_ops(project, MLP)
    for backward in (False, True):
        plain = op_time(act, dev, 4, 2, False, backward, 2)
        fused = op_time(act, dev, 4, 2, False, backward, 2, fused_in=True, fused_out=True)
        saved_bytes = (act.in_elems + act.out_elems) * 4 / 2 * 2  # micro-batch 4, tp 2 shards, 2-byte elements
        assert (plain.memory_s - fused.memory_s) * dev.dram_bandwidth == pytest.approx(saved_bytes, rel=1e-9)
        assert fused.compute_s == plain.compute_s
    assert op_time(up, dev, 4, 2, False, False, 2, fused_out=True).memory_s < op_time(up, dev, 4, 2, False, False,
                                                                                        2).memory_s


def test_fusing_the_mlp_shortens_the_run_and_only_its_memory_stall():
    plain, fused = simulate(_gpt()), simulate(_gpt([MLP]))
    assert fused.iteration_time_s < plain.iteration_time_s
    b0, b1 = plain.time_breakdown_s, fused.time_breakdown_s
    assert b1["memory_stall"] < b0["memory_stall"]
    assert b1["compute"] == pytest.approx(b0["compute"], rel=1e-9)
    assert b1["tp_comm"] == pytest.approx(b0["tp_comm"], rel=1e-9)
    # the event engine agrees with the analytic one on the fused mapping (no contention)
    event = simulate(_gpt([MLP], engine="event").model_copy(
        update={"run": RunSettings(engine="event", contention=False)}))
    assert event.iteration_time_s == pytest.approx(fused.iteration_time_s, rel=5e-3)


def test_fusion_keeps_the_intermediate_off_the_dram_ports_of_sram_only_tiles():
    """The wafer's tiles have no local DRAM: a fused intermediate stays in their SRAM (it still passes through
    it, so the SRAM-bound busy time is unchanged) and never crosses the NoC to a DRAM port."""
    plain = make_plan(small_wafer())
    fused = make_plan(small_wafer(fusion=[MLP]))
    busy = [[ps.busy_s for ps in plan.stages[0].passes.values()] for plan in (plain, fused)]
    dram = [sum(s.dram_bytes for ps in plan.stages[0].passes.values() for s in ps.segments) for plan in (plain, fused)]
    assert busy[0] == busy[1]
    assert dram[1] < dram[0]


@pytest.mark.parametrize(
    ("chain", "reason"),
    [(["mlp_up", "nonexistent"], "not consecutive ops"),
     (["mlp_down", "activation"], "not consecutive ops"),
     (["out_proj", "dropout1"], "tensor-parallel collective")],
)
def test_bad_fusion_chains_are_refused_with_the_field_and_reason(chain, reason):
    problems = check_project(_gpt([chain]))
    assert [p.path for p in problems] == ["mapping.fusion.0"]
    assert reason in problems[0].reason


def test_fusion_across_the_collective_is_fine_without_tensor_parallelism():
    assert check_project(_gpt([["out_proj", "dropout1"]], tp=1)) == []


def test_cli_refuses_a_bad_chain_with_exit_2(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(_gpt([["mlp_up", "nope"]]).model_dump_json())
    assert main(["run", str(path), "--json"]) == 2
    err = capsys.readouterr().err
    assert "mapping.fusion.0" in err and str(path) in err


def test_mapper_writes_its_fusion_and_the_engine_confirms_a_gain():
    result = multilevel_map(load_project_preset("megatron-18b-dgx-a100"))
    fusion = result.project.mapping.fusion
    assert fusion and check_project(result.project) == []
    assert result.engine_optimized_s < result.engine_unfused_s
    # the engine's fusion gain has the sign and rough size the programme predicted for the intra-chip part
    predicted = result.inter_only.time_s / result.optimized.time_s
    confirmed = result.engine_unfused_s / result.engine_optimized_s
    assert predicted > 1 and confirmed > 1
    assert confirmed == pytest.approx(predicted, rel=0.1)
