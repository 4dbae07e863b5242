"""torchtitan's training loop (host_framework 'pytorch' / 'pytorch-compile', ``plan.train_logging``): none of
Megatron's timer, gradient-norm or loss-scale drains; one drain per step for the batch's blocking host-to-device
copy, and at every tenth step (``--metrics.log_freq`` 10) the losses' ``.item()`` and two one-element reductions
each read back. Expected times derived by hand from torchtitan's ``train.py`` and the preset's host costs."""

from __future__ import annotations

import pytest
from tilewright.engine.engines.event.engine import EventEngine
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.train_logging import TrainLogging
from tilewright.engine.plan.train_step import flag_allreduce_s
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan

from tests.agreement import assert_search_matches_engine, engine_result

L, H, HEADS, SEQ, VOCAB = 2, 256, 4, 128, 1024
M = 4  # micro-batches per iteration per replica


def _project(framework: str | None, dp: int = 2, pp: int = 1, **mapping: object) -> Project:
    spec = GPTSpec(name="small", layers=L * pp, hidden=H, heads=HEADS, seq_len=SEQ, vocab=VOCAB)
    return Project(name="titan", hardware=load_system("dgx-a100"), workload=spec,
                   mapping=Mapping(dp=dp, pp=pp, micro_batch=1, global_batch=M * dp, host_framework=framework,
                                   **mapping),
                   run=RunSettings(dtype="bf16", mode="train", engine="analytic", contention=False))


def test_the_torch_loop_has_no_megatron_timers():
    """'pytorch' and 'pytorch-compile' run no Megatron timer at any level and no barrier; the Megatron frameworks
    keep theirs."""
    for framework in ("pytorch", "pytorch-compile"):
        for level in (None, 0, 1, 2):
            log = TrainLogging.of(Mapping(host_framework=framework, timing_log_level=level))
            assert log.torch_loop and not log.pass_timers and not log.step_timers and log.barriers == 0
    for framework in (None, "megatron-lm", "mcore", "mcore-te"):
        log = TrainLogging.of(Mapping(host_framework=framework))
        assert not log.torch_loop and log.pass_timers and log.step_timers


def test_a_step_drains_once_and_a_log_step_three_times():
    """Two replicas, bf16. Megatron's step drains three times (the gradient norm's .item(), the copy-back's
    timer, the gradient reduction's timer); torchtitan's once (``input_ids.cuda()`` of a pageable batch) plus a
    tenth of a log step: the losses' .item() and dist_mean / dist_max, each a collective call, a one-element
    all-reduce over both ranks and an .item(). The rest of the optimizer step is the same."""
    gpu = load_system("dgx-a100").children[0].children[0]
    c = gpu.compute
    drain = c.host_sync_s + c.host_dispatch_s
    world = flag_allreduce_s(elaborate(load_system("dgx-a100"), devices_needed=2), [0, 1])
    torch_step = drain + (drain + 2 * (c.host_collective_s + world + drain)) / 10
    megatron = make_plan(_project("megatron-lm")).stages[0].optimizer_s
    for framework in ("pytorch", "pytorch-compile"):
        titan = make_plan(_project(framework)).stages[0].optimizer_s
        assert megatron - titan == pytest.approx(3 * drain - torch_step, rel=1e-9)


def test_no_pass_waits_on_a_drained_device():
    """Single stage: torchtitan's passes start on a busy device (no timer drains, no get_batch host work, no
    backward() start-up after a drain); Megatron-LM's forwards and backwards lead with host waits."""
    def waits(framework: str) -> int:
        passes = make_plan(_project(framework)).stages[0].passes.values()
        return sum(1 for ps in passes for s in ps.segments if s.label.startswith("host "))

    assert waits("pytorch-compile") == 0
    assert waits("megatron-lm") > 0


@pytest.mark.parametrize("framework", ["pytorch", "pytorch-compile"])
def test_both_engines_charge_the_loop_alike(framework):
    """Pipelined and replicated (pp 2, dp 2): what the torch loop changes against Megatron-LM's is the same in
    both engines, category by category."""
    def both(p: Project):
        event = EventEngine().run(make_plan(p.model_copy(update={"run": p.run.model_copy(update={"engine": "event"})})))
        return engine_result(p), event

    (a0, e0), (a1, e1) = both(_project("megatron-lm", pp=2)), both(_project(framework, pp=2))
    changed = a1.iteration_time_s - a0.iteration_time_s
    assert abs(changed) > 1e-5
    assert e1.iteration_time_s - e0.iteration_time_s == pytest.approx(changed, rel=1e-6)
    for k in set(a1.time_breakdown_s) | set(a0.time_breakdown_s):
        da = a1.time_breakdown_s.get(k, 0.0) - a0.time_breakdown_s.get(k, 0.0)
        de = e1.time_breakdown_s.get(k, 0.0) - e0.time_breakdown_s.get(k, 0.0)
        assert de == pytest.approx(da, abs=1e-6 * a1.iteration_time_s), k


@pytest.mark.parametrize("candidate", [Candidate(2, 2, 2, 1), Candidate(1, 1, 8, 1)])
def test_search_times_the_loop_as_the_engine(candidate):
    """The parallelism search's evaluator charges torchtitan's loop as the plan does: no timer drains in its
    passes' leads, the batch copy's drain and the log step's share in its step tail."""
    spec = GPTSpec(name="small", layers=4, hidden=H, heads=HEADS, seq_len=SEQ, vocab=VOCAB)
    base = Project(name="titan", hardware=load_system("dgx-a100"), workload=spec,
                   mapping=Mapping(micro_batch=1, global_batch=16, host_framework="pytorch-compile"),
                   run=RunSettings(dtype="bf16", mode="train", engine="analytic", contention=False))
    assert_search_matches_engine(base, candidate, keep_base=True)
