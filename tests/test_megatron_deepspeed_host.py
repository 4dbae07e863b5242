"""Megatron-DeepSpeed's two blocking scalar copies per transformer-layer forward (``plan.deepspeed_host``): where
they sit, what each costs (derived here from the preset's host constants, not from the plan), which passes pay
them, and that both engines charge the same."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.perf.device import device_model
from tilewright.engine.plan.deepspeed_host import blocking_copies
from tilewright.engine.plan.framework_host import host_framework
from tilewright.engine.plan.launch import host_seconds
from tilewright.engine.plan.passes import PassContext, backward_pass, forward_pass
from tilewright.engine.plan.train_step import lead_seconds
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import simulate
from tilewright.engine.workloads import build_workload

from tests.agreement import assert_search_matches_engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from calibrate_small_gpt import vtrain_project  # noqa: E402

PRESETS = ("dgx-a100", "dgx-h100")
FW = "megatron-deepspeed"
COPIES = 2  # moe_loss and mlp_bias in ParallelTransformerLayer.forward (Megatron-DeepSpeed transformer.py)
LABEL = "blocking host-to-device copy"


def _graph(hidden: int = 1024, heads: int = 16, seq: int = 1024):
    return build_workload(GPTSpec(name="gpt", layers=2, hidden=hidden, heads=heads, seq_len=seq, vocab=4096))


def _copy_s(compute) -> float:
    """One copy on a device the host cannot keep busy: its call (a kernel-issuing call), then the drain (the
    host's wake-up after the stream synchronisation and its next launch)."""
    return compute.host_dispatch_s + compute.host_sync_s + compute.host_dispatch_s


def test_the_copies_sit_before_each_block_layers_mlp_and_nowhere_else():
    graph = _graph()
    for index in range(graph.block_layers[-1] + 2):  # the embedding, the blocks, the head
        ops = graph.layer_ops(index)
        for j, op in enumerate(ops):
            expected = COPIES if op.name.endswith(".mlp_up") else 0  # the MLP's first linear (dense_h_to_4h)
            assert blocking_copies(FW, ops, j) == expected, op.name
            for other in ("megatron-lm", "mcore", "mcore-te", "pytorch", "pytorch-compile"):
                assert blocking_copies(other, ops, j) == 0
    assert sum(blocking_copies(FW, graph.layer_ops(i), j) for i in graph.block_layers
               for j in range(len(graph.layer_ops(i)))) == COPIES * len(graph.block_layers)


@pytest.mark.parametrize("system", PRESETS)
def test_a_tiny_layer_forward_and_recompute_each_pay_two_copies_its_backward_none(system):
    """A layer far too small to keep the device busy lasts its host time; Megatron-DeepSpeed's forward and full
    recompute each add two copies' calls and drains, its backward and a selective recompute add nothing."""
    gpu = load_system(system).children[0].children[0]
    dev = device_model(gpu.compute, gpu.memories, None, "fp16")
    layer = _graph(hidden=64, heads=2, seq=128).layer_ops(1)
    ctx, v2 = PassContext(dev, 1, 1, False, 2), PassContext(dev, 1, 1, False, 2)
    ctx.host_framework = FW
    assert forward_pass([layer], v2).busy_s == pytest.approx(sum(host_seconds(op, False, gpu.compute)
                                                                 for op in layer), rel=1e-9)  # host-bound
    for kind in ("F", "R"):
        p = forward_pass([layer], ctx, kind)
        assert p.busy_s - forward_pass([layer], v2, kind).busy_s == pytest.approx(COPIES * _copy_s(gpu.compute))
        waits = [s for s in p.segments if s.label == LABEL]
        assert len(waits) == COPIES
        drain = gpu.compute.host_sync_s + gpu.compute.host_dispatch_s
        assert all(s.dispatch_wait_s == pytest.approx(drain) for s in waits)
    host_b = sum(host_seconds(op, True, gpu.compute) for op in layer)
    assert backward_pass([layer], ctx).busy_s == pytest.approx(host_b, rel=1e-9)
    selective = forward_pass([layer], ctx, "R", only_selective=True)
    assert not [s for s in selective.segments if s.label == LABEL]
    ctx.cuda_graph_scope = ("full_iteration",)  # a capture cannot hold a synchronisation
    assert not [s for s in forward_pass([layer], ctx).segments if s.label == LABEL]


def test_the_framework_keeps_megatron_lms_get_batch_and_is_training_only():
    gpu = load_system("dgx-a100").children[0].children[0].compute
    for kind in ("F", "B"):
        for stage in range(2):
            assert lead_seconds(gpu, kind, stage, 2, 1e-5, framework=FW) == \
                lead_seconds(gpu, kind, stage, 2, 1e-5, framework="megatron-lm")
    assert host_framework(FW, gpu, True) == FW
    assert host_framework(FW, gpu, False) == "megatron-lm"  # inference: a serving runtime's layers


@pytest.mark.parametrize("args", [("12x1024", 8, 8, 1, 1, 16), ("24x1024", 4, 2, 2, 2, 32)])
def test_a_vtrain_run_pays_at_least_every_drain_and_both_engines_agree(args):
    """Per micro-batch, every layer's forward and its full recompute drain twice. On the busiest stage those
    passes run one after the other, so the iteration grows by at least micro-batches × its layers × 2 passes × 2
    drains (splitting a segment at a drain never shortens it); and by less than twice the copies' calls and drains
    through the pipeline's m + pp - 1 periods (a split loses at most the overlap of the host's work before the
    drain with the device's after it, below one copy's cost on these host-bound layers). The event engine charges
    what the analytic one does."""
    model, gpus, tp, pp, mb, gb = args
    layers = {"12x1024": 12, "24x1024": 24}[model]
    times = {}
    for engine in ("analytic", "event"):
        for fw in ("megatron-lm", FW):
            p = vtrain_project(model, gpus, tp, pp, mb, gb, engine)
            p = p.model_copy(update={"mapping": p.mapping.model_copy(update={"host_framework": fw})})
            times[engine, fw] = simulate(p).iteration_time_s
    assert times["event", FW] == pytest.approx(times["analytic", FW], rel=1e-9)
    gpu = load_system("dgx-a100").children[0].children[0].compute
    dp = gpus // (tp * pp)
    micro_batches = gb // (mb * dp)
    drains = micro_batches * layers // pp * 2 * COPIES  # one stage's layers, forward and recompute
    drain = gpu.host_sync_s + gpu.host_dispatch_s
    delta = times["analytic", FW] - times["analytic", "megatron-lm"]
    assert delta >= drains * drain * (1 - 1e-9)
    assert delta <= drains * _copy_s(gpu) * 2 * (micro_batches + pp - 1) / micro_batches


@pytest.mark.parametrize(("pp", "mb"), [(1, 1), (2, 2)])
def test_the_search_times_the_copies_as_the_plan(pp, mb):
    """The parallelism search's layer table builds its passes with ``forward_pass``: a Megatron-DeepSpeed candidate
    costs there what the analytic engine gives it, copies and drains included."""
    base = vtrain_project("12x1024", 4, 2, pp, mb, 16, "analytic")
    c = Candidate(tp=2, pp=pp, dp=4 // (2 * pp), micro_batch=mb, recompute=Recompute.full)
    p = assert_search_matches_engine(base, c, keep_base=True, host_framework=FW)
    assert p.mapping.host_framework == FW


@pytest.mark.parametrize("extra", [{}, {"qk_norm": True}, {"sandwich_norm": True}])
def test_the_copies_come_once_per_block_whatever_its_norms(extra):
    """A QK norm (before the attention) and a sandwich's post-attention norm are norms too: the two copies still
    come once per block, past the attention."""
    from tilewright.engine.ir import GPTSpec
    from tilewright.engine.ir.ops import OpKind
    from tilewright.engine.plan.deepspeed_host import BLOCKING_COPIES, blocking_copies
    from tilewright.engine.workloads import build_workload

    graph = build_workload(GPTSpec(name="g", layers=2, hidden=256, heads=4, seq_len=128, vocab=512, **extra))
    for layer in graph.block_layers:
        ops = graph.layer_ops(layer)
        at = [j for j in range(len(ops)) if blocking_copies("megatron-deepspeed", ops, j)]
        attention = next(i for i, op in enumerate(ops) if op.kind is OpKind.attention)
        assert len(at) == 1 and at[0] > attention
        assert blocking_copies("megatron-deepspeed", ops, at[0]) == BLOCKING_COPIES
