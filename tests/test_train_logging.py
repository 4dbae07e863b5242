"""Megatron-LM's optional logging and checking in the training loop (``plan.train_logging``): each flag's added
time for a small GPT on one DGX A100 GPU, derived by hand from Megatron's code (what each call launches, reads
and waits for) and the preset's host and device costs; both engines and the search time them alike; the CLI
flags set them and are refused where they would be idle (inference)."""

from __future__ import annotations

import json
import math

import pytest
from tilewright.engine.cli import main
from tilewright.engine.engines.event.engine import EventEngine
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.perf.device import device_model
from tilewright.engine.plan.train_step import flag_allreduce_s
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan

from tests.agreement import assert_search_matches_engine, engine_result

L, H, HEADS, SEQ, VOCAB = 2, 256, 4, 128, 1024
M = 4  # micro-batches per iteration (global batch 4, micro-batch 1, one replica)
# Megatron's GPT: per layer two LayerNorms (γ, β) and four linear layers (weight, bias): 12 tensors of
# 12h² + 13h parameters; then the word and position embeddings and the final LayerNorm's γ and β
TENSORS = 12 * L + 4
PARAMS = L * (12 * H * H + 13 * H) + VOCAB * H + SEQ * H + 2 * H
FP16_GRAD = 2.0  # bytes per parameter of Megatron's fp16 gradient buffer


def _project(dp: int = 1, **mapping: object) -> Project:
    spec = GPTSpec(name="small", layers=L, hidden=H, heads=HEADS, seq_len=SEQ, vocab=VOCAB)
    return Project(name="log", hardware=load_system("dgx-a100"), workload=spec,
                   mapping=Mapping(dp=dp, micro_batch=1, global_batch=M * dp, **mapping),
                   run=RunSettings(dtype="fp16", mode="train", engine="analytic", contention=False))


def _time(p: Project) -> float:
    return engine_result(p).iteration_time_s


def _costs(dp: int = 1):
    """The GPU's host costs, its device model and the 4-byte all-reduces over one replica (the model group)
    and over every rank."""
    gpu = load_system("dgx-a100").children[0].children[0]
    c = gpu.compute
    dev = device_model(c, gpu.memories, None, "fp16")
    hw = elaborate(load_system("dgx-a100"), devices_needed=dp)
    return c, dev, flag_allreduce_s(hw, [0]), flag_allreduce_s(hw, list(range(dp)))


def test_counts_of_the_small_gpt():
    """The tensors and parameters the hand derivations below use are the plan's stage: the flags' sums over
    them (the stage holds the whole model at pp 1)."""
    plan = make_plan(_project())
    assert plan.stages[0].params == pytest.approx(PARAMS)


def test_params_norm_adds_its_norm_reduce_and_sync():
    """calc_params_l2_norm at fp16: two filter calls per tensor, apex's multi-tensor l2norm (one launch per
    320 chunks of 65,536 elements or per 110 tensors, then its cleanup kernel) reading the fp16 parameters,
    norm * norm, the call and time of a 4-byte all-reduce over the model group, then .item()'s drain."""
    c, dev, model_ar, _ = _costs()
    launches = max(math.ceil(TENSORS / 110), math.ceil((PARAMS / 65536 + TENSORS) / 320)) + 1 + 1
    host = launches * c.host_dispatch_s + 2 * TENSORS * c.host_call_s
    device = dev.stream_s(2.0 * PARAMS) + launches * c.fixed_op_s
    drain = c.host_sync_s + c.host_dispatch_s
    want = max(host, device) + c.host_collective_s + model_ar + drain
    assert want > 0
    got = _time(_project(log_params_norm=True)) - _time(_project())
    assert got == pytest.approx(want, rel=1e-9)


def test_num_zeros_is_host_bound_per_gradient_tensor():
    """count_zeros_fp32: per fp32 main gradient three Python ops (count_nonzero, numel - count, the running
    sum) launching four kernels (count_nonzero's inner sum from C++: a call), four calls (two filters,
    .detach(), .numel()); the gradient read at 4 B and a bool mask written and read; then an all-reduce and
    .item(). On this small model the host's launches outlast the device's kernels."""
    c, dev, model_ar, _ = _costs()
    host = TENSORS * (3 * c.host_dispatch_s + 5 * c.host_call_s)
    device = dev.stream_s(6.0 * PARAMS) + 4 * TENSORS * c.fixed_op_s
    assert host > device
    want = host + c.host_collective_s + model_ar + c.host_sync_s + c.host_dispatch_s
    got = _time(_project(log_num_zeros_in_grad=True)) - _time(_project())
    assert got == pytest.approx(want, rel=1e-9)


def test_timer_levels_remove_and_add_synchronisations():
    """At pp 1 and tp 1 (two replicas), from the plan's default (every timer, v2.x-v3.0) to level 0: each
    micro-batch loses the forward's two timer drains and the backward's one, and its backward() start-up no
    longer waits on a drained device (nothing is received before it); the step loses the reduction's timer
    drain, not the copy-back's: without that timer the training loop's loss-scale .item() drains the copy-back
    (megatron/training.py: ``loss_scale = optimizer.get_loss_scale().item()`` every iteration). Level 1 brings
    back the reduction's drain and adds two barriers (a 4-byte all-reduce over both ranks and its call); level 2
    the per-micro-batch drains, as the default."""
    c, _, _, world_ar = _costs(dp=2)
    drain = c.host_sync_s + c.host_dispatch_s
    per_micro_batch = 3 * drain + c.host_backward_s
    default, level = _time(_project(dp=2)), {n: _time(_project(dp=2, timing_log_level=n)) for n in (0, 1, 2)}
    assert default - level[0] == pytest.approx(M * per_micro_batch + drain, rel=1e-9)
    assert level[1] - level[0] == pytest.approx(drain + 2 * (c.host_collective_s + world_ar), rel=1e-9)
    assert level[2] - level[1] == pytest.approx(M * per_micro_batch, rel=1e-9)
    assert level[2] - default == pytest.approx(2 * (c.host_collective_s + world_ar), rel=1e-9)


def test_level_zero_hides_the_key_sizes_broadcast_call_at_tp2():
    """At tp 2 each forward also broadcasts the batch over the tensor group: at the default the key sizes'
    call follows the batch-generator timer's start (a drained device) and the batch's follows the sizes'
    .cpu(); at level 0 only the latter is exposed: one collective call less per micro-batch, beside the three
    timer drains and the hidden backward() start-up (one replica: no reduction timer; the copy-back's drain
    stays, made by the loop's loss-scale .item())."""
    c, _, _, _ = _costs()
    drain = c.host_sync_s + c.host_dispatch_s
    default, zero = _time(_project(tp=2)), _time(_project(tp=2, timing_log_level=0))
    want = M * (3 * drain + c.host_backward_s + c.host_collective_s)
    assert default - zero == pytest.approx(want, rel=1e-9)


def test_nan_check_syncs_each_loss_and_the_gradient_bucket():
    """--check-for-nan-in-loss-and-grad at pp 1 without --overlap-grad-reduce: one more drain per micro-batch
    (the loss's .isnan() on the last stage) and one bucket's norm and isnan kernels over the fp16 gradient
    buffer, then its drain."""
    c, dev, _, _ = _costs()
    drain = c.host_sync_s + c.host_dispatch_s
    bucket = max(2 * c.host_dispatch_s, dev.stream_s(FP16_GRAD * PARAMS) + 2 * c.fixed_op_s) + drain
    got = _time(_project(check_for_nan_in_loss_and_grad=True)) - _time(_project())
    assert got == pytest.approx(M * drain + bucket, rel=1e-9)


ALL = {"log_params_norm": True, "log_num_zeros_in_grad": True, "timing_log_level": 1,
       "check_for_nan_in_loss_and_grad": True, "overlap_grad_reduce": True}


def _both(p: Project) -> tuple:
    event = EventEngine().run(make_plan(p.model_copy(update={"run": p.run.model_copy(update={"engine": "event"})})))
    return engine_result(p), event


@pytest.mark.parametrize("level", [0, 1, 2])
def test_engines_agree_with_every_flag(level):
    """The event engine adds what the analytic engine adds for the flags (they share the plan), pipelined,
    tensor-parallel and replicated: the iteration and every category of its breakdown. (At this tiny size the
    two engines differ by 0.15 µs without any flag, a pipeline detail of their own; the flags add nothing to it.)"""
    base = _project()
    spec = base.workload.model_copy(update={"layers": 4})

    def project(**flags: object) -> Project:
        return base.model_copy(update={"workload": spec, "mapping": Mapping(
            tp=2, pp=2, dp=2, micro_batch=1, global_batch=8, **{"overlap_grad_reduce": True, **flags})})

    (a0, e0), (a1, e1) = _both(project()), _both(project(**{**ALL, "timing_log_level": level}))
    assert e0.iteration_time_s == pytest.approx(a0.iteration_time_s, rel=1e-4)
    added = a1.iteration_time_s - a0.iteration_time_s
    assert abs(added) > 1e-4
    assert e1.iteration_time_s - e0.iteration_time_s == pytest.approx(added, rel=1e-9)
    for k in set(a1.time_breakdown_s) | set(a0.time_breakdown_s):
        da = a1.time_breakdown_s.get(k, 0.0) - a0.time_breakdown_s.get(k, 0.0)
        de = e1.time_breakdown_s.get(k, 0.0) - e0.time_breakdown_s.get(k, 0.0)
        assert de == pytest.approx(da, abs=1e-9 * a1.iteration_time_s), k


@pytest.mark.parametrize("candidate", [Candidate(2, 2, 2, 1), Candidate(1, 2, 4, 1, zero=1), Candidate(2, 1, 4, 1)])
def test_search_times_the_flags_as_the_engine(candidate):
    """The parallelism search's evaluator adds the same drains, calls and step work as the plan (bf16: the
    parameter norm casts each tensor)."""
    spec = GPTSpec(name="small", layers=4, hidden=H, heads=HEADS, seq_len=SEQ, vocab=VOCAB)
    base = Project(name="log", hardware=load_system("dgx-a100"), workload=spec,
                   mapping=Mapping(micro_batch=1, global_batch=16, **ALL),
                   run=RunSettings(dtype="bf16", mode="train", engine="analytic", contention=False))
    for level in (0, 2):
        assert_search_matches_engine(base, candidate, keep_base=True, timing_log_level=level)


DENSE = ["run", "--system", "dgx-a100", "--model", "gpt", "--layers", "2", "--hidden", "256", "--heads", "4",
         "--seq-len", "128", "--vocab", "1024", "--engine", "analytic", "--json", "--quiet"]
FLAGS = {"--log-params-norm": "mapping.log_params_norm=true",
         "--log-num-zeros-in-grad": "mapping.log_num_zeros_in_grad=true",
         "--check-for-nan-in-loss-and-grad": "mapping.check_for_nan_in_loss_and_grad=true",
         "--timing-log-level": "mapping.timing_log_level=0"}


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("flag", list(FLAGS))
def test_cli_flags_set_the_mapping(capsys, flag):
    """Each flag changes a training run's iteration as its field does; --timing-log-level 0 shortens it (fewer
    syncs), the others lengthen it."""
    args = [flag, "0"] if flag == "--timing-log-level" else [flag]
    train = [*DENSE, "--global-batch", "4"]
    plain = _run(capsys, *train)["iteration_time_s"]
    typed = _run(capsys, *train, *args)["iteration_time_s"]
    assert typed == _run(capsys, *train, "--set", FLAGS[flag])["iteration_time_s"]
    assert (typed < plain) if flag == "--timing-log-level" else (typed > plain)


@pytest.mark.parametrize("flag", list(FLAGS))
def test_cli_flags_are_refused_in_inference(capsys, flag):
    """An inference run has no training loop: the field changes nothing there (shown through --set), so the
    flag is refused, named, instead of running as if it had not been typed."""
    # lengths within the model's 128-token context: the defaults' 512 + 128 would be refused (plan.context_length)
    infer = [*DENSE, "--mode", "infer", "--batch", "4", "--prompt-tokens", "96", "--output-tokens", "32"]
    one = _run(capsys, *infer)
    idle = _run(capsys, *infer, "--set", FLAGS[flag])
    assert idle["iteration_time_s"] == one["iteration_time_s"]
    args = [flag, "2"] if flag == "--timing-log-level" else [flag]
    assert main([*infer, *args]) == 2
    err = capsys.readouterr().err
    assert f"{flag}:" in err and "training only" in err and "Traceback" not in err
