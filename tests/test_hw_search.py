"""Hardware search (WHAM): budgets hold, the TPU-like baseline is matched or beaten, the critical path
and the global combination are right on hand-made cases."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main
from tilewright.engine.errors import InputError
from tilewright.engine.ir import BertSpec, CNNSpec, GPTSpec
from tilewright.engine.search.hardware import model as hm
from tilewright.engine.search.hardware.graph import Node, StageGraph, _critical, _list_schedule, stage_graph
from tilewright.engine.search.hardware.model import Design, area_mm2, tdp_w
from tilewright.engine.search.hardware.search import (
    Evaluated,
    Stage,
    global_search,
    neighbours,
    search_hardware,
    tpu_like,
)
from tilewright.engine.workloads import build_workload

BERT = BertSpec(name="bert-mini", layers=4, hidden=512, heads=8, seq_len=256)
GPT = GPTSpec(name="gpt-mini", layers=8, hidden=1024, heads=16, seq_len=512, vocab=8192)


def test_area_and_power_by_hand():
    d = Design(pe_rows=128, pe_cols=128, tensor_cores=4, vector_cores=8, sram_mb=16, hbm_stacks=2)
    core = 4 * 128 * 128 * hm.MAC_AREA_MM2 + 8 * hm.VECTOR_CORE_AREA_MM2 + 16 * hm.SRAM_MM2_PER_MB + 2 * hm.HBM_PHY_MM2
    assert area_mm2(d) == pytest.approx(core * 1.1 + 20)
    mac = 4 * 128 * 128 * 1e9 * 0.45e-12  # 29.5 W
    vector = 8 * 128 * 1e9 * 1e-12
    sram = 4 * 256 * 2 * 1e9 * 0.6e-12
    hbm = 2 * 460e9 * 8 * 3.9e-12  # 28.7 W
    assert tdp_w(d) == pytest.approx(mac + vector + sram + hbm + 0.02 * area_mm2(d))
    assert d.peak_flops == pytest.approx(131.072e12)


def test_bigger_designs_cost_more():
    d = Design(64, 64, 2, 2, 8, 1)
    for bigger in (Design(128, 64, 2, 2, 8, 1), Design(64, 64, 4, 2, 8, 1), Design(64, 64, 2, 4, 8, 1),
                   Design(64, 64, 2, 2, 16, 1), Design(64, 64, 2, 2, 8, 2)):
        assert area_mm2(bigger) > area_mm2(d) and tdp_w(bigger) > tdp_w(d)


def _graph(units: list[str], edges: dict[int, list[int]]) -> StageGraph:
    g = StageGraph()
    for i, unit in enumerate(units):
        g.add(Node(unit, 0, 0, None), edges.get(i, []))
    return g


def test_critical_path_is_the_zero_slack_chain():
    """A(tensor 2) → B(vector 1) → D(tensor 1) and A → C(vector 0.5) → D: A, B, D have no slack."""
    g = _graph(["tensor", "vector", "vector", "tensor"], {1: [0], 2: [0], 3: [1, 2]})
    crit = _critical(g, [2.0, 1.0, 0.5, 1.0], ["tensor", "vector", "memory", "tensor"])
    assert crit == {"tensor": 3.0, "vector": 1.0, "memory": 0.0, "link": 0.0}


def test_list_schedule_serialises_a_unit_and_overlaps_different_units():
    # two independent vector ops share the one vector unit; a tensor op runs beside them
    g = _graph(["vector", "vector", "tensor"], {})
    assert _list_schedule(g, [1.0, 2.0, 2.5]) == pytest.approx(3.0)
    # B after A on the critical path: 2 + 1
    g = _graph(["tensor", "vector"], {1: [0]})
    assert _list_schedule(g, [2.0, 1.0]) == pytest.approx(3.0)


def test_stage_graph_has_forward_backward_and_tensor_parallel_collectives():
    wl = build_workload(GPT)
    layers = wl.block_layers[:1]
    ops = wl.layer_ops(layers[0])
    g1 = stage_graph(wl, layers, tp=1, mb=1, elem_bytes=2)
    assert len(g1.nodes) == 2 * len(ops)
    g2 = stage_graph(wl, layers, tp=2, mb=1, elem_bytes=2)
    # Megatron: one all-reduce after each row-split op forward (out_proj, mlp_down) and after the
    # column-split ops backward (qkv, mlp_up)
    assert sum(n.unit == "link" for n in g2.nodes) == 4
    assert sum(n.flops for n in g2.nodes) < sum(n.flops for n in g1.nodes)


def _e(t: float, p: float, tag: int) -> Evaluated:
    return Evaluated(Design(8, 8, tag, 1, 1, 1), t, p, 1.0, {})


def test_global_search_matches_slow_stages_with_low_power_designs():
    """Stage A: (1 s, 10 W) or (2 s, 4 W); stage B: (2 s, 5 W) or (1 s, 20 W). Bottleneck 1 s:
    1/(10+20) = 0.033; bottleneck 2 s: ½/(4+5) = 0.056 → the slow, frugal pair."""
    a = Stage(0, [0], StageGraph(), 0.0, top=[_e(1, 10, 1), _e(2, 4, 2)])
    b = Stage(1, [1], StageGraph(), 0.0, top=[_e(2, 5, 3), _e(1, 20, 4)])
    c = global_search([a, b], micro_batch=1, tp=1)
    assert [e.design.tensor_cores for e in c.designs] == [2, 3]
    assert c.samples_per_s_per_w == pytest.approx(0.5 / 9)


def test_neighbours_grow_what_is_critical_and_shrink_the_rest():
    d = Design(64, 64, 4, 8, 32, 2)
    moves = neighbours(Evaluated(d, 1.0, 100, 100, {"tensor": 1.0, "vector": 0.0, "memory": 0.0, "link": 0.0}))
    assert any(m.tensor_cores > 4 or m.pe_rows > 64 or m.pe_cols > 64 for m in moves)
    assert any(m.vector_cores < 8 for m in moves) and any(m.sram_mb < 32 for m in moves)
    assert not any(m.vector_cores > 8 or m.hbm_stacks > 2 for m in moves)


@pytest.mark.parametrize(
    "spec, area, power, pp, tp, mb",
    [(BERT, 400, 250, 2, 1, 4), (GPT, 600, 300, 1, 2, 1), (CNNSpec(arch="alexnet"), 300, 150, 1, 1, 32)],
)
def test_designs_stay_in_budget_and_match_or_beat_the_tpu_like_baseline(spec, area, power, pp, tp, mb):
    r = search_hardware(build_workload(spec), area_mm2=area, power_w=power, pp=pp, tp=tp, micro_batch=mb, top=4)
    for st in r.stages:
        assert st.top
        for e in st.kept:
            assert e.area_mm2 <= area and e.tdp_w <= power
            assert e.design.hbm_bytes >= st.memory_bytes
    for e in r.chosen.designs:
        assert e.area_mm2 <= area and e.tdp_w <= power
    assert r.baseline is not None
    base = r.baseline.designs[0].design
    assert area_mm2(base) <= area and tdp_w(base) <= power
    assert r.chosen.samples_per_s_per_w >= r.baseline.samples_per_s_per_w * (1 - 1e-9)


def test_tpu_like_baseline_fills_the_budget():
    d = tpu_like(500, 300, 0)
    assert d is not None and (d.pe_rows, d.pe_cols) == (128, 128)
    n = d.tensor_cores // 4
    bigger = Design(128, 128, 4 * (n + 1), 8 * (n + 1), 16 * (n + 1), 2 * (n + 1))
    assert area_mm2(bigger) > 500 or tdp_w(bigger) > 300
    assert tpu_like(10, 10, 0) is None


def test_bad_budgets_are_input_errors(capsys):
    wl = build_workload(BERT)
    with pytest.raises(InputError, match="--power-w"):
        search_hardware(wl, area_mm2=100, power_w=-1)
    with pytest.raises(InputError, match="fits the budgets"):
        search_hardware(wl, area_mm2=30, power_w=5)
    assert main(["hw-search", "--model", "bert-large", "--area-mm2", "0", "--power-w", "100", "--quiet"]) == 2
    assert main(["hw-search", "--model", "nope", "--area-mm2", "100", "--power-w", "100", "--quiet"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_cli_json(capsys):
    argv = ["hw-search", "--model", "lenet", "--area-mm2", "200", "--power-w", "100", "--micro-batch", "64",
            "--top", "3", "--json", "--quiet"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["stages"]) == 1 and 1 <= len(data["stages"][0]["top"]) <= 3
    chosen = data["chosen"]["designs"][0]
    assert chosen["area_mm2"] <= 200 and chosen["tdp_w"] <= 100
    assert data["gain_over_baseline"] >= 1 - 1e-9


def test_cli_refuses_a_tp_the_heads_do_not_divide(capsys):
    """``--tp 3`` on bert-large (16 heads, hidden 1024) was searched as 3 chips of a third of the heads each;
    refused as ``run`` refuses it, naming the flag and the heads."""
    argv = ["hw-search", "--model", "bert-large", "--area-mm2", "600", "--power-w", "300", "--quiet"]
    assert main([*argv, "--tp", "3"]) == 2
    err = capsys.readouterr().err
    assert "--tp" in err and "heads (16)" in err and "Traceback" not in err
    assert main(["run", "--system", "dgx-a100", "--model", "bert-large", "--tp", "3", "--devices", "3"]) == 2
    assert "heads (16)" in capsys.readouterr().err  # the same rule


def test_cli_labels_every_power_with_what_it_covers(capsys):
    """The budget is per chip; the chosen design's and the TPU-like baseline's powers are totals over tp × pp
    chips. Each line says which, and the totals add up from the per-chip designs in the JSON."""
    tp, pp = 2, 2
    argv = ["hw-search", "--model", "bert-large", "--area-mm2", "600", "--power-w", "300", "--tp", str(tp),
            "--pp", str(pp), "--quiet"]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    chosen, base = data["chosen"], data["baseline"]
    assert data["budgets"] == {"area_mm2": 600, "power_w": 300, "per": "chip"}
    per_chip = [d["tdp_w"] for d in chosen["designs"]]
    assert chosen["chips"] == tp * pp and chosen["tdp_w"] == pytest.approx(tp * sum(per_chip))
    assert chosen["tdp_w_per_chip"] == per_chip and all(w <= 300 for w in per_chip)
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "per chip area ≤ 600 mm² and TDP ≤ 300 W" in lines[0] and f"{tp * pp} chips" in lines[0]
    stage_lines = [ln for ln in lines if ln.strip().startswith("stage ")]
    assert len(stage_lines) == pp
    for ln, w in zip(stage_lines, per_chip, strict=True):
        assert "per chip" in ln and f"{w:.0f} W TDP" in ln
    (chosen_line,) = [ln for ln in lines if ln.strip().startswith("chosen:")]
    assert f"{chosen['tdp_w']:.0f} W TDP in total over {tp * pp} chips" in chosen_line
    (base_line,) = [ln for ln in lines if ln.strip().startswith("TPU-like:")]
    assert f"{base['tdp_w']:.0f} W TDP in total over {tp * pp} chips" in base_line
    assert f"({base['designs'][0]['tdp_w']:.0f} W TDP per chip)" in base_line
