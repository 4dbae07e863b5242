"""CUDA-graphed training (``plan.cuda_graphs``, ``mapping.cuda_graph_scope``): the captured ops' host dispatch
vanishes, one graph launch (one ``host_dispatch_s``) per run of captured ops and pass remains.

Expected host times are restated from ``plan.launch``'s docstring (Megatron-LM's GPT layer: 16 kernels and 100
other calls forward, 30 and 68 backward; the attention part alone 10 and 67 forward) and ``plan.moe_host``'s
(router, routing and the dispatcher's preprocessing), times the preset's per-kernel and per-call costs."""

from __future__ import annotations

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.workload import MoESpec
from tilewright.engine.plan.checks import check_project
from tilewright.engine.plan.grad_hooks import ADD_CALLS, HOOK_CALLS, param_tensors
from tilewright.engine.plan.launch import host_seconds
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

LAYERS, HIDDEN, HEADS, SEQ, VOCAB = 12, 1024, 16, 1024, 51200  # a vTrain-style small GPT
FIELD = "mapping.cuda_graph_scope"


def _gpt(scope: list[str] | None, tp: int = 8, mb: int = 1, engine: str = "analytic", **mapping) -> Project:
    spec = GPTSpec(name="small", layers=LAYERS, hidden=HIDDEN, heads=HEADS, seq_len=SEQ, vocab=VOCAB)
    return Project(name="small", hardware=load_system("dgx-a100"), workload=spec,
                   mapping=Mapping(tp=tp, dp=8 // tp, micro_batch=mb, global_batch=8 * mb, cuda_graph_scope=scope,
                                   **mapping),
                   run=RunSettings(dtype="fp16", engine=engine, contention=False))


def _moe(scope: list[str] | None, capacity: float | None = None, **mapping) -> Project:
    spec = LlamaSpec(name="moe", layers=2, hidden=1024, heads=16, ffn=4096, vocab=32000, seq_len=1024,
                     moe=MoESpec(experts=16, top_k=2, expert_ffn=1024, capacity_factor=capacity))
    return Project(name="moe", hardware=load_system("dgx-h100"), workload=spec,
                   mapping=Mapping(tp=1, dp=8, ep=4, micro_batch=1, global_batch=16, cuda_graph_scope=scope,
                                   **mapping),
                   run=RunSettings(dtype="bf16", engine="analytic", contention=False))


def _host(plan, kind: str) -> float:
    return sum(s.host_s for st in plan.stages for (_c, k), ps in st.passes.items() if k == kind for s in ps.segments)


def _compute(project: Project):
    return make_plan(project).stages[0].dev.compute


@pytest.mark.parametrize(
    "scope,forward,backward",
    [
        (["attn", "mlp"], (16, 100, 2), (30, 68, 2)),  # the whole layer: one graph per pass
        (["attn"], (10, 67, 1), (3 + 3 + 5 + 1 + 1 + 3 + 1 + 1, 5 + 8 + 12 + 5 + 1 + 8 + 1 + 2, 1)),
    ],
)
def test_graphs_remove_the_captured_ops_host_dispatch(scope, forward, backward):
    """Per layer and pass: the captured ops' kernels, calls and tensor-parallel collective calls (``plan.launch``:
    attention's and the MLP's all-reduce forward, the QKV's and h→4h's input gradients' backward) are no longer
    issued by the host, one graph launch is. Attention part backward: norm (3 kernels, 5 calls), qkv (3, 8), the
    core (5, 12), softmax (1, 5), attention dropout (1, 1), out_proj (3, 8), dropout1 (1, 1), the residual add
    (1, 2)."""
    eager, graphed = _gpt(None), _gpt(scope)
    c = _compute(eager)
    for kind, (kernels, calls, collectives) in (("F", forward), ("B", backward)):
        removed = _host(make_plan(eager), kind) - _host(make_plan(graphed), kind)
        expected = LAYERS * (kernels * c.host_dispatch_s + calls * c.host_call_s - c.host_dispatch_s
                             + collectives * c.host_collective_s)
        assert removed == pytest.approx(expected, rel=1e-9)


def test_a_host_bound_small_gpt_waits_less_and_runs_faster_with_the_same_memory():
    eager, graphed = simulate(_gpt(None)), simulate(_gpt(["attn", "mlp"]))
    assert eager.time_breakdown_s["host_wait"] > 0.2 * eager.iteration_time_s  # the case graphs are for
    assert graphed.time_breakdown_s["host_wait"] < 0.25 * eager.time_breakdown_s["host_wait"]
    assert graphed.iteration_time_s < eager.iteration_time_s
    assert graphed.memory_breakdown_bytes == eager.memory_breakdown_bytes  # graph pools not modelled


@pytest.mark.parametrize("scope", [["attn"], ["mlp"], ["attn", "mlp"], ["full_iteration"]])
@pytest.mark.parametrize("tp,mb", [(8, 1), (2, 4), (1, 8)])
def test_time_never_increases(scope, tp, mb):
    eager, graphed = simulate(_gpt(None, tp, mb)), simulate(_gpt(scope, tp, mb))
    assert graphed.iteration_time_s <= eager.iteration_time_s * (1 + 1e-12)
    assert graphed.time_breakdown_s["host_wait"] <= eager.time_breakdown_s["host_wait"] * (1 + 1e-12)


def test_full_iteration_charges_no_launch_per_pass():
    """One graph for the whole forward-backward: no op of any layer (embedding and loss too) issues anything,
    and no pass waits on the host (the training step's per-pass syncs cannot be captured: ``plan.train_step``)."""
    plan = make_plan(_gpt(["full_iteration"]))
    segments = [s for st in plan.stages for ps in st.passes.values() for s in ps.segments]
    assert segments and [s.host_s for s in segments] == [0.0] * len(segments)


def _dgx(scope: list[str] | None, engine: str = "analytic", dtype: str = "fp16") -> Project:
    """tp 2 × pp 2 × dp 2 on one DGX A100: every kind of per-pass sync (timers, the batch broadcast's sizes,
    pipeline sends) and the data-parallel reduction's."""
    spec = GPTSpec(name="small", layers=4, hidden=HIDDEN, heads=HEADS, seq_len=SEQ, vocab=VOCAB)
    return Project(name="small", hardware=load_system("dgx-a100"), workload=spec,
                   mapping=Mapping(tp=2, pp=2, dp=2, micro_batch=1, global_batch=8, cuda_graph_scope=scope),
                   run=RunSettings(dtype=dtype, engine=engine, contention=False))


def _lead(plan, label: str) -> list[tuple[int, str, float]]:
    """(stage, pass kind, host seconds or bytes) of the training step's segments called ``label``."""
    return [(st.rank, k, s.host_s if s.comm is None else s.comm[1])
            for st in plan.stages for (_c, k), ps in st.passes.items() for s in ps.segments if s.label == label]


def test_full_iteration_drops_the_per_pass_syncs_and_keeps_the_batch_broadcast():
    """Eager (Megatron-LM's training step, ``plan.train_step``): stage 0's forward drains 3 times (the sizes'
    .cpu(), two timers) + 1 pipeline send, its backward once; stage 1 (last) forward 3, backward 1 + 1 send.
    Under full_iteration none of them: the schedule runs inside the captured region. The token broadcast
    (micro-batch × (sequence + 1) int64) is an NCCL collective the graph replays: it stays; the key sizes'
    broadcast goes with its .cpu()."""
    c = _compute(_dgx(None))
    drain = c.host_sync_s + c.host_dispatch_s
    eager, graphed = make_plan(_dgx(None)), make_plan(_dgx(["full_iteration"]))
    got = sorted(_lead(eager, "host synchronisation"))
    want = [(0, "B", drain), (0, "F", 4 * drain), (1, "B", 2 * drain), (1, "F", 3 * drain)]
    assert [g[:2] for g in got] == [w[:2] for w in want]
    assert [g[2] for g in got] == pytest.approx([w[2] for w in want], rel=1e-12)
    assert _lead(graphed, "host synchronisation") == []
    tokens = 1 * (SEQ + 1) * 8
    assert sorted(_lead(eager, "batch broadcast")) == sorted(_lead(graphed, "batch broadcast")) == [
        (0, "F", tokens), (1, "F", tokens)]
    assert len(_lead(eager, "batch sizes broadcast")) == 2 and _lead(graphed, "batch sizes broadcast") == []


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_full_iteration_keeps_the_optimizer_steps_syncs(dtype):
    """``optimizer.step()`` runs after the replayed graph, eagerly: its norm .item(), copy-back timer and (fp16)
    found-inf .item() stay; only the data-parallel reduction's timer drain (``finalize_model_grads``, inside
    ``forward_backward_func``) goes, one drain, and only with replicas."""
    from tilewright.engine.plan.train_step import step_overhead

    dev = make_plan(_dgx(None)).stages[0].dev
    drain = dev.compute.host_sync_s + dev.compute.host_dispatch_s
    fp16 = dtype == "fp16"
    for dp in (1, 2):
        eager = step_overhead(dev, None, 1e8, True, fp16, 1e-5, dp)
        graphed = step_overhead(dev, None, 1e8, True, fp16, 1e-5, dp, full_iteration=True)
        assert eager - graphed == pytest.approx(drain if dp > 1 else 0.0, abs=1e-15)
        assert graphed > (2 + fp16) * drain  # the step's own drains and flag all-reduces remain


def test_full_iteration_is_faster_and_both_engines_agree():
    runs = {e: simulate(_dgx(["full_iteration"], engine=e)) for e in ("analytic", "event")}
    assert runs["analytic"].iteration_time_s == pytest.approx(runs["event"].iteration_time_s, rel=1e-9)
    assert runs["analytic"].iteration_time_s < simulate(_dgx(None)).iteration_time_s


def test_both_engines_agree():
    runs = [simulate(_gpt(["attn"], engine=e)) for e in ("analytic", "event")]
    assert runs[0].iteration_time_s == pytest.approx(runs[1].iteration_time_s, rel=1e-9)
    assert runs[0].time_breakdown_s["host_wait"] == pytest.approx(runs[1].time_breakdown_s["host_wait"], rel=1e-9)


def test_moe_router_and_preprocess_remove_megatron_cores_counted_groups():
    """Dropless MoE: the pre-MLP norm (generic norm: 1 kernel and 8 calls forward, 3 and 5 backward), the router
    (3, 9; 3, 3), routing (22, 27; 11, 8) and the dispatcher before the host sync (15, 36; nothing backward)
    replay as one graph; the experts, all-to-alls and combine stay eager."""
    eager, graphed = _moe(None), _moe(["moe_router", "moe_preprocess"])
    c = _compute(eager)
    for kind, kernels, calls in (("F", 1 + 3 + 22 + 15, 8 + 9 + 27 + 36), ("B", 3 + 3 + 11, 5 + 3 + 8)):
        removed = _host(make_plan(eager), kind) - _host(make_plan(graphed), kind)
        expected = 2 * (kernels * c.host_dispatch_s + calls * c.host_call_s - c.host_dispatch_s)
        assert removed == pytest.approx(expected, rel=1e-9)


def test_router_alone_leaves_the_preprocessing_eager():
    c = _compute(_moe(None))
    router = make_plan(_moe(["moe_router"]))
    both = make_plan(_moe(["moe_router", "moe_preprocess"]))
    assert _host(router, "F") - _host(both, "F") == pytest.approx(2 * (15 * c.host_dispatch_s + 36 * c.host_call_s))


def _messages(project: Project) -> list[str]:
    return [p.reason for p in check_project(project) if p.path == FIELD]


@pytest.mark.parametrize(
    "project,fragment",
    [
        (_gpt(["attn", "nope"]), "unknown scope nope"),
        (_gpt(["moe_router"]), "'moe_router': the model has nothing it captures"),
        (_gpt(["mamba"]), "no Mamba layers"),
        (_gpt(["full_iteration", "attn"]), "takes no other scope"),
        (_gpt([]), "at least one scope"),
        (_gpt(["attn"], recompute="selective"), "re-runs core_attn"),
        (_gpt(["mlp"], recompute="full"), "full recomputation"),
        (_gpt(["full_iteration"], recompute="selective"), "activation recomputation"),
        (_moe(["moe_preprocess"]), "'moe_preprocess' needs 'moe_router'"),
        (_moe(["moe"]), "drop-and-pad MoE only"),
        (_moe(["moe", "moe_router"], capacity=1.0), "give 'moe' or 'moe_router'"),
        (_moe(["mlp"]), "no dense MLP"),
        (_moe(["full_iteration"]), "cannot capture dropless MoE"),
    ],
)
def test_bad_scopes_are_refused_naming_the_field(project, fragment):
    assert any(fragment in m for m in _messages(project)), _messages(project)


@pytest.mark.parametrize(
    "project",
    [_gpt(["attn", "mlp"]), _gpt(["full_iteration"]), _gpt(["mlp"], recompute="selective"),
     _moe(["attn", "moe_router", "moe_preprocess"]), _moe(["moe"], capacity=1.0),
     _moe(["full_iteration"], capacity=1.0)],
)
def test_megatron_combinations_are_accepted(project):
    assert _messages(project) == []


def test_moe_scope_on_drop_and_pad_graphs_the_whole_moe_layer():
    """With a capacity factor there is no host sync: attention and the MoE layer (norm, router, routing,
    dispatcher kernels, experts, combine, residual) replay as one graph per layer and pass. What is left on the
    host beyond full_iteration's nothing: the embedding's and head's ops, eager (``launch.host_seconds``,
    read as a primitive), one launch per layer, and the training step's per-pass drains (tp 1, pp 1: three
    per forward, one per backward; ``plan.train_step``), each forward's get_batch beyond its broadcasts (7
    launches, 10 calls: ``plan.train_step``), the backward's ``backward()`` start-up and every parameter's
    gradient hook (``plan.grad_hooks``: eager after a graphed layer), which full_iteration does not have."""
    project = _moe(["attn", "moe"], capacity=1.0)
    c = _compute(project)
    graph = build_workload(project.workload)
    outside = [op for i in range(len(graph.layers)) if i not in graph.block_layers for op in graph.layer_ops(i)]
    whole = make_plan(_moe(["full_iteration"], capacity=1.0))
    drain = c.host_sync_s + c.host_dispatch_s
    for kind, drains in (("F", 3), ("B", 1)):
        eager_rest = sum(host_seconds(op, kind == "B", c) for op in outside)
        left = _host(make_plan(project), kind) - _host(whole, kind)
        start = c.host_backward_s if kind == "B" else 0.0
        hooks = sum(_hooks_host(op, graph.tokens_per_sample, c) for op in graph.ops()) if kind == "B" else 0.0
        batch = 7 * c.host_dispatch_s + 10 * c.host_call_s if kind == "F" else 0.0
        assert left == pytest.approx(eager_rest + 2 * c.host_dispatch_s + drains * drain + start + hooks + batch,
                                     rel=1e-9)


def _hooks_host(op, tokens: int, c) -> float:
    """One op's gradient hooks' host time with gradient-accumulation fusion (``plan.grad_hooks``)."""
    tensors, added = param_tensors(op, tokens, True)
    return tensors * HOOK_CALLS * c.host_call_s + len(added) * (ADD_CALLS * c.host_call_s + c.host_dispatch_s)


def test_cli_flag(capsys):
    base = ["--system", "dgx-a100", "--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads", "16",
            "--seq-len", "1024", "--vocab", "51200", "--tp", "8", "--global-batch", "8", "--json"]
    code = main(["run", *base, "--cuda-graph-scope", "attn,moe_router"])
    err = capsys.readouterr().err
    assert code == 2 and FIELD in err and "moe_router" in err and "Traceback" not in err
    assert main(["run", *base, "--cuda-graph-scope", "attn,mlp"]) == 0
    capsys.readouterr()


def test_the_plans_optimizer_step_loses_the_reductions_drain_under_full_iteration():
    """The plan passes the scope to the step (``train_step.step_overhead``): with dp 2 the optimizer's time is
    one drain shorter under full_iteration, in both engines."""
    c = _compute(_dgx(None))
    drain = c.host_sync_s + c.host_dispatch_s
    for engine in ("analytic", "event"):
        eager = simulate(_dgx(None, engine=engine)).time_breakdown_s["optimizer"]
        graphed = simulate(_dgx(["full_iteration"], engine=engine)).time_breakdown_s["optimizer"]
        assert eager - graphed == pytest.approx(drain, rel=1e-9)
