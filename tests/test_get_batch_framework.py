"""``get_batch``'s host work by training framework (``engine.plan.train_step.get_batch_work``): Megatron-LM's
(v2.x and 2023's legacy models: 'megatron-lm', 'mcore') on every stage, with its key sizes' ``.cpu()`` drain, two
broadcasts and the mask kernels; Megatron-Core's of 2024+ ('mcore-te') nothing on middle pipeline stages and, on the
first and last, the source rank's four pinned-memory copies and fixed-shape broadcasts, no drain; torchtitan's
('pytorch', 'pytorch-compile') nothing. Expected counts are read off the frameworks' code here, not from the
module's constants."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan, simulate

from tests.agreement import assert_search_matches_engine

LAYERS, HIDDEN, HEADS, SEQ, VOCAB = 4, 1024, 16, 1024, 51200
HOST_CALLS = "host calls on a drained device"
# the schedule's timers that drain around a forward at the default timer level: batch-generator's and
# forward-compute's stops (megatron/core/timers.py: every start and stop calls torch.cuda.synchronize())
TIMER_DRAINS_F = 2
# Megatron-LM v2.x / 2023 legacy get_batch: broadcast_data's .cpu() of the key sizes (one drain), 7 launches and
# 10 calls (narrow, view, .long(), 2 slices + 2 contiguous copies; the mask's ones, tril, view, the loss mask's
# ones, arange, unsqueeze, expand_as, < 0.5, two size())
MEGATRON = {"drains": 1, "launches": 7, "calls": 10}
# Megatron-Core get_batch_on_this_tp_rank: tp rank 0's .cuda(non_blocking=True) of tokens, labels, loss_mask,
# position_ids (no attention mask: --no-create-attention-mask-in-dataloader); bytes per token of each broadcast
MCORE_COPIES = 4
MCORE_BYTES = {"tokens": 8, "labels": 8, "loss_mask": 4, "position_ids": 8}


def _project(framework: str, tp: int = 2, pp: int = 1, dp: int = 1, mb: int = 1, gb: int = 8,
             engine: str = "analytic", timing: int | None = None) -> Project:
    spec = GPTSpec(name="small", layers=LAYERS, hidden=HIDDEN, heads=HEADS, seq_len=SEQ, vocab=VOCAB)
    extra = {} if timing is None else {"timing_log_level": timing}
    return Project(
        name="small", hardware=load_system("dgx-a100"), workload=spec,
        mapping=Mapping(tp=tp, pp=pp, dp=dp, micro_batch=mb, global_batch=gb, recompute="full",
                        host_framework=framework, **extra),
        run=RunSettings(dtype="bf16", engine=engine, contention=False),
    )


def _compute():
    return load_system("dgx-a100").children[0].children[0].compute


def _drain_s() -> float:
    c = _compute()
    return c.host_sync_s + c.host_dispatch_s


def _forward(p: Project, rank: int = 0):
    return make_plan(p).stages[rank].passes[(0, "F")].segments


def _broadcasts(segments) -> list[tuple[str, float, float]]:
    """(label, bytes, exposed call seconds) of a pass's broadcasts."""
    return [(s.label, s.comm[1], s.dispatch_wait_s) for s in segments
            if s.comm is not None and s.comm[0] == "broadcast"]


def _waits(segments, label: str) -> float:
    return sum(s.dispatch_wait_s for s in segments if s.label == label and s.comm is None)


@pytest.mark.parametrize("framework", ["megatron-lm", "mcore", "mcore-te", "pytorch", "pytorch-compile"])
def test_forward_drains_and_host_work_follow_the_framework(framework):
    """pp 1, tp 2, default timers: Megatron-LM's get_batch adds its .cpu() drain and its 7 launches and 10 calls to
    the timers' two drains; Megatron-Core's the source rank's 4 copies (after the batch-generator timer's sync) and
    no drain; torchtitan's nothing, and its loop runs no Megatron timer (``plan.train_logging``: no drain at all)."""
    c = _compute()
    fwd = _forward(_project(framework))
    megatron = framework in ("megatron-lm", "mcore")
    timers = 0 if framework in ("pytorch", "pytorch-compile") else TIMER_DRAINS_F
    drains = timers + (MEGATRON["drains"] if megatron else 0)
    assert _waits(fwd, "host synchronisation") == pytest.approx(drains * _drain_s(), rel=1e-12)
    if megatron:
        host = MEGATRON["launches"] * c.host_dispatch_s + MEGATRON["calls"] * c.host_call_s
    else:
        host = MCORE_COPIES * c.host_dispatch_s if framework == "mcore-te" else 0.0
    assert _waits(fwd, HOST_CALLS) == pytest.approx(host, rel=1e-12, abs=1e-15)


def test_broadcasts_by_framework_single_stage():
    """pp 1, tp 2, mb 2: Megatron-LM broadcasts the key sizes (8 int64) and mb × (seq + 1) int64 tokens, both calls
    after a drain; Megatron-Core the four tensors of mb × seq each; torchtitan none."""
    mb, call = 2, _compute().host_collective_s
    legacy = _broadcasts(_forward(_project("megatron-lm", mb=mb)))
    assert legacy == [("batch sizes broadcast", 64.0, pytest.approx(call)),
                      ("batch broadcast", float(mb * (SEQ + 1) * 8), pytest.approx(call))]
    core = _broadcasts(_forward(_project("mcore-te", mb=mb)))
    assert [b for _, b, _ in core] == [mb * SEQ * MCORE_BYTES[k] for k in ("tokens", "labels", "loss_mask",
                                                                          "position_ids")]
    assert all(s == pytest.approx(call) for _, _, s in core)
    assert _broadcasts(_forward(_project("pytorch", mb=mb))) == []


def test_mcore_te_pipeline_stages():
    """pp 4, tp 2: Megatron-Core's get_batch returns at once on the middle stages (no broadcast, no copies: their
    forwards' host calls are the pipeline send's call only); the first stage broadcasts tokens and position ids,
    the last labels and loss mask. Megatron-LM's broadcasts the same two on every stage."""
    c, pp = _compute(), 4
    plan = make_plan(_project("mcore-te", pp=pp, gb=16))
    sizes = {r: [b for _, b, _ in _broadcasts(plan.stages[r].passes[(0, "F")].segments)] for r in range(pp)}
    assert sizes[0] == [SEQ * MCORE_BYTES["tokens"], SEQ * MCORE_BYTES["position_ids"]]
    assert sizes[pp - 1] == [SEQ * MCORE_BYTES["labels"], SEQ * MCORE_BYTES["loss_mask"]]
    for r in range(1, pp - 1):
        fwd = plan.stages[r].passes[(0, "F")].segments
        assert sizes[r] == []
        assert _waits(fwd, HOST_CALLS) == pytest.approx(c.host_collective_s, rel=1e-12)  # the send's call
        # the timers' two drains and the send's synchronize: no .cpu()
        assert _waits(fwd, "host synchronisation") == pytest.approx((TIMER_DRAINS_F + 1) * _drain_s(), rel=1e-12)
    first = plan.stages[0].passes[(0, "F")].segments
    assert _waits(first, HOST_CALLS) == pytest.approx(MCORE_COPIES * c.host_dispatch_s + c.host_collective_s,
                                                      rel=1e-12)
    legacy = make_plan(_project("megatron-lm", pp=pp, gb=16))
    for r in range(pp):
        assert len(_broadcasts(legacy.stages[r].passes[(0, "F")].segments)) == 2


def test_mcore_te_without_pass_timers_exposes_nothing():
    """--timing-log-level 0: no batch-generator timer synchronises before Megatron-Core's get_batch, which has no
    drain of its own: its copies and broadcast calls hide behind the queued work; Megatron-LM's still follow its
    .cpu() (the batch broadcast's call and the 7 launches, 10 calls)."""
    c = _compute()
    core = _forward(_project("mcore-te", timing=0))
    assert _waits(core, HOST_CALLS) == 0.0 and _waits(core, "host synchronisation") == 0.0
    assert [s for _, _, s in _broadcasts(core)] == [0.0] * 4
    legacy = _forward(_project("megatron-lm", timing=0))
    assert _waits(legacy, "host synchronisation") == pytest.approx(MEGATRON["drains"] * _drain_s(), rel=1e-12)
    assert [s for _, _, s in _broadcasts(legacy)] == [0.0, pytest.approx(c.host_collective_s)]


@pytest.mark.parametrize("framework", ["mcore-te", "pytorch", "megatron-lm"])
def test_engines_agree(framework):
    """Both engines take get_batch's work from the plan: the same iteration time, pipeline and replicas too."""
    times = [simulate(_project(framework, pp=2, dp=2, engine=e)).iteration_time_s for e in ("analytic", "event")]
    assert times[0] == pytest.approx(times[1], rel=1e-6)


@pytest.mark.parametrize("framework", ["mcore-te", "pytorch"])
@pytest.mark.parametrize(("pp", "interleave"), [(2, 1), (4, 1), (2, 2)])
def test_search_leads_passes_as_the_plan(framework, pp, interleave):
    """The search's pass leads (``lead_seconds`` with each stage's ``broadcasts``) match the plan's per framework,
    middle and interleaved virtual stages included."""
    assert_search_matches_engine(
        _project(framework, pp=pp, dp=2, gb=16),
        Candidate(tp=2, pp=pp, dp=2, micro_batch=1, recompute=Recompute.full, interleave=interleave),
        host_framework=framework)
