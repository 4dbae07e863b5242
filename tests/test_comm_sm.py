"""The SMs an NCCL collective holds while compute runs beside it (``perf.comm_sm``): the compute's cover stretched
by units / (units − channels), the compute losing channels / units of the overlapped window, derived by hand;
and the plan's hooks charging exactly that for one overlapped collective (the async dgrad all-reduce, the context
ring)."""

from __future__ import annotations

import pytest
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.hardware import Component
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.perf.comm_sm import beside, stretched
from tilewright.engine.perf.device import device_model
from tilewright.engine.plan.context import ContextComm, kv_block_bytes
from tilewright.engine.plan.passes import backward_pass
from tilewright.engine.search.op_settings import OpSettings
from tilewright.engine.workloads import build_workload

MS = 1e-3


def test_stretched_compute_runs_on_the_sms_left():
    assert stretched(1 * MS, 132, 24) == pytest.approx(1 * MS * 132 / 108)
    assert stretched(1 * MS, 108, 24) == pytest.approx(1 * MS * 108 / 84)
    for units, sms in ((None, 24), (132, None), (132, 0), (24, 24), (16, 24)):  # unknown, or no SM left
        assert stretched(1 * MS, units, sms) == 1 * MS


def test_a_short_collective_slows_the_compute_for_its_own_time_only():
    """0.5 ms of collective beside 1 ms of compute on an H100: the compute, at 108 / 132 of its rate for those
    0.5 ms, loses 0.5 × 24 / 132 ms; nothing of the collective shows."""
    slower, shown = beside(0.5 * MS, 1 * MS, 132, 24)
    assert slower == pytest.approx(0.5 * MS * 24 / 132)
    assert shown == 0.0


def test_a_long_collective_stretches_the_whole_compute_and_shows_past_it():
    """2 ms of collective beside 1 ms of compute: the compute runs on 108 SMs throughout, 132 / 108 ms, losing
    24 / 108 ms; the collective shows for 2 − 132 / 108 ms."""
    slower, shown = beside(2 * MS, 1 * MS, 132, 24)
    assert slower == pytest.approx(1 * MS * 24 / 108)
    assert shown == pytest.approx(2 * MS - 1 * MS * 132 / 108)
    # without an SM count: the old model, the bare cover and no loss
    assert beside(2 * MS, 1 * MS, None, None) == (0.0, pytest.approx(1 * MS))
    assert beside(0.0, 1 * MS, 132, 24) == (0.0, 0.0)


def _gpu(sms: int | None) -> Component:
    """The dgx-h100 preset, its GPUs' collective SMs replaced by ``sms``."""
    hw = load_system("dgx-h100")
    node = hw.children[0]
    gpu = node.children[0]
    gpu = gpu.model_copy(update={"compute": gpu.compute.model_copy(update={"collective_sms": sms})})
    return hw.model_copy(update={"children": [node.model_copy(update={"children": [gpu, *node.children[1:]]}),
                                              *hw.children[1:]]})


def _backward(sms: int | None, seconds) -> tuple[list, object]:
    """The backward of one large GPT block at tp 8 on 8 H100s, its column runs' all-reduces beside their wgrads timed by
    ``seconds``; and the pass context."""
    spec = GPTSpec(name="g", layers=1, hidden=8192, heads=64, seq_len=8192, vocab=32000)  # device-bound, not host
    p = Project(name="sm", hardware=_gpu(sms), workload=spec,
                mapping=Mapping(tp=8, pp=1, dp=1, micro_batch=1, global_batch=1, overlap_dgrad_comm=True),
                run=RunSettings(dtype="bf16", mode="train", contention=False))
    wl = build_workload(p.workload)
    hw = elaborate(p.hardware, devices_needed=8)
    d = hw.devices[0]
    ctx = OpSettings.of(p, wl).context(device_model(d.compute, d.memories, None, p.run.dtype), 1, 8, False)
    ctx.dgrad_overlap = True
    ctx.dgrad_seconds = seconds
    ops = wl.layer_ops(wl.block_layers[0])
    return backward_pass([ops], ctx).segments, ctx


def test_the_async_dgrad_all_reduce_costs_its_wgrads_the_sms_it_holds():
    """Each column-parallel op's input-gradient all-reduce (qkv's, fc1's) runs beside its wgrad GEMM: the segment
    it closes gains min(T, W · 132 / 108) · 24 / 132, and what shows is the bytes that take T − W · 132 / 108.
    On a made-up 8 GB/s group the 134 MB all-reduce takes 16.8 ms, longer than either wgrad (about a millisecond),
    so the whole wgrad stretches: the gain is W · 24 / 108, from which W is read back."""
    bw = 8e9
    seconds = lambda kind, nbytes: nbytes / bw  # noqa: E731
    with_sms, ctx = _backward(24, seconds)
    bare, _ = _backward(None, seconds)
    assert ctx.dev.compute.collective_sms == 24 and ctx.dev.compute.gemm_units == 132
    assert len(with_sms) == len(bare)
    whole = 8192 * 8192 * 2.0  # s · h · bf16
    checked = 0
    for s_sm, s_bare in zip(with_sms, bare, strict=True):
        if not (s_bare.comm and s_bare.comm[0] == "all-reduce"):
            assert s_sm.busy_s == pytest.approx(s_bare.busy_s, rel=1e-12)
            continue
        gained = s_sm.busy_s - s_bare.busy_s
        wgrad = gained * (132 - 24) / 24
        assert 0.1e-3 < wgrad < 5e-3  # a wgrad GEMM of this layer on an H100
        t = whole / bw
        assert seconds("all-reduce", s_sm.comm[1]) == pytest.approx(t - wgrad * 132 / 108, rel=1e-6)
        assert seconds("all-reduce", s_bare.comm[1]) == pytest.approx(t - wgrad, rel=1e-6)
        checked += 1
    assert checked == 2  # qkv's and fc1's


def test_the_context_ring_stretches_each_steps_share_of_attention():
    """cp 2, forward: one step sends one K/V block beside half the attention kernel A. With the step's transfer
    T longer than A / 2 · 132 / 108, the kernel loses A / 2 · 24 / 108 and T − A / 2 · 132 / 108 of the step
    shows, as that fraction of the block's bytes."""
    spec = GPTSpec(name="g", layers=1, hidden=4096, heads=32, seq_len=8192, vocab=32000)
    op = next(o for o in build_workload(spec).layer_ops(1) if o.kind is OpKind.attention)
    block = kv_block_bytes(op, 0.5, 8, 2.0)
    bw = 1e9
    ring = ContextComm(2, lambda kind, nbytes: nbytes / bw)
    t = block / bw
    attention_s = t  # half of it beside the step: T > A / 2 · 132 / 108
    shown, hidden = ring.exchange(op, 0.5, 8, 2.0, False, attention_s, 132, 24)
    cover = attention_s / 2 * 132 / 108
    assert shown == [("cp:ring", pytest.approx(block * (t - cover) / t))]
    assert hidden == (("cp:ring", pytest.approx(block * cover / t)),)
    assert ring.slowed(op, 0.5, 8, 2.0, False, attention_s, 132, 24) == pytest.approx(attention_s / 2 * 24 / 108)
    assert ring.slowed(op, 0.5, 8, 2.0, False, attention_s, None, None) == 0.0


def test_zero_collectives_behind_a_layer_stretch_its_compute():
    """ZeRO-2/3's reduce-scatter behind the previous layer's compute (``plan.sharding``): 1 ms of it behind
    2 ms of compute on an H100 hides behind 2 × 132 / 108 ms, and the compute loses 1 × 24 / 132 ms."""
    from types import SimpleNamespace

    from tilewright.engine.plan.pass_builder import PassBuilder
    from tilewright.engine.plan.passes import PassContext
    from tilewright.engine.simulate import make_plan

    plan = make_plan(Project(name="z", hardware=load_system("dgx-h100"),
                             workload=GPTSpec(name="g", layers=1, hidden=1024, heads=8, seq_len=512, vocab=8192),
                             mapping=Mapping(tp=1, pp=1, dp=1, micro_batch=1, global_batch=1),
                             run=RunSettings(dtype="bf16")))
    b = PassBuilder(PassContext(plan.stages[0].dev, 1, 1, False, 2.0), "B")
    shard = SimpleNamespace(seconds=lambda kind, nbytes: nbytes * 1e-9)  # 1 ns per byte
    b.prev_layer_device = 2 * MS  # the layer before: 2 ms of kernels, its whole span (``next_layer``)
    cover = b.shard_cover(shard, [("dp:reduce-scatter", 1e6)], 2 * MS, "block0.x", 0)
    assert cover == pytest.approx(2 * MS * 132 / 108)
    assert b._open is not None and b._open.busy_s == pytest.approx(1 * MS * 24 / 132)
    assert b.shard_cover(shard, [], 2 * MS, "block0.x", 0) == 2 * MS  # nothing behind it: nothing changes


@pytest.mark.parametrize("mapping", [
    {"tp": 2, "cp": 2, "dp": 2, "sequence_parallel": True, "overlap_dgrad_comm": True},  # ring, re-gather, dgrad
    {"tp": 1, "dp": 8, "zero": 3, "overlap_grad_reduce": True, "overlap_param_gather": True},  # FSDP's collectives
])
def test_both_engines_charge_the_sms_alike(mapping):
    """The SM loss lives in the plan's segments, so the analytic and the event engine agree on it; and it costs
    time (the same run without an SM count is faster)."""
    from tests.agreement import assert_engines_agree, engine_result

    spec = GPTSpec(name="g", layers=2, hidden=2048, heads=16, seq_len=4096, vocab=32000)

    def project(engine: str, sms: int | None) -> Project:
        return Project(name="sm", hardware=_gpu(sms), workload=spec,
                       # v2.x host counts keep these small layers device-bound, where lost SMs show
                       mapping=Mapping(pp=1, micro_batch=1, global_batch=16, host_framework="megatron-lm", **mapping),
                       run=RunSettings(dtype="bf16", mode="train", engine=engine, contention=False))

    analytic = engine_result(project("analytic", 24))
    assert_engines_agree(analytic, engine_result(project("event", 24)))
    assert analytic.iteration_time_s > engine_result(project("analytic", None)).iteration_time_s
