"""Overlapped expert all-to-all (``mapping.overlap_ep_comm``, DualPipe-style): each all-to-all hides behind
the node of the paired micro-batch's layer the schedule runs beside it (``PassComms._a2a``), and only the excess
is exposed."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.sharding import EP_PREFIX
from tilewright.engine.simulate import make_plan, simulate

SPEC = GPTSpec(name="moe", layers=2, hidden=2048, heads=16, seq_len=2048, vocab=32000,
               moe={"experts": 16, "top_k": 2, "expert_ffn": 4096})


def _project(overlap: bool, engine: str = "analytic", dp: int = 16) -> Project:
    mapping = Mapping(tp=1, pp=1, dp=dp, ep=dp, micro_batch=1, global_batch=2 * dp, overlap_ep_comm=overlap)
    return Project(name="moe", hardware=load_system("dgx-h100"), workload=SPEC, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _a2a(plan, kind: str) -> list[float]:
    return [seg.comm[1] for seg in plan.stages[0].passes[(0, kind)].segments
            if seg.comm and seg.comm[0].startswith(EP_PREFIX)]


def test_overlap_exposes_only_what_the_layers_compute_cannot_hide():
    plain, hidden = make_plan(_project(False)), make_plan(_project(True))
    for kind in ("F", "B"):
        full, left = _a2a(plain, kind), _a2a(hidden, kind)
        assert sum(left) < sum(full)  # over InfiniBand (16 GPUs, two nodes): the nodes (experts 4096 wide) hide it
        assert all(b >= 0 for b in left) and len(left) <= len(full)
        # what disappears is never more than the pass's compute could cover
        hidden_s = sum(plain.tp_time(0, 0, EP_PREFIX + "all-to-all", b) for b in full) - sum(
            hidden.tp_time(0, 0, EP_PREFIX + "all-to-all", b) for b in left)
        assert hidden_s <= plain.stages[0].passes[(0, kind)].busy_s * (1 + 1e-9)
    a, b = simulate(_project(False)), simulate(_project(True))
    assert b.time_breakdown_s["ep_comm"] < a.time_breakdown_s["ep_comm"]
    assert b.iteration_time_s < a.iteration_time_s
    assert b.time_breakdown_s["compute"] == pytest.approx(a.time_breakdown_s["compute"], rel=1e-12)


def test_inside_one_node_the_all_to_all_hides_behind_the_layer():
    """8 GPUs on NVSwitch: each all-to-all is shorter than the node beside it (the forward's attention or experts,
    the backward's experts or the attention of the layer before it — the first combine gradient the loss and
    head's), so none shows, or at most a small share of one."""
    hidden, plain = make_plan(_project(True, dp=8)), make_plan(_project(False, dp=8))
    assert _a2a(hidden, "F") == []
    full = _a2a(plain, "B")
    assert len(_a2a(hidden, "B")) < len(full)
    assert all(0 <= b < 0.05 * max(full) for b in _a2a(hidden, "B"))
    assert 0 <= sum(_a2a(hidden, "B")) < 0.05 * sum(full)


def test_both_engines_agree_with_the_overlap():
    a = simulate(_project(True, "analytic"))
    e = simulate(_project(True, "event"))
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)


def test_cli_flag_and_search_option(capsys):
    from tilewright.engine.cli import main

    base = ["--system", "dgx-h100", "--model", "gpt", "--layers", "2", "--hidden", "2048", "--heads", "16",
            "--seq-len", "2048", "--moe-experts", "16", "--moe-top-k", "2", "--json", "--quiet"]
    assert main(["run", *base, "--tp", "1", "--pp", "1", "--dp", "16", "--ep", "16", "--global-batch", "32",
                 "--engine", "analytic"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["run", *base, "--tp", "1", "--pp", "1", "--dp", "16", "--ep", "16", "--global-batch", "32",
                 "--engine", "analytic", "--overlap-ep-comm"]) == 0
    overlapped = json.loads(capsys.readouterr().out)
    assert overlapped["time_breakdown_s"]["ep_comm"] < plain["time_breakdown_s"]["ep_comm"]
    assert main(["search", *base, "--devices", "16", "--global-batch", "32", "--no-simulate", "--list", "40"]) == 0
    found = json.loads(capsys.readouterr().out)["candidates"]
    assert any(c["overlap_ep_comm"] and c["ep"] > 1 for c in found)
    assert main(["search", *base, "--devices", "16", "--global-batch", "32", "--no-simulate", "--list", "40",
                 "--no-overlap"]) == 0
    assert not any(c["overlap_ep_comm"] for c in json.loads(capsys.readouterr().out)["candidates"])
