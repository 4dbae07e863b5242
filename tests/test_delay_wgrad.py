"""Delayed weight gradients (``mapping.delay_wgrad_compute``, Megatron-Core ``--delay-wgrad-compute``) under the
overlapped expert all-to-all (``plan.wgrad_delay``): a backward node's weight-gradient GEMMs no longer gate the
backward's next all-to-all, so what the forward's all-to-all beside that node does not need of them hides the
backward's own next all-to-all too — charged where the pairing (``PassComms._a2a``) charges that one, at the
forward's all-to-all in the same place; nothing else moves.

The expected exposures are derived here from the pieces, not read back from the code under test: an
all-to-all's duration, each node's compute (the device time of the plan without the overlap between two
all-to-alls), and each deferred GEMM's weight gradient as its op's backward time × flops / backward_flops
(a linear layer's weight gradient has the forward's FLOPs, the input gradient as many)."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.ops import MoERole, OpKind
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.plan.device_layers import sharded_layer_ops
from tilewright.engine.plan.sharding import EP_PREFIX
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.search.parallel.extended import Extensions, exact_evaluator, variants
from tilewright.engine.simulate import make_plan, simulate

from tests.agreement import assert_engines_agree

A2A = EP_PREFIX + "all-to-all"
# experts 2048 wide, top-4, over InfiniBand: each forward all-to-all of the combine outlasts the forward's experts
# beside it, while the backward's experts (about twice as long) outlast their all-to-all: the delayed weight
# gradients have time to spare, and an all-to-all to give it to. Experts without biases: a biased expert's
# per-expert eager bias kernels (``plan.experts.expert_bias_kernels``) lengthen the forward's experts past that
# regime
SPEC = GPTSpec(name="moe", layers=3, hidden=1024, heads=8, seq_len=2048, vocab=32000, mlp_bias=False,
               moe={"experts": 16, "top_k": 4, "expert_ffn": 2048, "shared_experts": 1})
DP = 16  # two DGX-H100 nodes: the ep group spans InfiniBand
UNITS, SMS = 132, 24  # an H100's SMs, and those an NCCL kernel holds (``perf.comm_sm``)


def _project(overlap: bool = True, delay: bool = False, engine: str = "analytic") -> Project:
    mapping = Mapping(tp=1, pp=1, dp=DP, ep=DP, expert_imbalance=1.0, micro_batch=1, global_batch=2 * DP,
                      overlap_ep_comm=overlap, delay_wgrad_compute=delay)
    return Project(name="moe", hardware=load_system("dgx-h100"), workload=SPEC, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _nodes(plan, kind: str) -> tuple[list[float], list[float]]:
    """(device seconds between one all-to-all and the next, the all-to-alls' bytes) of a pass of a plan without
    the overlap: each all-to-all closes a segment; the host's part of a segment is no device time."""
    nodes, sizes, busy = [], [], 0.0
    for s in plan.stages[0].passes[(0, kind)].segments:
        busy += s.busy_s - s.dispatch_wait_s
        if s.comm and s.comm[0] == A2A:
            nodes.append(busy)
            sizes.append(s.comm[1])
            busy = 0.0
    return nodes, sizes


def _delayed(plan) -> list[float]:
    """Per backward all-to-all, in order: the seconds of weight-gradient GEMMs deferred since the one before
    (every weighted linear but the router's; a layer without an all-to-all, the head, keeps none), walking the
    chunk's ops in backward order — the combine's gradient goes out before the routed experts' down projection,
    the dispatch's after their up projection."""
    dev = plan.stages[0].dev
    pools, pool = [], 0.0
    layers = sharded_layer_ops(plan.workload, plan.stages[0].chunk_layers[0], DP)
    for ops in reversed(layers):
        for op in reversed(ops):
            if op.moe is not None and op.moe.combine_elems_per_token > 0:
                pools.append(pool)
                pool = 0.0
            if op.params > 0 and op.kind is OpKind.matmul and not (op.moe and op.moe.role is MoERole.router):
                t = op_time(op, dev, 1, 1, False, True, 2.0, formats=plan.formats, expert_kernels=True)
                pool += t.busy_s * op.flops / op.backward_flops
            if op.moe is not None and op.moe.dispatch_elems_per_token > 0:
                pools.append(pool)
                pool = 0.0
        if not any(op.moe is not None and op.moe.dispatch_elems_per_token > 0 for op in ops):
            pool = 0.0  # a layer without an all-to-all hands none on
    return pools


def _shown(plan, kind: str) -> list[float]:
    return [plan.tp_time(0, 0, A2A, s.comm[1]) for s in plan.stages[0].passes[(0, kind)].segments
            if s.comm and s.comm[0] == A2A]


def _expected(seconds: float, cover: float) -> float:
    return max(0.0, seconds - cover * UNITS / (UNITS - SMS))


def test_the_delayed_weight_gradients_cover_the_backwards_own_all_to_all():
    plain, before, plan = make_plan(_project(overlap=False)), make_plan(_project()), make_plan(_project(delay=True))
    assert (plan.stages[0].dev.compute.gemm_units, plan.stages[0].dev.compute.collective_sms) == (UNITS, SMS)
    forward, sizes = _nodes(plain, "F")
    backward, _ = _nodes(plain, "B")
    pools = _delayed(plan)
    assert len(forward) == len(backward) == len(pools) == 2 * SPEC.layers
    seconds = [plain.tp_time(0, 0, A2A, n) for n in sizes]
    need = [t * (UNITS - SMS) / UNITS for t in seconds]  # the compute that covers each
    # the backward's k-th all-to-all sits where the forward's k-th pairs: what its node has beyond that
    # all-to-all's need, at most its delayed GEMMs, covers the backward's own (charged at the forward's k-th)
    spare = [min(w, max(0.0, b - n)) for w, b, n in zip(pools, backward, need, strict=True)]
    assert sum(spare) > 0
    want = {
        "F": [_expected(t, f) for t, f in zip(seconds, forward, strict=True)],
        "B": [_expected(t, b) for t, b in zip(seconds, backward, strict=True)],
    }
    delayed = {"F": [_expected(t, f + x) for t, f, x in zip(seconds, forward, spare, strict=True)], "B": want["B"]}
    for kind in ("F", "B"):
        for made, expect in ((before, want[kind]), (plan, delayed[kind])):
            shown = [e for e in expect if e > 0]
            assert all(e > 30e-6 for e in shown)  # well above an all-to-all's floor: each an equality
            assert _shown(made, kind) == pytest.approx(shown, rel=1e-9)
    assert sum(delayed["F"]) < sum(want["F"])


def test_compute_stays_only_the_hidden_part_moves_and_engines_agree():
    a0, a1 = simulate(_project()), simulate(_project(delay=True))
    assert a1.time_breakdown_s["compute"] == pytest.approx(a0.time_breakdown_s["compute"], rel=1e-12)
    assert a1.time_breakdown_s["ep_comm"] < a0.time_breakdown_s["ep_comm"]
    assert a1.iteration_time_s < a0.iteration_time_s
    assert_engines_agree(a1, simulate(_project(delay=True, engine="event")))
    # the backward's own all-to-alls, charged against the forward's compute, are untouched
    b0, b1 = (make_plan(_project(delay=d)).stages[0].passes[(0, "B")] for d in (False, True))
    assert [s.comm for s in b0.segments] == [s.comm for s in b1.segments]


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
        "--seq-len", "2048", "--moe-experts", "16", "--moe-top-k", "4", "--moe-expert-ffn", "1536",
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
