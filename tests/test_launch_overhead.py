"""Host kernel dispatch and unfused attention's score traffic (``engine.plan.launch``)."""

from __future__ import annotations

import dataclasses

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.hardware import RuntimeGraphs
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.op_cost import op_time
from tilewright.engine.plan.costed_op import as_costed
from tilewright.engine.plan.launch import attention_scores, host_calls, kernels, pass_device
from tilewright.engine.plan.passes import PassContext, backward_pass, forward_pass
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

SEQ, HIDDEN, HEADS = 1024, 512, 8
FREE_HOST = 1e-15  # a host that issues kernels at no cost (0 would also drop the per-kernel device gap)


def _spec(layers: int = 2) -> GPTSpec:
    return GPTSpec(name="gpt-tiny", layers=layers, hidden=HIDDEN, heads=HEADS, seq_len=SEQ, vocab=4096)


def _gpu(host_s: float | None = None, gap_s: float | None = None, call_s: float | None = None):
    """The DGX A100's GPU; ``host_s`` also sets the host's other calls (``call_s``) unless given."""
    system = load_system("dgx-a100")
    gpu = system.children[0].children[0]
    if call_s is None and host_s is not None:
        call_s = host_s
    pairs = (("host_dispatch_s", host_s), ("fixed_op_s", gap_s), ("host_call_s", call_s))
    update = {k: v for k, v in pairs if v is not None}
    return device_model(gpu.compute.model_copy(update=update), gpu.memories, None, "bf16")


def _block(spec: GPTSpec):
    graph = build_workload(spec)
    return [graph.layer_ops(i) for i in graph.block_layers[:1]]


def test_gpt_layer_launches_as_many_kernels_as_megatron():
    """Megatron-LM's GPT layer forward: LN, QKV GEMM + bias, baddbmm, softmax, dropout, bmm, copy, dense,
    bias-dropout-add, LN, h→4h, bias-GeLU, 4h→h, bias-dropout-add = 16 kernels (``plan.launch``)."""
    ops = _block(_spec())[0]
    assert sum(kernels(op, backward=False) for op in ops) == 16
    # backward: two GEMMs (data and weight gradients) per forward GEMM plus the gradient reductions
    assert 1.5 * 16 <= sum(kernels(op, backward=True) for op in ops) <= 2.5 * 16


def test_gpt_layer_makes_as_many_other_calls_as_megatron():
    """Beside its kernels Megatron-LM's GPT layer makes about 100 framework calls that launch nothing in its
    forward (views, module calls, Functions, the RNG fork) and 68 in its backward (``plan.launch``), and
    every linear layer makes the same number."""
    ops = _block(_spec())[0]
    assert sum(host_calls(op, backward=False) for op in ops) == 100
    assert sum(host_calls(op, backward=True) for op in ops) == 68
    linear = {host_calls(op, False) for op in ops if op.kind is OpKind.matmul}
    assert linear == {8}


def test_short_kernels_wait_for_the_host():
    """With tp 1 a pass is one segment: it lasts at least its kernels × the host's dispatch time plus its
    other calls × their time, and a host twice as slow makes a host-bound pass twice as long."""
    layers = _block(_spec())
    n = sum(kernels(op, backward=False) for ls in layers for op in ls)
    calls = sum(host_calls(op, backward=False) for ls in layers for op in ls)
    slow = forward_pass(layers, PassContext(_gpu(1e-3, call_s=0.25e-3), 1, 1, False, 2))
    slower = forward_pass(layers, PassContext(_gpu(2e-3, call_s=0.5e-3), 1, 1, False, 2))
    assert slow.busy_s == pytest.approx(n * 1e-3 + calls * 0.25e-3)
    assert slower.busy_s == pytest.approx(2 * slow.busy_s)
    assert slow.dispatch_wait_s == pytest.approx(
        slow.busy_s - forward_pass(layers, PassContext(_gpu(FREE_HOST), 1, 1, False, 2)).busy_s
    )


def test_long_kernels_hide_the_host():
    layers = _block(_spec())
    ctx = PassContext(_gpu(), 16, 1, False, 2)  # micro-batch 16: every segment far longer than its dispatch
    assert forward_pass(layers, ctx).dispatch_wait_s == 0.0
    assert forward_pass(layers, ctx).busy_s == pytest.approx(
        forward_pass(layers, PassContext(_gpu(FREE_HOST), 16, 1, False, 2)).busy_s
    )


def test_dispatch_is_in_both_engines_and_the_preset():
    tiny = Project(
        name="tiny",
        hardware=load_system("dgx-a100"),
        workload=_spec(),
        mapping=Mapping(tp=8, dp=1, micro_batch=1, global_batch=4),
        run=RunSettings(dtype="bf16"),
    )
    plan = make_plan(tiny)
    assert plan.stages[0].dev.compute.host_dispatch_s > 0
    assert plan.stages[0].passes[(0, "F")].dispatch_wait_s > 0
    runs = [
        simulate(tiny.model_copy(update={"run": tiny.run.model_copy(update={"engine": e, "contention": False})}))
        for e in ("analytic", "event")
    ]
    assert runs[0].iteration_time_s == pytest.approx(runs[1].iteration_time_s, rel=1e-9)


def test_unfused_attention_moves_its_score_matrices():
    """Forward: QKᵀ writes the a·s² scores and PV reads the probabilities (2 passes over them); backward
    reads P, writes ∂P and reads ∂S twice (4). Per micro-batch of b on tp ranks: b·a·s²/tp elements each."""
    ops = _block(_spec())[0]
    attn = next(op for op in ops if op.kind is OpKind.attention)
    scores = attention_scores(ops)[attn.name]
    assert scores == HEADS * SEQ * SEQ
    dev, mb, tp = _gpu(), 2, 2
    for backward, passes in ((False, 2), (True, 4)):
        plain = op_time(attn, dev, mb, tp, False, backward, 2)
        costed = op_time(as_costed(attn, dev, scores, (False, False)), dev, mb, tp, False, backward, 2)
        assert costed.local_bytes - plain.local_bytes == pytest.approx(passes * mb * scores / tp * 2)
    fused = as_costed(attn, dev, scores, (False, True))  # mapping.fusion attention → softmax: FlashAttention
    assert fused is attn


def test_backward_pass_is_dispatch_bound_like_the_forward():
    layers = _block(_spec())
    n = sum(kernels(op, backward=True) + host_calls(op, backward=True) for ls in layers for op in ls)
    assert backward_pass(layers, PassContext(_gpu(1e-3), 1, 1, False, 2)).busy_s == pytest.approx(n * 1e-3)


def test_every_kernel_pays_the_device_side_gap():
    """``fixed_op_s`` is the gap between back-to-back kernels: a pass pays it once per kernel it launches."""
    layers = _block(_spec())
    for backward, build in ((False, forward_pass), (True, backward_pass)):
        n = sum(kernels(op, backward) for ls in layers for op in ls)
        with_gap = build(layers, PassContext(_gpu(FREE_HOST, 1e-3), 16, 1, False, 2)).busy_s
        without = build(layers, PassContext(_gpu(FREE_HOST, 0.0), 16, 1, False, 2)).busy_s
        assert with_gap - without == pytest.approx(n * 1e-3)


def test_graphed_passes_pay_no_host_calls():
    """A pass the runtime replays as a captured graph pays neither the kernels' dispatch nor the other calls:
    the graph issues everything from the device."""
    gpu = _gpu(1e-3, call_s=0.5e-3)
    gpu = dataclasses.replace(gpu, compute=gpu.compute.model_copy(update={"runtime_graphs": RuntimeGraphs.decode}))
    dev = pass_device(gpu, "decode")
    assert dev.compute.host_dispatch_s == 0.0 and dev.compute.host_call_s == 0.0
    assert pass_device(gpu, "prefill").compute.host_call_s == 0.5e-3


def test_a_recomputed_layer_pays_its_checkpoint_on_the_host():
    """Megatron-LM's CheckpointFunction saves and restores the RNG states and calls backward from inside its
    own backward: ``CHECKPOINT_CALLS`` framework calls and one nested ``backward()`` start-up
    (``host_backward_s``) per re-run layer, charged with the re-run pass."""
    from tilewright.engine.plan.launch import CHECKPOINT_CALLS

    layers = _block(_spec()) * 3
    gpu = _gpu(1e-3, call_s=0.5e-3)  # host-bound: a pass lasts its host time
    startup = gpu.compute.host_backward_s
    assert startup > 0
    ctx = PassContext(gpu, 1, 1, False, 2)
    rerun, forward = forward_pass(layers, ctx, "R"), forward_pass(layers, ctx, "F")
    assert rerun.busy_s - forward.busy_s == pytest.approx(3 * (CHECKPOINT_CALLS * 0.5e-3 + startup))
    # a device whose runtime has no backward() start-up pays the calls alone
    bare = dataclasses.replace(gpu, compute=gpu.compute.model_copy(update={"host_backward_s": 0.0}))
    ctx0 = PassContext(bare, 1, 1, False, 2)
    assert forward_pass(layers, ctx0, "R").busy_s - forward_pass(layers, ctx0, "F").busy_s == pytest.approx(
        3 * CHECKPOINT_CALLS * 0.5e-3)
