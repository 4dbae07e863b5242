"""Delayed weight gradients (``mapping.delay_wgrad_compute``, Megatron-Core ``--delay-wgrad-compute``) under the
overlapped expert all-to-all: in the backward the routed experts' weight-gradient GEMMs also hide the layer's
dispatch gradient, attention's and the shared experts' the next layer's combine gradient; nothing else moves.

The expected exposures are derived here from the pieces, not read back from the code under test: an
all-to-all's duration, what the plan without the delay left exposed (which gives the compute that already
covered it), and each deferred GEMM's weight gradient as its op's backward time × flops / backward_flops
(a linear layer's weight gradient has the forward's FLOPs, the input gradient as many)."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.ops import MoERole, Op, OpKind
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.plan.device_layers import sharded_layer_ops
from tilewright.engine.plan.sharding import EP_PREFIX
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.search.parallel.extended import Extensions, exact_evaluator, variants
from tilewright.engine.simulate import make_plan, simulate

from tests.agreement import assert_engines_agree

A2A = EP_PREFIX + "all-to-all"
# narrow experts (ffn 256) and top-4: every backward all-to-all over InfiniBand outlasts the compute before it,
# with and without the delay, so each exposure below is a strict equality, not a clamp at zero
SPEC = GPTSpec(name="moe", layers=3, hidden=1024, heads=8, seq_len=2048, vocab=32000,
               moe={"experts": 16, "top_k": 4, "expert_ffn": 256, "shared_experts": 1})
DP = 16  # two DGX-H100 nodes: the ep group spans InfiniBand


def _project(overlap: bool = True, delay: bool = False, engine: str = "analytic") -> Project:
    mapping = Mapping(tp=1, pp=1, dp=DP, ep=DP, expert_imbalance=1.0, micro_batch=1, global_batch=2 * DP,
                      overlap_ep_comm=overlap, delay_wgrad_compute=delay)
    return Project(name="moe", hardware=load_system("dgx-h100"), workload=SPEC, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _backward_a2a(plan) -> list[float]:
    return [s.comm[1] for s in plan.stages[0].passes[(0, "B")].segments if s.comm and s.comm[0] == A2A]


def _wgrad(plan, ops: list[Op]) -> float:
    """Seconds of the weight-gradient GEMMs of these ops (weighted matmuls) on the stage's device."""
    dev = plan.stages[0].dev
    total = 0.0
    for op in ops:
        t = op_time(op, dev, 1, 1, False, True, 2.0, formats=plan.formats)
        total += t.busy_s * op.flops / op.backward_flops
    return total


def _deferred(plan) -> tuple[list[float], list[float]]:
    """Per MoE block in backward order (last block first): the routed experts' weight gradients, and
    attention's and the shared experts' (the router's weight is no deferred linear)."""
    blocks = list(reversed(plan.workload.block_layers))
    experts, others = [], []
    for ops in sharded_layer_ops(plan.workload, blocks, DP):
        gemms = [op for op in ops if op.params > 0 and op.kind is OpKind.matmul]
        experts.append(_wgrad(plan, [op for op in gemms if op.moe is not None and op.moe.role is MoERole.expert]))
        others.append(_wgrad(plan, [op for op in gemms if op.moe is None or op.moe.role is MoERole.shared]))
    return experts, others


def test_the_covering_compute_grows_by_the_deferred_weight_gradients():
    full = _backward_a2a(make_plan(_project(overlap=False)))
    before, plan = make_plan(_project()), make_plan(_project(delay=True))
    left0, left1 = _backward_a2a(before), _backward_a2a(plan)
    # per block, last first: the combine's gradient (before the routed experts), then the dispatch's (after)
    assert len(full) == len(left0) == len(left1) == 2 * SPEC.layers
    assert all(0 < e < n for e, n in zip(left0, full, strict=True))
    experts, others = _deferred(plan)
    for i, n in enumerate(full):
        block, dispatch = divmod(i, 2)
        seconds = plan.tp_time(0, 0, A2A, n)
        covered = seconds - plan.tp_time(0, 0, A2A, left0[i])  # what hid it without the delay (time-based)
        if dispatch:
            extra = experts[block]  # the block's own routed experts, between its input gradients and this
        else:
            extra = others[block - 1] if block else 0.0  # the block after it (run before it): attention, shared
        assert extra > 0 or i == 0
        # the all-to-all's kernel holds 24 of the H100's 132 SMs, stretching all of its cover (``perf.comm_sm``):
        # ``covered`` is already stretched, the deferred weight gradients stretch as well
        assert (plan.stages[0].dev.compute.gemm_units, plan.stages[0].dev.compute.collective_sms) == (132, 24)
        expected = seconds - covered - extra * 132 / (132 - 24)  # the exposed part's seconds (``plan.exposed``)
        assert expected > 0  # the configuration keeps every one partly exposed (SPEC)
        assert plan.tp_time(0, 0, A2A, left1[i]) == pytest.approx(expected, rel=1e-9)


def test_compute_stays_only_the_hidden_part_moves_and_engines_agree():
    a0, a1 = simulate(_project()), simulate(_project(delay=True))
    assert a1.time_breakdown_s["compute"] == pytest.approx(a0.time_breakdown_s["compute"], rel=1e-12)
    assert a1.time_breakdown_s["ep_comm"] < a0.time_breakdown_s["ep_comm"]
    assert a1.iteration_time_s < a0.iteration_time_s
    assert_engines_agree(a1, simulate(_project(delay=True, engine="event")))
    # the forward is untouched: its all-to-alls hide behind the same compute as before
    f0, f1 = (make_plan(_project(delay=d)).stages[0].passes[(0, "F")] for d in (False, True))
    assert [s.comm for s in f0.segments] == [s.comm for s in f1.segments]


def test_the_search_tries_it_and_times_it_as_the_engine_does():
    c = Candidate(tp=1, pp=1, dp=DP, micro_batch=1, ep=DP, overlap_ep=True, delay_wgrad=True)
    project = _project()
    exact = exact_evaluator(project, 2 * DP)(c)
    assert exact is not None
    mapping = c.mapping(2 * DP, project.mapping)
    assert mapping.delay_wgrad_compute and mapping.overlap_ep_comm
    direct = simulate(project.model_copy(update={"mapping": mapping}))
    assert exact.iteration_time_s == pytest.approx(direct.iteration_time_s, rel=1e-12)
    seed = Candidate(tp=1, pp=1, dp=DP, micro_batch=1)
    found = variants(seed, Extensions(eps=[1, DP]), SPEC, fits=True)
    assert any(v.delay_wgrad and v.overlap_ep and v.ep == DP for v in found)
    assert not any(v.delay_wgrad and not v.overlap_ep for v in found)
    # a candidate without it runs without it, whatever the project's mapping says
    on = project.model_copy(update={"mapping": mapping})
    assert not Candidate(tp=1, pp=1, dp=DP, micro_batch=1).mapping(2 * DP, on.mapping).delay_wgrad_compute


def test_refused_without_the_overlap():
    with pytest.raises(ValueError, match="delay_wgrad_compute"):
        Mapping(tp=1, dp=DP, global_batch=DP, delay_wgrad_compute=True, ep=DP, overlap_ep_comm=False)


def test_a_no_op_without_expert_parallelism(capsys):
    """At ep 1 there is no all-to-all to hide: the option is accepted (a degree change alone never invalidates a
    mapping) and changes nothing."""
    from tilewright.engine.cli import main

    assert main(["run", *BASE, "--ep", "1", "--overlap-ep-comm"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["run", *BASE, "--ep", "1", "--overlap-ep-comm", "--delay-wgrad-compute"]) == 0
    assert json.loads(capsys.readouterr().out)["iteration_time_s"] == plain["iteration_time_s"]


def test_left_out_of_saved_files_at_its_default():
    assert "delay_wgrad_compute" not in _project().mapping.model_dump(mode="json")
    on = _project(delay=True).mapping
    assert on.model_dump(mode="json")["delay_wgrad_compute"] is True
    assert Mapping.model_validate(on.model_dump(mode="json")) == on


BASE = ["--system", "dgx-h100", "--model", "gpt", "--layers", "3", "--hidden", "1024", "--heads", "8",
        "--seq-len", "2048", "--moe-experts", "16", "--moe-top-k", "4", "--moe-expert-ffn", "256",
        "--tp", "1", "--pp", "1", "--dp", "16", "--global-batch", "32", "--engine", "analytic", "--json", "--quiet"]


def test_cli_flag(capsys):
    from tilewright.engine.cli import main

    assert main(["run", *BASE, "--ep", "16", "--overlap-ep-comm"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["run", *BASE, "--ep", "16", "--overlap-ep-comm", "--delay-wgrad-compute"]) == 0
    delayed = json.loads(capsys.readouterr().out)
    assert delayed["time_breakdown_s"]["ep_comm"] < plain["time_breakdown_s"]["ep_comm"]
    assert delayed["time_breakdown_s"]["compute"] == pytest.approx(plain["time_breakdown_s"]["compute"], rel=1e-12)


def test_cli_refuses_it_without_the_overlap(capsys):
    from tilewright.engine.cli import main

    assert main(["run", *BASE, "--ep", "16", "--delay-wgrad-compute"]) == 2
    assert "delay_wgrad_compute" in capsys.readouterr().err
