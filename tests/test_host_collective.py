"""Host time of an eager framework's collective calls and of its ``backward()`` start-up (``plan.launch``,
``plan.train_step``): ``Compute.host_collective_s`` delays the device before each collective where the host
binds, and wholly after a drain (pipeline sends, ``get_batch``'s broadcasts); ``Compute.host_backward_s`` leads
every backward pass. Expected values come from the sources' arithmetic and from counting the collectives the
passes issue, not from reading the plan's totals back."""

from __future__ import annotations

import dataclasses

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.hardware import Component, Compute, RuntimeGraphs
from tilewright.engine.perf.device import device_model
from tilewright.engine.plan.cuda_graphs import FULL_ITERATION
from tilewright.engine.plan.launch import pass_device
from tilewright.engine.plan.passes import PassContext, backward_pass, forward_pass
from tilewright.engine.plan.train_step import lead_seconds
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

CALL, START = 40e-6, 90e-6  # test values, apart from the presets' so a mix-up shows
LEADS = ("host synchronisation", "host calls on a drained device", "batch sizes broadcast", "batch broadcast")


def _gpu_compute(system: str = "dgx-a100") -> Compute:
    return load_system(system).children[0].children[0].compute


def _system(**update: float) -> Component:
    """dgx-a100 with its GPUs' compute updated."""
    system = load_system("dgx-a100")
    gpu = system.children[0].children[0]
    gpu = gpu.model_copy(update={"compute": gpu.compute.model_copy(update=update)})
    node = system.children[0].model_copy(update={"children": [gpu]})
    return system.model_copy(update={"children": [node]})


def _project(call: float, start: float, tp: int = 2, pp: int = 1, dp: int = 1, gb: int = 4, hidden: int = 128,
             engine: str = "analytic") -> Project:
    """A GPT far too small to keep an A100 busy: every segment waits for the host."""
    spec = GPTSpec(name="tiny", layers=4, hidden=hidden, heads=4, seq_len=128, vocab=2048)
    return Project(
        name="tiny", hardware=_system(host_collective_s=call, host_backward_s=start), workload=spec,
        mapping=Mapping(tp=tp, pp=pp, dp=dp, micro_batch=1, global_batch=gb, recompute="full"),
        run=RunSettings(dtype="fp16", engine=engine, contention=False),
    )


def _device(call: float, dispatch_s: float | None = None):
    c = _gpu_compute()
    update = {"host_collective_s": call} | ({} if dispatch_s is None else {"host_dispatch_s": dispatch_s,
                                                                          "host_call_s": dispatch_s})
    gpu = load_system("dgx-a100").children[0].children[0]
    return device_model(c.model_copy(update=update), gpu.memories, None, "bf16")


def _layers(n: int = 3, hidden: int = 512):
    graph = build_workload(GPTSpec(name="gpt", layers=1, hidden=hidden, heads=8, seq_len=1024, vocab=4096))
    return [graph.layer_ops(graph.block_layers[0])] * n


def test_preset_constants_follow_their_sources():
    """host_collective_s: PR #147820's all_reduce at 70 µs of CPU, 35 µs once its stream joins are gone — the
    call without joins. host_backward_s: issue #157407's 136 µs per backward() of one matmul, less its four
    kernel launches (two GEMMs, two gradient accumulations) at host_dispatch_s. The same on both DGX hosts."""
    for system in ("dgx-a100", "dgx-h100"):
        c = _gpu_compute(system)
        assert c.host_collective_s == pytest.approx(70e-6 - 35e-6)
        assert c.host_backward_s == pytest.approx(136e-6 - 4 * c.host_dispatch_s)


def test_unset_costs_stay_out_of_saved_files():
    """Both fields are quiet: a device without them saves as before; one that sets them keeps them."""
    bare = Compute(peak_flops={"bf16": 1e15})
    dumped = bare.model_dump(mode="json")
    assert "host_collective_s" not in dumped and "host_backward_s" not in dumped
    assert bare.model_copy(update={"host_collective_s": 1e-6}).model_dump(mode="json")["host_collective_s"] == 1e-6


def test_a_host_bound_collective_waits_for_its_call():
    """Where the host binds, each segment a collective closes lasts its host time plus the call's: Megatron's
    layer issues two tensor-parallel all-reduces forward (after attention's and the MLP's row-parallel
    GEMMs) and two backward (the input gradients of the QKV and h→4h column-parallel GEMMs)."""
    layers = _layers(3)
    for build, per_layer in ((lambda ctx: forward_pass(layers, ctx), 2), (lambda ctx: backward_pass(layers, ctx), 2)):
        with_call = build(PassContext(_device(CALL, 1e-3), 1, 2, False, 2))
        without = build(PassContext(_device(0.0, 1e-3), 1, 2, False, 2))
        calls = sum(1 for s in with_call.segments if s.comm)
        assert calls == per_layer * len(layers)
        assert with_call.busy_s - without.busy_s == pytest.approx(calls * CALL)
        assert with_call.dispatch_wait_s - without.dispatch_wait_s == pytest.approx(calls * CALL)


def test_a_busy_device_hides_the_call():
    """With a free host the device is ahead at every collective: the call costs nothing."""
    layers = _layers(3)
    for build in (forward_pass, lambda ls, ctx: backward_pass(ls, ctx)):
        with_call = build(layers, PassContext(_device(1e-6, 1e-15), 1, 2, False, 2))
        without = build(layers, PassContext(_device(0.0, 1e-15), 1, 2, False, 2))
        assert with_call.busy_s == pytest.approx(without.busy_s, rel=1e-12)


def test_replayed_and_serving_collectives_make_no_call():
    """A full-iteration CUDA graph replays the collectives; a serving runtime's passes (graphed or eager)
    issue them through its own communicators: neither pays the training framework's call or start-up."""
    layers = _layers(2)
    graphed = [forward_pass(layers, PassContext(_device(c, 1e-3), 1, 2, False, 2, cuda_graph_scope=(FULL_ITERATION,)))
               for c in (CALL, 0.0)]
    assert graphed[0].busy_s == pytest.approx(graphed[1].busy_s, rel=1e-12)
    gpu = _device(CALL)
    gpu = dataclasses.replace(gpu, compute=gpu.compute.model_copy(
        update={"host_backward_s": START, "runtime_graphs": RuntimeGraphs.decode}))
    for kind in ("prefill", "decode"):
        c = pass_device(gpu, kind).compute
        assert c.host_collective_s == 0.0 and c.host_backward_s == 0.0
    assert pass_device(gpu, "prefill").compute.host_dispatch_s == gpu.compute.host_dispatch_s  # eager prefill


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_each_micro_batch_pays_its_calls_and_its_backward_start(engine):
    """A host-bound tp-2 job: every collective of every pass (forward, recompute, backward; the batch
    broadcasts) costs its call once per micro-batch, and each backward pass its ``backward()`` start-up, once
    for the pass and once more for each fully recomputed layer (its checkpoint's re-entrant ``backward()``)."""
    gb = 4
    project = _project(0.0, 0.0, gb=gb)
    on = simulate(_project(CALL, START, gb=gb, engine=engine))
    off = simulate(_project(0.0, 0.0, gb=gb, engine=engine))
    passes = make_plan(project).stages[0].passes
    calls = sum(1 for ps in passes.values() for s in ps.segments if s.comm)
    per_micro_batch = calls * CALL + START * (1 + project.workload.layers)
    assert on.iteration_time_s - off.iteration_time_s == pytest.approx(gb * per_micro_batch, rel=1e-6)
    assert (on.time_breakdown_s["host_wait"] - off.time_breakdown_s["host_wait"]
            == pytest.approx(gb * per_micro_batch, rel=1e-6))


def test_pipeline_sends_and_backward_start_lead_their_pass():
    """pp 2: stage 0's forward sends on (one call on a drained device), its backward starts a backward() and
    sends nothing; stage 1's forward sends nothing, its backward starts and sends back. Every forward also runs
    get_batch beyond its broadcasts on the drained device (7 launches, 10 calls: ``plan.train_step``)."""
    plan = make_plan(_project(CALL, START, tp=1, pp=2))
    c = plan.stages[0].dev.compute
    batch = 7 * c.host_dispatch_s + 10 * c.host_call_s
    for rank, (f, b) in enumerate([(CALL + batch, START), (batch, START + CALL)]):
        for kind, expected in (("F", f), ("B", b)):
            lead = [s for s in plan.stages[rank].passes[(0, kind)].segments if s.label == LEADS[1]]
            assert sum(s.dispatch_wait_s for s in lead) == pytest.approx(expected)
            assert len(lead) == (1 if expected else 0)


def test_search_leads_its_passes_as_the_plan():
    """``lead_seconds`` (search, which sums passes without building them) puts at the head of each pass what
    ``add_drains`` does: drains, exposed host calls and, a forward with tp > 1, the broadcasts' calls."""
    plan = make_plan(_project(CALL, START, tp=2, pp=2))
    compute = plan.stages[0].dev.compute
    broadcast_s = 1e-3  # any time: the estimator adds it as given
    for rank, st in enumerate(plan.stages):
        for kind in ("F", "B"):
            lead = sum(s.busy_s for s in st.passes[(0, kind)].segments if s.label in LEADS)
            expected = lead_seconds(compute, kind, rank, 2, broadcast_s) - (broadcast_s if kind == "F" else 0.0)
            assert lead == pytest.approx(expected, rel=1e-12)
            assert lead > 0


def test_engines_agree_with_the_calls():
    """Both engines take the calls from the plan's segments: the same iteration (contention off)."""
    times = [simulate(_project(CALL, START, tp=2, pp=2, dp=2, gb=8, engine=e)).iteration_time_s
             for e in ("analytic", "event")]
    assert times[0] == pytest.approx(times[1], rel=1e-6)
