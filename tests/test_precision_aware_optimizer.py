"""Megatron-Core's precision-aware optimizer with bf16 Adam moments (``mapping.optimizer_moments``).

``--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16`` hands Transformer Engine's
FusedAdam its two moments in bf16: they are stored at 2 + 2 B per parameter instead of 4 + 4, beside the fp32
master copy (4 B). The expected numbers are derived here from the parameter count: mixed-precision Adam holds
4 (master) + 2 · w (moments of w bytes) per parameter, ZeRO-1 divides that by dp. TE's kernel takes fp32 states
only (``fused_adam.py``: ``get_unscaled_state`` / ``_apply_scale`` around ``multi_tensor_adam``; TE PR #1640), so one
fused step reads and writes fp32 copies of master and moments (2 · (4 + 2 · 4)), reads the fp32 gradient (4),
writes the bf16 weights (2), and for each bf16 moment also casts it up (2 read + 4 written), back down (4 + 2) and
copies it into the state (2 + 2): 16 B, all at the device's DRAM bandwidth.
"""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan import train_step
from tilewright.engine.plan.checks import check_project
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

from tests.agreement import assert_engines_agree, assert_search_matches_engine

GPT = GPTSpec(name="gpt-pao", layers=4, hidden=1024, heads=16, seq_len=512, vocab=8192)
FIELD = "mapping.optimizer_moments"
MASTER = 4.0  # fp32 master weights


def _project(dtype: str = "bf16", engine: str = "analytic", optimizer: str = "adam", mode: str = "train",
             **mapping) -> Project:
    """The distributed optimizer (ZeRO-1) by default: Megatron-Core runs its precision-aware optimizer only there."""
    m = {"tp": 1, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 4, "zero": 1} | mapping
    return Project(name="pao", hardware=load_system("dgx-h100"), workload=GPT, mapping=Mapping(**m),
                   run=RunSettings(dtype=dtype, mode=mode, engine=engine, optimizer=optimizer, contention=False))


def _params() -> float:
    return sum(op.params for op in build_workload(GPT).ops())


BF16_CAST = (2 + 4) + (4 + 2) + (2 + 2)  # .float(), .bfloat16(), copy_ into the bf16 state


def _step_bytes(moment: float) -> float:
    """One fused mixed-precision Adam step per parameter: fp32 copies of master and moments read and written, the
    fp32 gradient read, the bf16 weights written; each bf16 moment (``moment`` 2) also cast both ways."""
    return 2 * (MASTER + 2 * 4.0) + 4 + 2 + (2 * BF16_CAST if moment == 2.0 else 0.0)


@pytest.mark.parametrize("dp", [1, 4])
def test_optimizer_state_bytes_per_parameter(dp: int):
    """fp32 moments: 4 + 8 = 12 B per parameter, bf16: 4 + 4 = 8 B; ZeRO-1 over dp holds 1/dp of either."""
    p = _params()
    off = make_plan(_project(dp=dp, global_batch=4 * dp)).stages[0].state
    on = make_plan(_project(dp=dp, global_batch=4 * dp, optimizer_moments="bf16")).stages[0].state
    assert off.optimizer == pytest.approx(p * (MASTER + 2 * 4.0) / dp, rel=1e-9)
    assert on.optimizer == pytest.approx(p * (MASTER + 2 * 2.0) / dp, rel=1e-9)
    assert (on.weights, on.gradients) == (off.weights, off.gradients)


def test_the_step_streams_the_bf16_moments_through_fp32_copies(monkeypatch):
    """The step's time is its bytes over the device's DRAM bandwidth: 30 B against 62 B per parameter. bf16
    moments save memory, not step time: TE casts them to fp32 copies around its fp32 kernel."""
    monkeypatch.setattr(train_step, "loop_seconds", lambda *a, **k: 0.0)  # the per-tensor loops, tested apart
    off, on = make_plan(_project()), make_plan(_project(optimizer_moments="bf16"))
    bw = off.stages[0].dev.dram_bandwidth
    extra = on.stages[0].fused_step_s - off.stages[0].fused_step_s
    assert (_step_bytes(4.0), _step_bytes(2.0)) == (30.0, 62.0)
    assert extra == pytest.approx(_params() * (_step_bytes(2.0) - _step_bytes(4.0)) / bw, rel=1e-9)
    assert on.stages[0].fused_step_s == pytest.approx(_params() * _step_bytes(2.0) / bw, rel=1e-9)
    # Megatron's extra passes beyond the fused step still count, but for the master's read-back (4 B): FusedAdam
    # holds the master and writes the bf16 weights itself (DistributedOptimizer._copy_main_params_to_model_params
    # returns at once under the precision-aware optimizer)
    beyond = [st.optimizer_s - st.fused_step_s for st in (off.stages[0], on.stages[0])]
    assert beyond[0] - beyond[1] == pytest.approx(_params() * 4 / bw, rel=1e-9)
    assert on.stages[0].optimizer_s > _params() * _step_bytes(2.0) / bw


def test_peak_memory_drops_time_grows_and_off_is_identical(monkeypatch):
    """Peak memory falls by the moments' 4 B per parameter, the step's traffic takes longer; the default is the run
    without the field, which stays out of saved files at its default."""
    monkeypatch.setattr(train_step, "loop_seconds", lambda *a, **k: 0.0)  # the per-tensor loops, tested apart
    base = simulate(_project())
    explicit = simulate(_project(optimizer_moments="fp32"))
    assert explicit.iteration_time_s == base.iteration_time_s
    assert explicit.peak_memory_bytes == base.peak_memory_bytes
    on = simulate(_project(optimizer_moments="bf16"))
    assert base.peak_memory_bytes - on.peak_memory_bytes == pytest.approx(4.0 * _params(), rel=1e-9)
    assert on.iteration_time_s > base.iteration_time_s
    assert "optimizer_moments" not in _project().mapping.model_dump(mode="json")
    assert _project(optimizer_moments="bf16").mapping.model_dump(mode="json")["optimizer_moments"] == "bf16"


@pytest.mark.parametrize("zero", [0, 1])
def test_both_engines_agree(zero: int):
    case = {"optimizer_moments": "bf16", "dp": 4, "global_batch": 16, "zero": zero}
    analytic = simulate(_project(engine="analytic", **case))
    event = simulate(_project(engine="event", **case))
    assert_engines_agree(analytic, event)


@pytest.mark.parametrize("moments", ["fp32", "bf16"])
def test_search_agrees_with_the_engine(moments: str):
    """The search's evaluator counts the optimizer state and times the step as the plan does."""
    assert_search_matches_engine(_project(dp=4, global_batch=16), Candidate(1, 2, 4, 1, zero=1),
                                 optimizer_moments=moments)


def test_a_search_candidate_without_zero_runs_fp32_state():
    """Megatron-Core runs the precision-aware optimizer only with the distributed optimizer: a ZeRO-0 candidate
    of a project with bf16 moments is costed (and written) with fp32 ones, as the engine runs that mapping."""
    base = _project(dp=4, global_batch=16, optimizer_moments="bf16")
    c = Candidate(1, 2, 4, 1, zero=0)
    assert c.mapping(16, base.mapping).optimizer_moments == "fp32"
    assert_search_matches_engine(base, c, keep_base=True)


@pytest.mark.parametrize(
    ("project", "says"),
    [
        (_project(optimizer="sgd", optimizer_moments="bf16"), "Adam's"),
        (_project(dtype="fp32", optimizer_moments="bf16"), "mixed precision"),
        (_project(mode="infer", global_batch=1, optimizer_moments="bf16"), "training only"),
        (_project(dp=4, global_batch=16, zero=0, optimizer_moments="bf16"), "distributed optimizer"),
    ],
    ids=["sgd", "fp32", "infer", "zero0"],
)
def test_refused_outside_mixed_precision_adam(project: Project, says: str):
    problems = [p for p in check_project(project) if p.path == FIELD]
    assert problems and any(says in p.reason for p in problems)


def test_accepted_with_fp8_training():
    assert check_project(_project(dtype="fp8", optimizer_moments="bf16")) == []


H100_FLAGS = ["--system", "dgx-h100", "--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads", "16",
              "--seq-len", "512", "--vocab", "8192", "--dp", "2", "--global-batch", "4", "--zero", "1", "--json"]


def test_cli_flag(capsys):
    assert main(["run", *H100_FLAGS, "--dtype", "fp32", "--optimizer-moments", "bf16"]) == 2
    assert FIELD in capsys.readouterr().err
    assert main(["run", *H100_FLAGS]) == 0
    off = json.loads(capsys.readouterr().out)["memory_breakdown_bytes"]["optimizer"]
    assert main(["run", *H100_FLAGS, "--optimizer-moments", "bf16"]) == 0
    on = json.loads(capsys.readouterr().out)["memory_breakdown_bytes"]["optimizer"]
    assert on == pytest.approx(off * (MASTER + 2 * 2.0) / (MASTER + 2 * 4.0), rel=1e-9)  # 8 B against 12 B


def test_each_step_kind_has_its_own_byte_count():
    """The plan and the search carry a step as its kind (``residency.AdamStep``), read from the model state:
    its bytes per parameter are the four kinds' counted by hand, and mixed precision (an fp32 master copy)
    is told from the optimizer state whatever the moments' width (bf16 moments' 4 + 2 + 2 B is not fp32's 8)."""
    from tilewright.engine.ir.project import DType, Optimizer
    from tilewright.engine.perf.memory import bytes_per_param
    from tilewright.engine.plan.residency import AdamStep, adam_step, adam_step_bytes

    by_hand = {
        (True, "fp32"): _step_bytes(4.0),
        (True, "bf16"): _step_bytes(2.0),
        (False, "fp32"): 2 * 2 * 4.0 + 4 + 4 + 4,  # moments read + written, weights read + written, gradient read
        (False, "bf16"): 2 * 2 * 4.0 + 4 + 4 + 4 + 2 * BF16_CAST,  # the same through fp32 copies
    }
    for (mixed, moments), nbytes in by_hand.items():
        assert adam_step_bytes(mixed, moments) == AdamStep(mixed, moments).bytes_per_param == nbytes
        weights, dtype = (2, DType.bf16) if mixed else (4, DType.fp32)
        state = bytes_per_param(weights, mixed, Optimizer.adam, dtype, moments=moments)
        assert adam_step(state, moments) == AdamStep(mixed, moments)


def test_the_multilevel_mapper_counts_the_moments_too():
    """``tilewright map``'s programme takes the optimizer state and the step's bytes from the same functions
    as the plan: bf16 moments are 4 B per parameter fewer and the step streams their casts on top."""
    from tilewright.engine.plan.residency import adam_step_bytes
    from tilewright.engine.search.multilevel.map import build_problem

    base = _project(dp=8, global_batch=8)  # the mapper lays out every device of the DGX node
    lean = base.model_copy(update={"mapping": base.mapping.model_copy(update={"optimizer_moments": "bf16"})})
    (wide, _, _), (narrow, _, _) = build_problem(base, 40, []), build_problem(lean, 40, [])
    assert wide.state_per_param[2] - narrow.state_per_param[2] == 4
    assert (wide.optimizer_bytes_per_param, narrow.optimizer_bytes_per_param) == (
        adam_step_bytes(True), adam_step_bytes(True, "bf16"))


def test_a_hypar_partition_refuses_bf16_moments():
    from tilewright.engine.io import load_project

    project = load_project("presets/projects/hypar-vgg-a-partitioned.json")
    lean = project.model_copy(update={"mapping": project.mapping.model_copy(update={"optimizer_moments": "bf16"})})
    problems = check_project(lean)
    assert {p.path for p in problems} == {"mapping.optimizer_moments"}
    assert any("HyPar partition" in p.reason for p in problems)
