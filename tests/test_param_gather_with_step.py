"""``mapping.overlap_param_gather_with_optimizer_step``: Megatron-Core steps the first model chunk's parameters
on their own, launches that chunk's whole all-gather (one bucket) and steps the other chunks' parameters under it
(``ChainedOptimizer.step_with_ready_grads``: ``model_chunks[0].start_param_sync(force_dispatch=True)``).

Expected exposures are derived here from the rule, with the plan's own collective (its time for a fraction of
the bytes) and its stage numbers: the first chunk's share s0 of the gather shows by what the fused step of the
other chunks' parameters (``fused_step_s`` × (1 − s0), itself checked against the 30 B per parameter of one fused
mixed-precision Adam step over the device's DRAM bandwidth) cannot cover; the rest shows by what one micro-batch's
forward of the first chunk (two chunks here) cannot cover. Without the option only the first bucket, one layer of
the first chunk, waits in full.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # the studio control's test below

import pytest  # noqa: E402
from pydantic import ValidationError  # noqa: E402
from tilewright.engine.cli import main  # noqa: E402
from tilewright.engine.io.presets import load_system  # noqa: E402
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings  # noqa: E402
from tilewright.engine.plan.checks import check_project  # noqa: E402
from tilewright.engine.plan.group_comm import scaled  # noqa: E402
from tilewright.engine.plan.timing import pass_parts  # noqa: E402
from tilewright.engine.search.parallel.candidate import Candidate  # noqa: E402
from tilewright.engine.simulate import make_plan, simulate  # noqa: E402

from tests.agreement import assert_engines_agree, assert_search_matches_engine  # noqa: E402

GPT = GPTSpec(name="gpt-step-gather", layers=8, hidden=2048, heads=16, seq_len=1024, vocab=8192)
FIELD = "mapping.overlap_param_gather_with_optimizer_step"
STEP_BYTES = 2 * (4 + 4 + 4) + 4 + 2  # fp32 master and moments read + written, fp32 gradient read, bf16 weights


def _project(engine: str = "analytic", mode: str = "train", **mapping) -> Project:
    m = {"tp": 1, "pp": 2, "dp": 4, "interleave": 2, "micro_batch": 1, "global_batch": 32, "zero": 1,
         "overlap_grad_reduce": True, "overlap_param_gather": True} | mapping
    return Project(name="gather-step", hardware=load_system("dgx-h100"), workload=GPT, mapping=Mapping(**m),
                   run=RunSettings(dtype="bf16", mode=mode, engine=engine, contention=False))


def _seconds(plan, rank: int, fraction: float) -> float:
    return scaled(plan.zero_gather(rank), fraction).time(plan.hw) if fraction > 0 else 0.0


@pytest.mark.parametrize("rank", [0, 1])
def test_the_first_chunk_hides_behind_the_other_chunks_step(rank: int):
    plan = make_plan(_project(overlap_param_gather_with_optimizer_step=True))
    st = plan.stages[rank]
    assert st.fused_step_s == pytest.approx(st.params / 4 * STEP_BYTES / st.dev.dram_bandwidth, rel=1e-9)
    s0 = st.grad_bytes[0] / (st.grad_bytes[0] + st.grad_bytes[1])
    t0, hide0 = _seconds(plan, rank, s0), st.fused_step_s * (1 - s0)
    first = s0 * (t0 - hide0) / t0 if t0 > hide0 else 0.0
    t1, hide1 = _seconds(plan, rank, 1 - s0), pass_parts(plan, rank, st.passes[(0, "F")])[0]
    rest = (1 - s0) * (t1 - hide1) / t1 if t1 > hide1 else 0.0
    got = [c.time(plan.hw) if c.phases else 0.0 for c in plan.zero_gather_exposed(rank)]
    assert got == pytest.approx([_seconds(plan, rank, first), _seconds(plan, rank, rest)], rel=1e-9)
    assert 0 < first < s0  # this step hides part of the first chunk's gather, not all of it


def test_without_the_option_the_first_bucket_is_one_layer_in_full():
    plan = make_plan(_project())
    st = plan.stages[0]
    first = st.grad_bytes[0] / (st.grad_bytes[0] + st.grad_bytes[1]) / len(st.chunk_layers[0])
    assert plan.zero_gather_exposed(0)[0].time(plan.hw) == pytest.approx(_seconds(plan, 0, first), rel=1e-9)


def test_a_long_step_hides_the_first_chunk_entirely():
    """fp16 moments and master (126 B per parameter) make the step long enough to cover the first chunk's
    gather: only what the forward leaves of the rest can show."""
    plan = make_plan(_project(overlap_param_gather_with_optimizer_step=True, optimizer_moments="fp16",
                              optimizer_master="fp16"))
    st = plan.stages[0]
    s0 = st.grad_bytes[0] / (st.grad_bytes[0] + st.grad_bytes[1])
    assert st.fused_step_s * (1 - s0) > _seconds(plan, 0, s0)
    assert not plan.zero_gather_exposed(0)[0].phases


def test_both_engines_agree_and_the_option_changes_the_iteration():
    case = {"overlap_param_gather_with_optimizer_step": True}
    analytic, event = simulate(_project(**case)), simulate(_project(engine="event", **case))
    assert_engines_agree(analytic, event)
    assert analytic.iteration_time_s != simulate(_project()).iteration_time_s
    assert analytic.peak_memory_bytes == simulate(_project()).peak_memory_bytes


@pytest.mark.parametrize("optimizer_moments", ["fp32", "fp16"])
@pytest.mark.parametrize("overlap_grad_reduce", [False, True])
def test_the_search_agrees_with_the_engine(optimizer_moments: str, overlap_grad_reduce: bool):
    """With the gradient reduction after the backward or overlapped with it (the search times the plan's
    buckets: tail._reduced)."""
    c = Candidate(1, 2, 4, 1, interleave=2, zero=1)
    assert_search_matches_engine(_project(overlap_grad_reduce=overlap_grad_reduce,
                                          overlap_param_gather_with_optimizer_step=True,
                                          optimizer_moments=optimizer_moments), c, keep_base=True)


def test_a_candidate_that_cannot_run_it_drops_it():
    base = _project(overlap_param_gather_with_optimizer_step=True).mapping
    assert Candidate(1, 2, 4, 1, interleave=2, zero=1).mapping(32, base).overlap_param_gather_with_optimizer_step
    for c in (Candidate(1, 2, 4, 1, zero=1), Candidate(1, 2, 4, 1, interleave=2, zero=0),
              Candidate(1, 2, 4, 1, interleave=2, zero=3, fsdp=True)):
        assert not c.mapping(32, base).overlap_param_gather_with_optimizer_step


def test_it_needs_overlap_param_gather():
    with pytest.raises(ValidationError, match="needs overlap_param_gather"):
        _project(overlap_param_gather=False, overlap_param_gather_with_optimizer_step=True)


@pytest.mark.parametrize(
    ("mapping", "says"),
    [({"zero": 0}, "zero 1 or 2"), ({"zero": 3}, "zero 1 or 2"), ({"interleave": 1}, "interleaved"),
     ({"mode": "infer", "global_batch": 4}, "training only")],
    ids=["zero0", "zero3", "no-interleave", "infer"],
)
def test_refused_where_megatron_refuses(mapping: dict, says: str):
    mode = mapping.pop("mode", "train")
    project = _project(mode=mode, overlap_param_gather_with_optimizer_step=True, **mapping)
    problems = [p for p in check_project(project) if p.path == FIELD]
    assert problems and any(says in p.reason for p in problems)


CLI = ["run", "--system", "dgx-h100", "--model", "gpt", "--layers", "8", "--hidden", "2048", "--heads", "16",
       "--seq-len", "1024", "--vocab", "8192", "--pp", "2", "--interleave", "2", "--dp", "4", "--global-batch", "32",
       "--zero", "1", "--json"]


def test_cli_flag(capsys):
    assert main([*CLI, "--overlap-param-gather", "--overlap-param-gather-with-optimizer-step"]) == 0
    capsys.readouterr()
    assert main([*CLI, "--overlap-param-gather-with-optimizer-step"]) == 2  # without --overlap-param-gather
    assert "overlap_param_gather" in capsys.readouterr().err
    assert main([*CLI[:-3], "--zero", "3", "--json", "--overlap-param-gather",
                 "--overlap-param-gather-with-optimizer-step"]) == 2
    assert FIELD in capsys.readouterr().err


def test_studio_option_is_one_undo_step(make_window):
    w = make_window(_project())
    box, doc = w.workload.options.gather_step, w.doc
    assert box.isEnabled() and not box.box.isChecked()
    box.box.click()
    assert doc.project.mapping.overlap_param_gather_with_optimizer_step and doc.undo_stack.count() == 1
    assert doc.undo_stack.undoText() == "Gather the first chunk during the step"
    doc.undo_stack.undo()
    assert not doc.project.mapping.overlap_param_gather_with_optimizer_step and not box.box.isChecked()
    flat = make_window(_project(interleave=1, pp=2)).workload.options.gather_step
    assert not flat.isEnabled() and "interleave" in flat.toolTip()
