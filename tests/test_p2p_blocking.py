"""Megatron-LM's pipeline sends as it runs them (``plan.pipeline_p2p``): a stage that sends waits for its send, and
with scatter-gather each received tensor is all-gathered over the tensor group. Expected times are derived by
hand from the schedule and the hardware's own collective, not read back from the plan."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.mapping import Schedule
from tilewright.engine.perf.collectives import collective
from tilewright.engine.plan.recurrence import run_table
from tilewright.engine.plan.steps import training_table
from tilewright.engine.plan.timing import pass_parts
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan, simulate

from tests.agreement import assert_engines_agree, assert_search_matches_engine

LAYERS, HIDDEN, HEADS, SEQ, VOCAB = 4, 1024, 16, 1024, 51200
SPEC = GPTSpec(name="small", layers=LAYERS, hidden=HIDDEN, heads=HEADS, seq_len=SEQ, vocab=VOCAB)


def _project(mode: str | None = None, tp: int = 2, pp: int = 2, recompute: str = "full", sp: bool = False,
             engine: str = "analytic", run_mode: str = "train", system: str = "dgx-a100", gb: int = 8) -> Project:
    m = Mapping(tp=tp, pp=pp, dp=1, micro_batch=1, global_batch=gb if run_mode == "train" else 1,
                recompute=recompute, sequence_parallel=sp, pipeline_p2p=mode)
    return Project(name="p2p", hardware=load_system(system), workload=SPEC, mapping=m,
                   run=RunSettings(dtype="fp16", engine=engine, contention=False, mode=run_mode))


# --- the recurrence: the sender's step grows by its send -------------------------------------------------

F, B, S = 3.0, 5.0, 1.0  # every forward, every backward, every send (B ≥ S: the derivation below assumes it)


def _two_stages(blocking: bool):
    table = training_table(Schedule.one_f_one_b, 2, 2, 1)
    duration = {(r, 0, k): (F if k == "F" else B) for r in range(2) for k in "FB"}
    send = {(0, False): S, (0, True): S}
    return run_table(table, duration, send, blocking=blocking)


def test_overlapped_sends_let_the_sender_compute_on():
    """pp 2, m 2, 1F1B. Stage 0 runs F0 F1 B0 B1, stage 1 F0 B0 F1 B1. Stage 1's F0 starts when F0 arrives
    (F + S), its B0 sends back, arriving at 2F + 2S + B; stage 0's B0 runs from there, its B1 waits for stage 1's
    B1, which ends at 3F + S + 2B and arrives S later: stage 0 ends at 3F + 2S + 3B, stage 1 at 3F + S + 2B."""
    st = _two_stages(False)
    assert st[0].finish == pytest.approx(3 * F + 2 * S + 3 * B)
    assert st[1].finish == pytest.approx(3 * F + S + 2 * B)


def test_blocking_sends_hold_the_sender():
    """The same pipeline with each sending pass holding its stage until the send has arrived: stage 0 is free at
    F + S and 2F + 2S after its forwards, stage 1's F1 waits for its B0's send (2F + 2S + B) and its B1 ends
    at 3F + 2S + 2B, free S later; stage 0's B1 starts there: stage 0 ends at 3F + 3S + 3B (one send more),
    stage 1 at 3F + 3S + 2B (its two backward sends). Both count the held time as pipeline communication:
    stage 0 its two forward sends and the transfer part of each backward's wait (S each), stage 1 its two
    sends and F0's transfer."""
    st = _two_stages(True)
    assert st[0].finish == pytest.approx(3 * F + 3 * S + 3 * B)
    assert st[1].finish == pytest.approx(3 * F + 3 * S + 2 * B)
    assert st[0].waits["pp_comm"] == pytest.approx(4 * S)
    assert st[1].waits["pp_comm"] == pytest.approx(3 * S)
    assert st[1].waits["bubble"] == pytest.approx(F)  # waiting for stage 0's first forward
    assert st[1].last_backward[0] == pytest.approx(st[1].finish)  # the reduction follows the held send


# --- the plan: the receiver's pass grows by the all-gather of mb·s·h ---------------------------------------

def _pass_seconds(plan, rank: int, kind: str) -> float:
    return pass_parts(plan, rank, plan.stages[rank].passes[(0, kind)])[0]


def test_each_receive_is_all_gathered_over_the_tensor_group():
    """megatron-lm against blocking (the same sends, no gather): stage 1's forward (it receives its input) and
    stage 0's backward (it receives the output's gradient) each grow by one all-gather of the whole activation
    — micro-batch 1 × sequence 1024 × hidden 1024 × 2 B — over the stage's two GPUs, the all-gather call's host
    time and the drain of it by the schedule's timer (host_sync_s + host_dispatch_s); stage 0's forward and
    stage 1's backward receive nothing and stay as they are."""
    gathered, plain = make_plan(_project("megatron-lm")), make_plan(_project("blocking"))
    assert gathered.pipeline.blocking and gathered.pipeline.gather
    gpu = load_system("dgx-a100").children[0].children[0].compute
    host = gpu.host_collective_s + gpu.host_sync_s + gpu.host_dispatch_s
    nbytes = 1 * SEQ * HIDDEN * 2
    for rank, kind in ((1, "F"), (0, "B")):
        group = gathered.stages[rank].groups[0]
        gather = collective(gathered.hw, "all-gather", group, nbytes).time(gathered.hw)
        assert gather > 0
        grown = _pass_seconds(gathered, rank, kind) - _pass_seconds(plain, rank, kind)
        assert grown == pytest.approx(gather + host, rel=1e-9)
    for rank, kind in ((0, "F"), (1, "B")):
        assert _pass_seconds(gathered, rank, kind) == pytest.approx(_pass_seconds(plain, rank, kind), rel=1e-12)


def test_blocking_costs_the_iteration_its_sends():
    """Blocking only adds waiting: never faster than overlapped sends, and slower by at most one held send per
    step of the longest path through 1F1B's steps (a stage's 2m, plus one per change of stage: 2(pp − 1)), with
    m = 8 and pp = 2."""
    overlap = simulate(_project("overlap"))
    blocked = simulate(_project("blocking"))
    plan = make_plan(_project("blocking"))
    send = plan.p2p(0, 0, False).time(plan.hw)
    assert send > 0
    grown = blocked.iteration_time_s - overlap.iteration_time_s
    assert 0 < grown <= (2 * 8 + 2 * (2 - 1)) * send * (1 + 1e-9)
    assert blocked.time_breakdown_s["pp_comm"] > overlap.time_breakdown_s["pp_comm"]


# --- which runs get which (the default) --------------------------------------------------------------------

@pytest.mark.parametrize(
    ("kwargs", "blocking", "gather"),
    [
        ({}, True, True),  # GPU training, full recompute: Megatron-LM's --checkpoint-activations era
        ({"sp": True}, True, False),  # v3.0 skips the scatter-gather with sequence parallelism
        ({"tp": 1}, True, False),  # nothing to gather over one rank
        ({"recompute": "selective"}, False, False),  # Megatron-Core's recipes: sends overlap
        ({"mode": "overlap"}, False, False),
        ({"mode": "blocking", "recompute": "selective"}, True, False),
        ({"mode": "megatron-lm", "recompute": "none"}, True, True),
        ({"run_mode": "infer"}, False, False),  # a serving runtime's sends
    ],
    ids=["default-full", "sequence-parallel", "tp1", "default-selective", "overlap", "blocking", "megatron-lm",
         "inference"],
)
def test_which_runs_block_and_gather(kwargs, blocking, gather):
    mode = kwargs.pop("mode", None)
    plan = make_plan(_project(mode, **kwargs))
    assert (plan.pipeline.blocking, plan.pipeline.gather) == (blocking, gather)


def test_the_default_says_what_it_assumed():
    """Left unset on a pipelined full-recompute GPU run, the result says its sends block and how to say otherwise;
    asked for explicitly, or on one stage, it says nothing."""
    said = [n for n in make_plan(_project()).notes if n.startswith("pipeline sends block")]
    assert len(said) == 1 and "all-gathered" in said[0] and "mapping.pipeline_p2p" in said[0]
    for plan in (make_plan(_project("megatron-lm")), make_plan(_project(pp=1))):
        assert not any(n.startswith("pipeline sends block") for n in plan.notes)


def test_unset_it_is_not_saved():
    """A mapping that leaves the field unset saves as it did before the field existed (``_quiet``)."""
    assert "pipeline_p2p" not in Mapping(tp=2, pp=2).model_dump(mode="json")
    assert Mapping(pp=2, pipeline_p2p="blocking").model_dump(mode="json")["pipeline_p2p"] == "blocking"


# --- both engines and the search agree ---------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["blocking", "megatron-lm"])
def test_event_engine_times_it_as_the_analytic_engine(mode):
    analytic = simulate(_project(mode, pp=4, gb=8))
    event = simulate(_project(mode, pp=4, gb=8, engine="event"))
    assert_engines_agree(analytic, event)


@pytest.mark.parametrize("mode", ["blocking", "megatron-lm"])
def test_search_recurrence_times_it_as_the_engine(mode):
    base = _project(mode, pp=1, tp=1)
    c = Candidate(tp=2, pp=2, dp=1, micro_batch=1, recompute="full")  # type: ignore[arg-type]
    assert_search_matches_engine(base, c, keep_base=True)


def test_cli_flag_chooses_the_sends(capsys):
    """``tilewright run --pipeline-p2p`` on a pipelined full-recompute GPU run: 'overlap' is faster than the
    default (Megatron-LM's blocking, gathered sends), 'megatron-lm' the default itself; an inference run refuses
    it (training only)."""
    base = ["--system", "dgx-a100", "--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads", "16",
            "--seq-len", "1024", "--vocab", "51200", "--tp", "2", "--pp", "2", "--global-batch", "8",
            "--recompute", "full", "--engine", "analytic", "--json"]
    times = []
    for extra in ([], ["--pipeline-p2p", "overlap"], ["--pipeline-p2p", "megatron-lm"]):
        assert main(["run", *base, *extra]) == 0
        times.append(json.loads(capsys.readouterr().out)["iteration_time_s"])
    assert times[1] < times[0] == pytest.approx(times[2], rel=1e-12)
    assert main(["run", *base[:-5], "--mode", "infer", "--pipeline-p2p", "blocking", "--json"]) == 2
