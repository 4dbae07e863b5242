"""A column-parallel linear's input-gradient collective hidden behind its own weight-gradient GEMM
(``plan.dgrad_overlap``; Megatron-LM ``--async-tensor-model-parallel-allreduce``, Megatron-Core
``LinearWithGradAccumulationAndAsyncCommunication``, Transformer Engine ``_Linear.backward``): one all-reduce
(reduce-scatter with sequence parallelism) per run of column-parallel ops, of mb·s·h elements, showing only the
time the run's weight gradients cannot cover; off by default for Megatron-LM v2.x's full-recompute GPU runs."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.ops import OpKind, TensorSplit
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.plan.dgrad_overlap import exposed, overlaps
from tilewright.engine.plan.passes import PassContext, backward_pass
from tilewright.engine.search.op_settings import OpSettings
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan
from tilewright.engine.workloads import build_workload

from tests.agreement import assert_engines_agree, assert_search_matches_engine, engine_result

GPT = GPTSpec(name="gpt-dgrad", layers=2, hidden=4096, heads=32, seq_len=2048, vocab=32000)
LLAMA = LlamaSpec(name="llama-dgrad", layers=2, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000,
                  seq_len=2048)
TP = 8


def _project(spec, sp: bool = False, dgrad: bool | None = None, recompute: str = "none", overlap: bool = False,
             system: str = "dgx-h100", engine: str = "analytic") -> Project:
    m = Mapping(tp=TP, pp=1, dp=1, micro_batch=1, global_batch=4, sequence_parallel=sp, overlap_dgrad_comm=dgrad,
                recompute=recompute, overlap_tp_comm=overlap)
    return Project(name="dgrad", hardware=load_system(system), workload=spec, mapping=m,
                   run=RunSettings(dtype="bf16", mode="train", engine=engine, contention=False))


def _context(p: Project, seconds=None) -> tuple[PassContext, list]:
    """A stage's pass context as ``build_plan`` makes it (``OpSettings.context``), the input-gradient collectives
    timed by ``seconds`` (None: they block); and the transformer blocks' ops."""
    wl = build_workload(p.workload)
    hw = elaborate(p.hardware, devices_needed=TP)
    d = hw.devices[0]
    dev = device_model(d.compute, d.memories, None, p.run.dtype)
    ctx = OpSettings.of(p, wl).context(dev, 1, p.mapping.tp, p.mapping.sequence_parallel)
    ctx.dgrad_overlap = seconds is not None
    ctx.dgrad_seconds = seconds
    return ctx, [wl.layer_ops(i) for i in wl.block_layers]


def _column_runs(ops) -> list[list]:
    """Runs of consecutive weighted column-parallel ops, in backward order."""
    runs, run = [], []
    for op in reversed(ops):
        if op.split is TensorSplit.column and op.params > 0 and op.kind in (OpKind.matmul, OpKind.fc):
            run.append(op)
        elif run:
            runs.append(run)
            run = []
    return runs + ([run] if run else [])


def _reductions(ps, kind: str) -> list[float]:
    return [seg.comm[1] for seg in ps.segments if seg.comm and seg.comm[0] == kind]


@pytest.mark.parametrize("sp", [False, True], ids=["all-reduce", "sequence-parallel"])
@pytest.mark.parametrize("spec", [GPT, LLAMA], ids=["gpt", "llama-swiglu"])
def test_each_column_runs_reduction_shows_only_what_its_weight_gradients_cannot_cover(spec, sp):
    """Derived by hand for one layer: the reduction of a run carries mb·s·h elements in bf16 (the whole
    sequence's input gradient); its time on a made-up group is latency + bytes / bandwidth; its run's wgrads are
    half of each op's backward (equal FLOPs to the dgrad), stretched by the 24 of the H100's 132 SMs the NCCL
    collective holds beside them (``perf.comm_sm``); what shows is the bytes that take the uncovered time."""
    kind = "reduce-scatter" if sp else "all-reduce"
    bw, lat = 20e9, 30e-6
    seconds = lambda k, nbytes: lat + nbytes / bw  # noqa: E731
    p = _project(spec, sp=sp)
    on, blocks = _context(p, seconds)
    off, _ = _context(p, None)
    for ops in blocks:
        shown, whole = _reductions(backward_pass([ops], on), kind), _reductions(backward_pass([ops], off), kind)
        runs = _column_runs(ops)
        assert len(runs) == 2  # qkv; fc1 (gpt) or gate and up (llama)
        nbytes = spec.seq_len * spec.hidden * 2.0  # mb 1 · s · h · bf16
        assert all(op.in_elems == spec.seq_len * spec.hidden for run in runs for op in run)
        expected = []
        for run in runs:
            wgrad = 0.0
            for op in run:
                assert op.backward_flops == pytest.approx(2 * op.flops)  # dgrad and wgrad: equal GEMMs
                t = op_time(op, on.dev, 1, TP, sp, True, on.elem_bytes, formats=on.formats)
                wgrad += t.busy_s / 2
            assert (on.dev.compute.gemm_units, on.dev.compute.collective_sms) == (132, 24)
            uncovered = lat + nbytes / bw - wgrad * 132 / (132 - 24)
            expected.append(max(0.0, (uncovered - lat) * bw) if uncovered > lat / 2 else 0.0)
        # the column runs' reductions are the last `len(runs)` of their kind in backward order; the rest
        # (a row-parallel op's gather is not a reduction) are unchanged
        assert whole[-2:] == pytest.approx([nbytes, nbytes])
        assert shown[:-2] == pytest.approx(whole[:-2])
        got = [b for b in shown[-2:] if b > 0]
        assert got == pytest.approx([e for e in expected if e > 0], rel=1e-6)
        assert any(e > 0 for e in expected) and any(e < nbytes for e in expected)  # partly hidden at 20 GB/s


def test_a_covered_reduction_shows_nothing_but_keeps_its_call():
    p = _project(GPT)
    on, blocks = _context(p, lambda k, nbytes: 1e-9)
    off, _ = _context(p, None)
    ps, base = backward_pass([blocks[0]], on), backward_pass([blocks[0]], off)
    assert sum(s.comm[1] for s in ps.segments if s.comm) < sum(s.comm[1] for s in base.segments if s.comm)
    assert sum(s.host_s for s in ps.segments) == pytest.approx(sum(s.host_s for s in base.segments))


def test_delayed_weight_gradients_cover_nothing():
    """With ``delay_wgrad_compute`` the wgrads run later (beside the all-to-all): the reduction blocks."""
    p = _project(GPT)
    on, blocks = _context(p, lambda k, nbytes: nbytes / 20e9)
    off, _ = _context(p, None)
    on.delay_wgrad = True
    assert _reductions(backward_pass([blocks[0]], on), "all-reduce") == \
        _reductions(backward_pass([blocks[0]], off), "all-reduce")


def test_exposure_is_the_collectives_time_beyond_its_cover():
    linear = lambda nbytes: nbytes * 1e-9  # noqa: E731  1 GB/s
    assert exposed(linear, 4e9, 1.0) == pytest.approx(3e9)  # 4 s collective, 1 s covered
    assert exposed(linear, 4e9, 4.0) == 0.0
    assert exposed(linear, 0.0, 0.0) == 0.0


def test_default_by_era():
    gpu = load_system("dgx-a100")
    grid = load_system("wormhole-n150")
    gpu_c = elaborate(gpu, devices_needed=1).devices[0].compute
    grid_c = elaborate(grid, devices_needed=1).devices[0].compute
    assert not overlaps(None, Recompute.full, gpu_c, True)  # Megatron-LM v2.x, --checkpoint-activations
    assert overlaps(None, Recompute.selective, gpu_c, True)  # Megatron-Core
    assert overlaps(None, Recompute.none, gpu_c, True)
    # devices no GPU framework drives: blocking unless set (no source says their runtimes overlap it)
    assert not overlaps(None, Recompute.full, grid_c, True) and not overlaps(None, Recompute.none, grid_c, True)
    assert overlaps(True, Recompute.none, grid_c, True)
    assert overlaps(True, Recompute.full, gpu_c, True) and not overlaps(False, Recompute.none, gpu_c, True)


def _tp_comm(p: Project) -> float:
    return engine_result(p).time_breakdown_s.get("tp_comm", 0.0)


def test_plan_default_follows_the_era_and_says_so():
    full = make_plan(_project(GPT, recompute="full"))
    assert any("overlap_dgrad_comm" in n for n in full.notes)  # the default decided: the result says so
    assert not any("overlap_dgrad_comm" in n for n in make_plan(_project(GPT, recompute="full", dgrad=False)).notes)
    assert not any("overlap_dgrad_comm" in n for n in make_plan(_project(GPT)).notes)
    assert _tp_comm(_project(GPT, recompute="full")) == pytest.approx(_tp_comm(_project(GPT, recompute="full",
                                                                                         dgrad=False)))
    assert _tp_comm(_project(GPT)) < _tp_comm(_project(GPT, dgrad=False))
    assert _tp_comm(_project(GPT, recompute="full", dgrad=True)) < _tp_comm(_project(GPT, recompute="full"))


def test_the_default_note_names_the_device_not_the_era_off_gpus():
    """On a device no GPU framework drives, the collectives block because nothing is sourced to overlap them, not
    because of full recompute on GPUs: the note said the latter on a wafer whose project recomputes selectively."""
    from tilewright.engine.io.presets import load_project_preset

    chiplet = load_project_preset("chiplet-bert-large")  # a Simba-like chiplet mesh at tp > 1
    note = [n for n in make_plan(chiplet).notes if "overlap_dgrad_comm" in n]
    assert len(note) == 1 and "no GPU framework" in note[0] and "full recompute on GPUs" not in note[0]
    gpu = [n for n in make_plan(_project(GPT, recompute="full")).notes if "overlap_dgrad_comm" in n]
    assert len(gpu) == 1 and "full recompute on GPUs" in gpu[0]


def test_userbuffers_are_not_counted_twice():
    """Under ``overlap_tp_comm`` Transformer Engine's bulk overlap already hides the reduce-scatter
    (``plan.tp_overlap``): turning this on changes nothing."""
    a = engine_result(_project(LLAMA, sp=True, overlap=True, dgrad=True))
    b = engine_result(_project(LLAMA, sp=True, overlap=True, dgrad=False))
    assert a.iteration_time_s == pytest.approx(b.iteration_time_s, rel=1e-12)


@pytest.mark.parametrize("sp", [False, True], ids=["all-reduce", "sequence-parallel"])
def test_engines_and_search_agree(sp):
    p = _project(LLAMA, sp=sp)
    assert _tp_comm(p) < _tp_comm(_project(LLAMA, sp=sp, dgrad=False))
    assert_engines_agree(engine_result(p), engine_result(_project(LLAMA, sp=sp, engine="event")))
    c = Candidate(tp=TP, pp=1, dp=1, micro_batch=1, sequence_parallel=sp)
    assert_search_matches_engine(_project(LLAMA, sp=False), c)
    c = Candidate(tp=TP, pp=1, dp=1, micro_batch=1, sequence_parallel=sp, recompute=Recompute.full)
    assert_search_matches_engine(_project(LLAMA, sp=False), c)  # full recompute: the default blocks
    assert_search_matches_engine(_project(LLAMA, sp=False), c, overlap_dgrad_comm=True)  # the user's choice


CLI = ["run", "--system", "dgx-a100", "--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads", "8",
       "--seq-len", "1024", "--vocab", "4096", "--engine", "analytic", "--json", "--quiet", "--devices", "8",
       "--global-batch", "8"]


def _cli_time(capsys: pytest.CaptureFixture[str], *args: str) -> float:
    assert main([*CLI, *args]) == 0
    return json.loads(capsys.readouterr().out)["iteration_time_s"]


def test_the_command_line_sets_it_and_refuses_it_without_a_tensor_group(capsys):
    tp8 = ("--tp", "8", "--recompute", "full")
    default = _cli_time(capsys, *tp8)
    assert _cli_time(capsys, *tp8, "--overlap-dgrad-comm", "off") == default  # the era's default: blocking
    assert _cli_time(capsys, *tp8, "--overlap-dgrad-comm", "on") < default
    assert main([*CLI, "--dp", "8", "--overlap-dgrad-comm", "on"]) == 2
    err = capsys.readouterr().err
    assert "--overlap-dgrad-comm:" in err and "tp is 1" in err
