"""Megatron-LM's training step outside the layers (``engine.plan.train_step``): host synchronisations per pass
and the mixed-precision optimizer's extra passes, drains and flag all-reduces. Expected values are derived
from the preset's constants and Megatron's code, not read back from the plan."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.hardware import Component
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan, simulate

from tests.agreement import assert_search_matches_engine

LAYERS, HIDDEN, HEADS, SEQ, VOCAB = 4, 1024, 16, 1024, 51200


def _system(sync_s: float | None = None, **host: float) -> Component:
    """dgx-a100, optionally with another ``host_sync_s`` (or other host costs, ``host``) on its GPUs."""
    system = load_system("dgx-a100")
    if sync_s is not None:
        host["host_sync_s"] = sync_s
    if not host:
        return system
    gpu = system.children[0].children[0]
    gpu = gpu.model_copy(update={"compute": gpu.compute.model_copy(update=host)})
    node = system.children[0].model_copy(update={"children": [gpu]})
    return system.model_copy(update={"children": [node]})


def _project(tp: int = 2, pp: int = 1, dp: int = 1, mb: int = 1, gb: int = 8, dtype: str = "fp16",
             engine: str = "analytic", sync_s: float | None = None, master: bool = True, zero: int = 0,
             host: dict[str, float] | None = None) -> Project:
    spec = GPTSpec(name="small", layers=LAYERS, hidden=HIDDEN, heads=HEADS, seq_len=SEQ, vocab=VOCAB)
    return Project(
        name="small", hardware=_system(sync_s, **(host or {})), workload=spec,
        mapping=Mapping(tp=tp, pp=pp, dp=dp, micro_batch=mb, global_batch=gb, recompute="full", zero=zero),
        run=RunSettings(dtype=dtype, engine=engine, contention=False, master_weights_fp32=master),
    )


def _gpu_compute():
    return load_system("dgx-a100").children[0].children[0].compute


def _drain_s() -> float:
    """One drain: the host's wake-up and relaunch (host_sync_s) plus the next kernel's dispatch."""
    c = _gpu_compute()
    return c.host_sync_s + c.host_dispatch_s


def _flag_allreduce_s(n: int) -> float:
    """A 4-byte all-reduce over n GPUs of one NVSwitch node: NCCL's LL protocol, its base latency plus one
    NVLink hop per ring step, 2(n − 1) steps (the preset's LL row: 6.6 µs + 0.6 µs per step)."""
    return 6.6e-6 + 2 * (n - 1) * 0.6e-6


def test_preset_sync_cost_is_the_blog_difference():
    """The CUDA Graphs blog's kernel: 9.6 µs per launch with a sync after each, 3.8 µs back to back."""
    assert _gpu_compute().host_sync_s == pytest.approx(9.6e-6 - 3.8e-6)


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_each_micro_batch_pays_its_drains(engine):
    """pp 1: a forward drains 3 times (sizes' .cpu(), batch-generator and forward-compute timers), a backward
    once; the optimizer step twice more (norm .item(), copy-back timer) and once for fp16's found-inf flag.
    Switching the sync cost off removes exactly those drains' idle time from host wait and iteration."""
    gb = 8
    on = simulate(_project(gb=gb, engine=engine))
    off = simulate(_project(gb=gb, engine=engine, sync_s=0.0))
    micro_batches = gb  # mb 1, dp 1
    per_pass = micro_batches * (3 + 1) * _drain_s()
    step = 3 * _drain_s()
    assert on.time_breakdown_s["host_wait"] - off.time_breakdown_s["host_wait"] == pytest.approx(per_pass, rel=1e-6)
    assert on.iteration_time_s - off.iteration_time_s == pytest.approx(per_pass + step, rel=1e-6)


def test_pipeline_sends_drain_once_each():
    """pp 2: stage 0 sends forward (one more drain per forward), stage 1 sends backward (one more per
    backward): 4 + 1 and 3 + 2 drains per micro-batch."""
    plan = make_plan(_project(tp=1, pp=2))
    for rank, (f, b) in enumerate([(4, 1), (3, 2)]):
        passes = plan.stages[rank].passes
        for kind, n in (("F", f), ("B", b)):
            lead = passes[(0, kind)].segments[0]
            assert lead.label == "host synchronisation"
            assert lead.dispatch_wait_s == pytest.approx(n * _drain_s())
        assert passes[(0, "R")].segments[0].label != "host synchronisation"  # inside the backward's timer


def test_engines_agree_with_drains():
    """Both engines take the drains from the plan: same iteration time (contention off), pipeline too."""
    times = [simulate(_project(tp=2, pp=2, dp=2, engine=e)).iteration_time_s for e in ("analytic", "event")]
    assert times[0] == pytest.approx(times[1], rel=1e-6)


def _overhead(**kw) -> float:
    """Optimizer seconds with the plan's Megatron step minus one fused Adam step of the same parameters."""
    plan = make_plan(_project(**kw))
    st = plan.stages[0]
    fused = st.params * (4 * 4 + 3 * 4 + 2) / st.dev.dram_bandwidth  # a mixed fused Adam step, written out
    return st.optimizer_s - fused, st.params, st.dev.dram_bandwidth


def _stage_tensors(layers: int, first: bool, last: bool) -> int:
    """Parameter tensors of a Megatron GPT stage, from its module list: per layer two LayerNorms (γ, β) and four
    linear layers (weight, bias); the first stage's word and position embeddings; the last stage's final
    LayerNorm (γ, β); the head is tied to the word embedding."""
    return 12 * layers + (2 if first else 0) + (2 if last else 0)


# The optimizer's Python per parameter tensor, read off Megatron's MixedPrecisionOptimizer.step, clip_grads and
# apex's FusedAdam.step: the norm filter's two checks, clip's .detach() and .type(), the main gradient's .grad
# setter, fp16's .grad.data for unscaling (bf16: its no-op .float()), FusedAdam's three .data, the copy-back's
# two .data. One kernel per tensor: fp16's main-gradient cast, bf16's copy-back copy_.
CALLS_PER_TENSOR = 2 + 2 + 1 + 1 + 3 + 2


def _loops_s(st, tensors: int) -> float:
    """The loops' host time on a drained device: their calls, and their per-tensor launches beyond the kernels'
    own device time (each at its floor plus 6 B per parameter streamed: fp16's cast reads 2 and writes 4, bf16's
    copy reads 4 and writes 2)."""
    c = st.dev.compute
    device = tensors * (c.fixed_op_s + st.dev.stream_s(6 * st.params / tensors))
    return tensors * CALLS_PER_TENSOR * c.host_call_s + max(0.0, tensors * c.host_dispatch_s - device)


def test_fp16_step_streams_twenty_four_more_bytes_per_parameter():
    """fp16 (Megatron's gradient buffer in fp16): zero it (2 B), copy it into fp32 main gradients (2 read, 4
    written), unscale them (read + write, 8), their norm (4), the master weights read back for the fp16 copy
    (4) = 24 B per parameter; three drains; two flag all-reduces over the model-parallel group (tp 2); the
    Python loops over the stage's parameter tensors."""
    extra, params, bw = _overhead(tp=2)
    st = make_plan(_project(tp=2)).stages[0]
    loops = _loops_s(st, _stage_tensors(LAYERS, True, True))
    expected = params * 24 / bw + 3 * _drain_s() + 2 * _flag_allreduce_s(2) + loops
    assert extra == pytest.approx(expected, rel=1e-6)


def test_bf16_step_has_no_loss_scaler():
    """bf16: its fp32 gradient buffer zeroed (4 B) and read for the norm (4), the master weights read back (4)
    = 12 B; no loss scaler, so no found-inf .item() (2 drains) and only the norm's all-reduce; with replicas
    the data-parallel reduction's timer drains once more. The model group spans the pipeline. The loops run
    over the first stage's tensors (half the layers and the embeddings)."""
    extra, params, bw = _overhead(tp=2, pp=2, dp=2, dtype="bf16")
    st = make_plan(_project(tp=2, pp=2, dp=2, dtype="bf16")).stages[0]
    loops = _loops_s(st, _stage_tensors(LAYERS // 2, True, False))
    expected = params * 12 / bw + 3 * _drain_s() + _flag_allreduce_s(4) + loops
    assert extra == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(("pp", "zero", "dtype"), [(1, 0, "fp16"), (2, 0, "bf16"), (1, 1, "fp16")])
def test_step_loops_pay_their_calls_per_parameter_tensor(pp, zero, dtype):
    """Only the loops pay ``host_call_s`` in the step: changing it changes each stage's optimizer time by
    CALLS_PER_TENSOR calls per tensor the stage's optimizer holds — the stage's tensors from its module list,
    with the distributed optimizer (ZeRO 1, two replicas) half of them."""
    dp = 2 if zero else 1
    plans = [make_plan(_project(pp=pp, dp=dp, zero=zero, dtype=dtype, host={"host_call_s": x}))
             for x in (3e-6, 8e-6)]
    for rank, (a, b) in enumerate(zip(plans[0].stages, plans[1].stages, strict=True)):
        tensors = _stage_tensors(LAYERS // pp, rank == 0, rank == pp - 1) / dp
        assert b.optimizer_s - a.optimizer_s == pytest.approx(tensors * CALLS_PER_TENSOR * 5e-6, rel=1e-9)


def test_step_launches_one_kernel_per_tensor_when_the_host_binds():
    """With a slow host (1 and 2 ms per launch, far beyond any kernel of this model), the step's per-tensor
    casts cost the host's launches: each millisecond more per launch adds one per tensor, and one per drain
    (the next kernel's dispatch after each of the step's three fp16 drains)."""
    plans = [make_plan(_project(host={"host_dispatch_s": x})) for x in (1e-3, 2e-3)]
    tensors = _stage_tensors(LAYERS, True, True)
    delta = plans[1].stages[0].optimizer_s - plans[0].stages[0].optimizer_s
    assert delta == pytest.approx((tensors + 3) * 1e-3, rel=1e-9)


def test_search_and_plan_agree_on_the_step_loops():
    """The search's tail prices the step as the plan does (``plan.train_step.step_overhead`` with the stage's
    tensors): its optimizer seconds per stage equal the plan's."""
    for zero in (0, 1):
        p = _project(tp=2, pp=2, dp=2, zero=zero)
        assert_search_matches_engine(p, Candidate(tp=2, pp=2, dp=2, micro_batch=1, zero=zero,
                                                  recompute=Recompute.full))


def test_no_step_overhead_without_mixed_precision_or_a_host_framework():
    """fp32 training takes one fused step; a grid device (no host issuing kernels) neither drains nor runs
    Megatron's optimizer."""
    p = _project(dtype="fp32", master=False)
    st = make_plan(p).stages[0]
    assert st.optimizer_s == pytest.approx(st.params * (4 * 4 + 3 * 4) / st.dev.dram_bandwidth, rel=1e-9)
    grid = make_plan(_project().model_copy(update={"hardware": load_system("wormhole-n300")}).model_copy(
        update={"mapping": Mapping(tp=2, pp=1, dp=1, micro_batch=1, global_batch=8)}))
    for st in grid.stages:
        assert all(s.label != "host synchronisation" for ps in st.passes.values() for s in ps.segments)


@pytest.mark.parametrize("mb", [1, 4])
def test_forward_broadcasts_the_batch_over_the_tensor_group(mb):
    """get_batch's broadcast_data: 8 int64 key sizes, then mb × (seq + 1) int64 tokens, over the tensor group
    at the head of every forward (not the recompute, not the backward); with tp 1 there is no group."""
    plan = make_plan(_project(tp=2, mb=mb, gb=8))
    passes = plan.stages[0].passes
    heads = [s.comm for s in passes[(0, "F")].segments[:4] if s.comm and s.comm[0] == "broadcast"]
    assert heads == [("broadcast", 8 * 8), ("broadcast", mb * (SEQ + 1) * 8)]
    for kind in ("R", "B"):
        assert not any(s.comm and s.comm[0] == "broadcast" for s in passes[(0, kind)].segments)
    alone = make_plan(_project(tp=1, mb=mb, gb=8)).stages[0].passes[(0, "F")]
    assert not any(s.comm for s in alone.segments[:4])


def test_naming_the_gpus_own_memory_keeps_megatrons_step():
    """mapping.memory_levels naming the GPU's own HBM for the model state changes nothing (an offloading
    runtime's step, state in host memory, is ``test_offload_training``'s)."""
    p = _project()
    named = p.model_copy(update={"mapping": p.mapping.model_copy(
        update={"memory_levels": {"optimizer": "hbm", "gradients": "hbm", "weights": "hbm"}})})
    assert make_plan(named).stages[0].optimizer_s == pytest.approx(make_plan(p).stages[0].optimizer_s, rel=1e-12)


# get_batch beyond broadcast_data, read off pretrain_gpt.get_batch and get_ltor_masks_and_position_ids (defaults):
# launches — labels' and tokens' .contiguous(), torch.ones and torch.tril of the causal mask, the loss mask's
# torch.ones, torch.arange, attention_mask < 0.5; calls — narrow and view of the key, .long(), the two slices,
# data.size() twice, the mask's .view, unsqueeze, expand_as
GET_BATCH = {"launches": 2 + 2 + 1 + 1 + 1, "calls": 2 + 1 + 2 + 2 + 1 + 2}


@pytest.mark.parametrize("timing", [None, 0])
def test_each_forward_pays_get_batch_on_a_drained_device(timing):
    """pp 1, tp 2: every forward's exposed host work is get_batch's launches and calls (no pipeline send); at
    every timer level (the key sizes' .cpu() drains the device before them); backward and recompute none of it."""
    p = _project(tp=2)
    if timing is not None:
        p = p.model_copy(update={"mapping": p.mapping.model_copy(update={"timing_log_level": timing})})
    c = _gpu_compute()
    want = GET_BATCH["launches"] * c.host_dispatch_s + GET_BATCH["calls"] * c.host_call_s
    passes = make_plan(p).stages[0].passes
    exposed = [s for s in passes[(0, "F")].segments if s.label == "host calls on a drained device"]
    assert len(exposed) == 1 and exposed[0].dispatch_wait_s == pytest.approx(want, rel=1e-12)
    backward = [s for s in passes[(0, "B")].segments if s.label == "host calls on a drained device"]
    startup = c.host_backward_s if timing is None else 0.0  # level 0: nothing received before it (pp 1)
    assert sum(s.dispatch_wait_s for s in backward) == pytest.approx(startup, rel=1e-12)
    assert not any(s.label == "host calls on a drained device" for s in passes[(0, "R")].segments)


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_get_batch_adds_its_host_time_to_every_micro_batch(engine, monkeypatch):
    """pp 1, gb 8, mb 1: eight forwards, each with get_batch's host time on a drained device: the iteration and
    its host wait are longer by eight of them than with get_batch's work taken out, in both engines."""
    from tilewright.engine.plan import train_step

    c = _gpu_compute()
    one = GET_BATCH["launches"] * c.host_dispatch_s + GET_BATCH["calls"] * c.host_call_s
    full = simulate(_project(engine=engine, gb=8))
    monkeypatch.setattr(train_step, "GET_BATCH_LAUNCHES", 0)
    monkeypatch.setattr(train_step, "GET_BATCH_CALLS", 0)
    bare = simulate(_project(engine=engine, gb=8))
    assert full.iteration_time_s - bare.iteration_time_s == pytest.approx(8 * one, rel=1e-6)
    assert full.time_breakdown_s["host_wait"] - bare.time_breakdown_s["host_wait"] == pytest.approx(8 * one, rel=1e-6)


def test_search_and_plan_agree_on_get_batch():
    """The search leads its passes as the plan does (``plan.train_step.lead_seconds``), get_batch included."""
    assert_search_matches_engine(_project(tp=2, pp=2, dp=2, gb=8),
                                 Candidate(tp=2, pp=2, dp=2, micro_batch=1, recompute=Recompute.full))
