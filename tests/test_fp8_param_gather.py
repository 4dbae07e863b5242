"""Megatron-Core's ``--fp8-param-gather`` (``mapping.fp8_param_gather``, ``perf.memory.keeps_bf16_params``).

An fp8 training run without it keeps the model's parameters in bf16 beside Transformer Engine's fp8 weight
copy, and the distributed optimizer all-gathers those bf16 parameters after its step; with it the parameters
are fp8 tensors only and the gather moves 1 B per parameter. Expected bytes and seconds are derived here from
the parameter count and the dgx-h100 preset's NVSwitch figures (450 GB/s per direction, efficiency 0.8): a
ring all-gather of B bytes per rank over p ranks sends (p − 1)/p · B per rank at the achieved bandwidth, plus
a start-up latency that does not depend on B (it cancels between two gathers of different sizes).
"""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main
from tilewright.engine.engines.analytic.engine import AnalyticEngine
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.checks import check_project
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

from tests.agreement import assert_engines_agree, assert_search_matches_engine, engine_result

DP = 8  # one DGX H100 node: every rank one NVSwitch hop from the others
NVLINK_BYTES_PER_S = 450e9 * 0.8  # dgx-h100 preset: NVLink4 450 GB/s per direction, efficiency 0.8
GPT = GPTSpec(name="gpt-fp8pg", layers=4, hidden=2048, heads=16, seq_len=1024, vocab=32000)
FIELD = "mapping.fp8_param_gather"


def _project(dtype: str = "fp8", mode: str = "train", engine: str = "analytic", **mapping) -> Project:
    m = {"tp": 1, "pp": 1, "dp": DP, "micro_batch": 1, "global_batch": DP * 4, "zero": 1} | mapping
    return Project(name="fp8pg", hardware=load_system("dgx-h100"), workload=GPT, mapping=Mapping(**m),
                   run=RunSettings(dtype=dtype, mode=mode, engine=engine, contention=False))


def _params() -> float:
    """Every parameter of the model: tp 1, pp 1, so one device holds them all."""
    return sum(op.params for op in build_workload(GPT).ops())


def _vocab_params(layers: set[int] | None = None, tp: int = 1) -> float:
    """Per device, the parameters of the layers around the vocabulary (the embeddings, the head's final norm and
    logits) among ``layers`` (None: all): plain bf16 parameters under fp8 training (``plan.device_layers.
    vocab_layers``), 2 B held and gathered with the flag or without."""
    from tilewright.engine.perf.memory import params_on_device

    graph = build_workload(GPT)
    return sum(params_on_device(graph.layer_ops(li.index), tp) for li in graph.layers
               if li.name in ("embedding", "head") and (layers is None or li.index in layers))


def _gather_s(project: Project) -> float:
    plan = make_plan(project)
    return plan.zero_gather(0).time(plan.hw)


def test_the_gather_moves_one_byte_per_parameter_instead_of_two():
    """Halving the gather's bytes saves the ring's bandwidth time of P bytes: (p − 1)/p · P / bandwidth, P the
    fp8 layers' parameters (the embedding and head stay bf16 parameters)."""
    assert check_project(_project(fp8_param_gather=True)) == []
    off, on = _gather_s(_project()), _gather_s(_project(fp8_param_gather=True))
    fp8 = _params() - _vocab_params()
    assert off - on == pytest.approx((DP - 1) / DP * fp8 * 1.0 / NVLINK_BYTES_PER_S, rel=1e-6)
    # the same bytes as a bf16 run's gather without the flag (bf16 parameters), not more
    assert off == pytest.approx(_gather_s(_project(dtype="bf16")), rel=1e-9)


@pytest.mark.parametrize("mapping", [{"pp": 2, "dp": 4}, {"tp": 2, "dp": 4, "sequence_parallel": True}])
def test_each_stage_gathers_its_own_parameters_at_one_byte(mapping):
    """Per stage and tensor rank, the gather's bandwidth saving is that device's parameters × 1 B over its dp
    ring: the parameters per device add up to the model's (tp-split weights once per tensor rank), plus with
    pp > 1 the last stage's copy of the tied word embedding (vocab × hidden over tp, ``plan.tied``). The
    embedding and head layers' parameters, the copy among them, are bf16 parameters: no saving there."""
    off, on = make_plan(_project(**mapping)), make_plan(_project(fp8_param_gather=True, **mapping))
    dp = mapping["dp"]
    tp = mapping.get("tp", 1)
    tied = GPT.vocab * GPT.hidden / tp if mapping.get("pp", 1) > 1 else 0.0
    held = 0.0
    for r, st in enumerate(on.stages):
        saved = off.zero_gather(r).time(off.hw) - on.zero_gather(r).time(on.hw)
        layers = {i for idx in st.chunk_layers.values() for i in idx}
        bf16 = _vocab_params(layers, tp) + (tied if r == len(on.stages) - 1 else 0.0)
        assert saved == pytest.approx((dp - 1) / dp * (st.params - bf16) / NVLINK_BYTES_PER_S, rel=1e-6)
        held += st.params
    replicated = sum(op.params for op in build_workload(GPT).ops() if op.split.value not in
                     ("column", "row", "heads", "vocab"))
    assert held == pytest.approx((_params() - replicated) / tp + replicated + tied, rel=1e-9)


def test_weights_memory_drops_the_bf16_copy():
    """ZeRO-1 keeps whole weights on every rank: without the flag 2 B (bf16 parameters) + 1 B (fp8 copy) per
    parameter of the fp8 layers, with it 1 B; the embedding and head 2 B either way; gradients, optimizer state
    and activations do not move."""
    off, on = simulate(_project()), simulate(_project(fp8_param_gather=True))
    bf16 = _vocab_params()
    p = _params() - bf16
    w_off, w_on = off.memory_breakdown_bytes["weights"], on.memory_breakdown_bytes["weights"]
    assert w_on == pytest.approx(p * 1.0 + bf16 * 2.0, rel=1e-9)
    assert w_off == pytest.approx(p * 3.0 + bf16 * 2.0, rel=1e-9)
    assert off.peak_memory_bytes - on.peak_memory_bytes == pytest.approx(2.0 * p, rel=1e-9)
    for k in ("gradients", "optimizer", "activations"):
        assert off.memory_breakdown_bytes[k] == on.memory_breakdown_bytes[k], k


def test_runs_without_fp8_training_are_untouched():
    """bf16 training keeps 2 B weights and gathers 2 B; fp8 inference holds only the fp8 weights (no optimizer
    writes bf16 parameters there); the field stays out of saved files at its default."""
    p = _params()
    bf16 = make_plan(_project(dtype="bf16"))
    assert bf16.stages[0].state.weights == pytest.approx(2.0 * p, rel=1e-9)
    infer = make_plan(_project(mode="infer", dp=1, zero=0, global_batch=1))
    assert infer.stages[0].state.weights == pytest.approx(1.0 * p, rel=1e-9)
    assert "fp8_param_gather" not in _project().mapping.model_dump(mode="json")
    assert _project(fp8_param_gather=True).mapping.model_dump(mode="json")["fp8_param_gather"] is True


@pytest.mark.parametrize("overlap", [False, True])
def test_both_engines_agree(overlap):
    """The gather is one collective of the plan both engines time (whole, or its exposed buckets)."""
    case = {"fp8_param_gather": True, "overlap_grad_reduce": overlap, "overlap_param_gather": overlap}
    analytic = simulate(_project(engine="analytic", **case))
    event = simulate(_project(engine="event", **case))
    assert_engines_agree(analytic, event)


@pytest.mark.parametrize("flag", [False, True])
@pytest.mark.parametrize("overlap", [False, True])
def test_search_agrees_with_the_engine(flag: bool, overlap: bool):
    """The search's evaluator times the tail's gather (whole, or with overlap_param_gather its exposed part)
    and counts the weights as the plan does, with the flag and without (checked: the two differ). ZeRO-1 without
    overlapped gradient reduction: what the fast evaluator times itself (``Candidate.extended``)."""
    p = assert_search_matches_engine(_project(), Candidate(1, 2, 4, 1, zero=1), fp8_param_gather=flag,
                                     overlap_param_gather=overlap)
    want = engine_result(p)
    other = p.model_copy(update={"mapping": p.mapping.model_copy(update={"fp8_param_gather": not flag})})
    assert AnalyticEngine().run(make_plan(other)).peak_memory_bytes != pytest.approx(want.peak_memory_bytes)


@pytest.mark.parametrize(
    ("project", "says"),
    [
        (_project(dtype="bf16", fp8_param_gather=True), "needs fp8 weights"),
        (_project(zero=0, fp8_param_gather=True), "distributed optimizer"),
        (_project(mode="infer", dp=1, zero=1, global_batch=1, fp8_param_gather=True), "training only"),
        (_project(fp8_param_gather=True, formats={"fp8_scaling": "mxfp8"}), "'mxfp8'"),
    ],
    ids=["bf16", "zero0", "infer", "mxfp8"],
)
def test_refused_where_megatron_cannot_run_it(project: Project, says: str):
    problems = [p for p in check_project(project) if p.path == FIELD]
    assert problems and any(says in p.reason for p in problems)


@pytest.mark.parametrize("scaling", ["delayed", "tensor", "block"])
def test_accepted_with_the_scalings_te_casts_master_weights_into(scaling: str):
    """TE's ``cast_master_weights_to_fp8`` handles Float8Tensor (delayed, current) and Float8BlockwiseQTensor."""
    p = _project(fp8_param_gather=True, formats={"fp8_scaling": scaling})
    assert [q for q in check_project(p) if q.path == FIELD] == []


H100_FLAGS = ["--system", "dgx-h100", "--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads", "16",
              "--seq-len", "512", "--vocab", "8192", "--dp", "2", "--global-batch", "4", "--json"]


def test_cli_flag(capsys):
    assert main(["run", *H100_FLAGS, "--dtype", "bf16", "--zero", "1", "--fp8-param-gather"]) == 2
    assert FIELD in capsys.readouterr().err
    assert main(["run", *H100_FLAGS, "--dtype", "fp8", "--zero", "1"]) == 0
    off = json.loads(capsys.readouterr().out)["memory_breakdown_bytes"]["weights"]
    assert main(["run", *H100_FLAGS, "--dtype", "fp8", "--zero", "1", "--fp8-param-gather"]) == 0
    on = json.loads(capsys.readouterr().out)["memory_breakdown_bytes"]["weights"]
    # fp8 layers: 2 B bf16 + 1 B fp8 against 1 B; embedding and head (word and position tables, final norm; the
    # logits tied): 2 B either way
    bf16 = 8192 * 1024 + 512 * 1024 + 2 * 1024
    fp8 = (off - on) / 2.0
    assert on == pytest.approx(fp8 + 2.0 * bf16, rel=1e-9)


def test_a_zero_0_candidate_drops_the_flag_so_its_project_checks_clean():
    """The search may try ZeRO 0 on a project that gathers fp8 weights: the candidate's mapping leaves the flag
    off (there is no post-step gather without a sharded optimizer), so applying it gives a valid project whose
    memory is what the search counted."""
    base = _project(fp8_param_gather=True)
    for zero in (0, 1):
        mapping = Candidate(1, 1, DP, 1, zero=zero).mapping(base.mapping.global_batch, base.mapping)
        assert mapping.fp8_param_gather is (zero == 1)
        assert check_project(base.model_copy(update={"mapping": mapping})) == []
