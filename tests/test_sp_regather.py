"""Sequence parallelism's re-gather of a column-parallel op's input for its weight gradient (``plan.sp_regather``;
Korthikanti et al. 2022 §4.2.2, Megatron-Core ``LinearWithGradAccumulationAndAsyncCommunication.backward``): one
all-gather of mb·s·h elements per run of column-parallel ops, hidden behind the run's data-gradient GEMMs, the
rest shown as tensor-parallel communication; none without sequence parallelism."""

from __future__ import annotations

import pytest
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.ops import OpKind, TensorSplit
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.plan.launch import collective_host_seconds
from tilewright.engine.plan.passes import PassContext, backward_pass
from tilewright.engine.plan.sp_regather import exposed_bytes, regathers
from tilewright.engine.search.op_settings import OpSettings
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan
from tilewright.engine.workloads import build_workload

from tests.agreement import assert_engines_agree, assert_search_matches_engine, engine_result

GPT = GPTSpec(name="gpt-sp", layers=2, hidden=4096, heads=32, seq_len=2048, vocab=32000)
LLAMA = LlamaSpec(name="llama-sp", layers=2, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000,
                  seq_len=2048)
TP = 8


def _project(spec, sp: bool = True, overlap: bool = False, tp: int = TP, engine: str = "analytic") -> Project:
    m = Mapping(tp=tp, pp=1, dp=1, micro_batch=1, global_batch=4, sequence_parallel=sp, overlap_tp_comm=overlap)
    return Project(name="sp-regather", hardware=load_system("dgx-h100"), workload=spec, mapping=m,
                   run=RunSettings(dtype="bf16", mode="train", engine=engine, contention=False))


def _context(p: Project, seconds=None, overlap=None) -> tuple[PassContext, list]:
    """A stage's pass context as ``build_plan`` makes it (``OpSettings.context``), the re-gather timed by
    ``seconds``; and the transformer blocks' ops."""
    wl = build_workload(p.workload)
    hw = elaborate(p.hardware, devices_needed=TP)
    d = hw.devices[0]
    dev = device_model(d.compute, d.memories, None, p.run.dtype)
    ctx = OpSettings.of(p, wl).context(dev, 1, p.mapping.tp, p.mapping.sequence_parallel)
    ctx.regather_seconds = seconds
    ctx.tp_seconds = overlap
    blocks = [wl.layer_ops(i) for i in wl.block_layers]
    return ctx, blocks


def _gathers(ps) -> list[float]:
    return [seg.comm[1] for seg in ps.segments if seg.comm and seg.comm[0] == "all-gather"]


def _runs(ops) -> list[list]:
    """Runs of consecutive weighted column-parallel ops, in backward order."""
    runs, run = [], []
    for op in reversed(ops):
        if op.split is TensorSplit.column and op.params > 0 and op.kind in (OpKind.matmul, OpKind.fc):
            run.append(op)
        elif run:
            runs.append(run)
            run = []
    return runs + ([run] if run else [])


@pytest.mark.parametrize("spec", [GPT, LLAMA], ids=["gpt", "llama-swiglu"])
def test_one_gather_per_column_run_carries_its_whole_input_less_what_its_data_gradients_hide(spec):
    bw = 50e9  # bytes/s of a made-up tensor group: the gather's time is its bytes over it
    seconds = lambda kind, nbytes: nbytes / bw  # noqa: E731
    p = _project(spec)
    ctx, blocks = _context(p, seconds)
    bare, _ = _context(p, None)
    for ops in blocks:
        with_regather = _gathers(backward_pass([ops], ctx))
        without = _gathers(backward_pass([ops], bare))
        runs = _runs(ops)
        assert len(runs) == 2  # qkv; fc1 (gpt) or gate and up (llama): one gathered input each
        expected = []
        for run in runs:
            nbytes = spec.seq_len * spec.hidden * 2.0  # mb 1 · s · h · bf16: the whole sequence's input
            assert all(op.in_elems == spec.seq_len * spec.hidden for op in run)
            dgrad = 0.0
            for op in run:
                assert op.backward_flops == pytest.approx(2 * op.flops)  # data and weight gradient: equal GEMMs
                t = op_time(op, ctx.dev, 1, TP, True, True, ctx.elem_bytes, formats=ctx.formats)
                dgrad += t.busy_s / 2
            # the NCCL gather holds 24 of the H100's 132 SMs beside the data gradients (``perf.comm_sm``)
            assert (ctx.dev.compute.gemm_units, ctx.dev.compute.collective_sms) == (132, 24)
            expected.append(max(0.0, nbytes - dgrad * 132 / (132 - 24) * bw))
        added = sorted(with_regather)
        for b in without:
            added.remove(b)
        assert sorted(added) == pytest.approx(sorted(e for e in expected if e > 0), rel=1e-9)
        assert any(e > 0 for e in expected)  # at 50 GB/s the gathers outlast their data gradients


def test_a_gather_the_data_gradient_covers_shows_nothing_but_its_call():
    p = _project(GPT)
    ctx, blocks = _context(p, lambda kind, nbytes: 1e-9)
    bare, _ = _context(p, None)
    ops = blocks[0]
    ps, base = backward_pass([ops], ctx), backward_pass([ops], bare)
    assert _gathers(ps) == _gathers(base)
    host = sum(s.host_s for s in ps.segments) - sum(s.host_s for s in base.segments)
    assert host == pytest.approx(2 * collective_host_seconds(ctx.dev.compute))  # two NCCL calls


def test_under_userbuffers_the_gather_is_driven_by_the_gemm_without_a_call():
    p = _project(GPT, overlap=True)
    tiny = lambda kind, nbytes: 1e-9  # noqa: E731
    ctx, blocks = _context(p, tiny, overlap=tiny)
    bare, _ = _context(p, None, overlap=tiny)
    ops = blocks[0]
    ps, base = backward_pass([ops], ctx), backward_pass([ops], bare)
    assert sum(s.host_s for s in ps.segments) == pytest.approx(sum(s.host_s for s in base.segments))


def test_exposure_is_the_gathers_time_beyond_its_cover():
    linear = lambda kind, nbytes: nbytes * 1e-9  # noqa: E731  1 GB/s
    assert exposed_bytes(linear, 4e9, 1.0) == pytest.approx(3e9)  # 4 s gather, 1 s covered
    assert exposed_bytes(linear, 4e9, 4.0) == 0.0
    assert exposed_bytes(linear, 0.0, 0.0) == 0.0


def test_only_a_sequence_parallel_column_op_regathers():
    ops = build_workload(GPT).layer_ops(1)
    col = next(op for op in ops if op.split is TensorSplit.column and op.params > 0)
    assert regathers(col, True, True, TP, False)
    assert not regathers(col, True, False, TP, False)  # the forward kept the whole input
    assert not regathers(col, True, True, 1, False)
    assert not regathers(col, True, True, TP, True)  # 2-D tensor parallelism: no sequence shards
    assert not regathers(col, False, True, TP, False)


def test_plan_charges_it_only_with_sequence_parallelism():
    """The plan's backward carries the re-gathers with sequence parallelism (its tp comm grows past the row
    ops' gathers), not without."""
    on, off = make_plan(_project(GPT, sp=True)), make_plan(_project(GPT, sp=False))
    assert off.stages[0].passes[(0, "B")] is not None
    assert not any(s.comm and s.comm[0] == "all-gather" for s in off.stages[0].passes[(0, "B")].segments)
    ps = on.stages[0].passes[(0, "B")]
    blocks = len(build_workload(GPT).block_layers)
    assert len(_gathers(ps)) >= 2 * blocks  # proj and fc2's output-gradient gathers at least


@pytest.mark.parametrize("overlap", [False, True], ids=["nccl", "userbuffers"])
def test_engines_and_search_agree_on_the_regather(overlap):
    p = _project(LLAMA, overlap=overlap)
    assert_engines_agree(engine_result(p), engine_result(_project(LLAMA, overlap=overlap, engine="event")))
    if not overlap:  # the search times userbuffers through the plan itself (``search.parallel.extended``)
        c = Candidate(tp=TP, pp=1, dp=1, micro_batch=1, sequence_parallel=True)
        assert_search_matches_engine(_project(LLAMA, sp=False), c)
