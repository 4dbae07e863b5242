"""Megatron's per-parameter gradient hooks (``plan.grad_hooks``): every parameter tensor's hook costs the host
its calls in each micro-batch's backward, and each gradient that gradient-accumulation fusion leaves to the hook
an ``add_`` kernel that streams the gradient and ``main_grad``. Expected counts come from Megatron's GPT layer
(two LayerNorms' γ and β, four linear layers' weight and bias), expected bytes from the dtypes' widths."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.ops import MoERole, OpKind
from tilewright.engine.ir.workload import MoESpec
from tilewright.engine.perf.device import device_model
from tilewright.engine.plan.cuda_graphs import FULL_ITERATION
from tilewright.engine.plan.grad_hooks import ADD_CALLS, HOOK_CALLS, GradHooks, grad_hooks, param_tensors
from tilewright.engine.plan.passes import PassContext, backward_pass, forward_pass
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

from tests.agreement import assert_search_matches_engine

H, SEQ = 512, 1024
TENSORS_PER_LAYER = 2 * 2 + 4 * 2  # two LayerNorms (γ, β), four linear layers (weight, bias)
UNFUSED_PER_LAYER = 2 * 2 + 4  # with fusion: the LayerNorms' and the biases
WEIGHTS = 3 * H * H + H * H + 4 * H * H + 4 * H * H  # QKV, dense, h→4h, 4h→h
BIASES = 3 * H + H + 4 * H + H
NORMS = 2 * 2 * H


def _layer():
    graph = build_workload(GPTSpec(name="gpt", layers=1, hidden=H, heads=8, seq_len=SEQ, vocab=4096))
    return graph.layer_ops(graph.block_layers[0])


def _device(dispatch: float = 1e-3, call: float = 1e-3):
    gpu = load_system("dgx-a100").children[0].children[0]
    c = gpu.compute.model_copy(update={"host_dispatch_s": dispatch, "host_call_s": call})
    return device_model(c, gpu.memories, None, "fp16")


def _context(hooks: GradHooks | None, tp: int = 1, dispatch: float = 1e-3, call: float = 1e-3,
             scope: tuple[str, ...] = ()) -> PassContext:
    ctx = PassContext(_device(dispatch, call), 1, tp, False, 2, cuda_graph_scope=scope)
    ctx.rows_per_sample = SEQ
    ctx.grad_hooks = hooks
    return ctx


def test_a_gpt_layer_has_twelve_tensors_and_eight_unfused():
    """Counted from the op graph: with fusion the LayerNorms' γ, β and the four biases are added by their hooks,
    without it the four weights too."""
    ops = _layer()
    for fusion, n_added, elems in ((True, UNFUSED_PER_LAYER, BIASES + NORMS),
                                   (False, TENSORS_PER_LAYER, WEIGHTS + BIASES + NORMS)):
        counted = [param_tensors(op, SEQ, fusion) for op in ops]
        assert sum(n for n, _ in counted) == TENSORS_PER_LAYER
        assert sum(len(added) for _, added in counted) == n_added
        assert sum(sum(added) for _, added in counted) == pytest.approx(elems)
    assert sum(op.params for op in ops) == pytest.approx(WEIGHTS + BIASES + NORMS)  # nothing else holds any


def test_rmsnorm_and_unbiased_linears_have_fewer_tensors():
    """A LLaMA-style layer (RMSNorm's γ alone, no biases): one tensor per norm and per linear weight, and with
    fusion only the norms' reach an add."""
    graph = build_workload(GPTSpec(name="llama", layers=1, hidden=H, heads=8, seq_len=SEQ, vocab=4096,
                                   norm="rmsnorm", qkv_bias=False, out_bias=False, mlp_bias=False))
    ops = graph.layer_ops(graph.block_layers[0])
    norms = sum(1 for op in ops if op.kind is OpKind.norm)
    weighted = sum(1 for op in ops if op.kind is OpKind.matmul and op.params > 0)
    counted = [param_tensors(op, SEQ, True) for op in ops]
    assert sum(n for n, _ in counted) == norms + weighted
    assert sum(len(added) for _, added in counted) == norms


def test_a_host_bound_backward_pays_every_hook():
    """Host-bound (1 ms per call): the backward of each layer grows by 12 hooks' calls and 8 adds' launches and
    calls with fusion, 12 of each without; the forward does not change."""
    layers = [_layer()] * 3
    base = backward_pass(layers, _context(None))
    call = dispatch = 1e-3
    for fusion, adds in ((True, UNFUSED_PER_LAYER), (False, TENSORS_PER_LAYER)):
        hooked = backward_pass(layers, _context(GradHooks(fusion, 2.0, 2.0)))
        per_layer = TENSORS_PER_LAYER * HOOK_CALLS * call + adds * (ADD_CALLS * call + dispatch)
        host = sum(s.host_s for s in hooked.segments) - sum(s.host_s for s in base.segments)
        assert host == pytest.approx(len(layers) * per_layer, rel=1e-9)
        assert hooked.busy_s - base.busy_s == pytest.approx(len(layers) * per_layer, rel=1e-6)
    fwd = [forward_pass(layers, _context(h)) for h in (None, GradHooks(False, 2.0, 2.0))]
    assert fwd[0].busy_s == fwd[1].busy_s


def test_the_adds_stream_the_gradient_and_main_grad():
    """A free host: what grows is the adds' device time, each kernel its floor plus its bytes (the gradient read,
    ``main_grad`` read and written: 6 B per parameter with fp16's buffer, 10 B with an fp32 one), the
    tensor-parallel linears' shards at 1/tp, the replicated LayerNorms whole."""
    tp = 2
    layers = [_layer()]
    base = backward_pass(layers, _context(None, tp, dispatch=1e-12, call=1e-12))
    dev = _device(1e-12, 1e-12)
    for main_bytes, per_param in ((2.0, 6.0), (4.0, 10.0)):
        for fusion, elems, kernels in ((True, BIASES / tp + NORMS, UNFUSED_PER_LAYER),
                                       (False, (WEIGHTS + BIASES) / tp + NORMS, TENSORS_PER_LAYER)):
            hooked = backward_pass(layers, _context(GradHooks(fusion, 2.0, main_bytes), tp, dispatch=1e-12, call=1e-12))
            added = sum(s.local_bytes for s in hooked.segments) - sum(s.local_bytes for s in base.segments)
            assert added == pytest.approx(per_param * elems, rel=1e-9)
            lower = kernels * dev.compute.fixed_op_s + added / dev.dram_bandwidth
            grown = hooked.busy_s - base.busy_s
            assert lower <= grown <= lower + kernels * dev.stream_ramp_s * 2


def test_graphs_keep_the_hooks_eager_but_a_full_iteration_graph():
    """A graphed layer hands its gradients back to autograd, whose hooks run eagerly: the same host time as
    without graphs. Inside a full-iteration graph the hooks' host work is not paid; their kernels' device time
    stays."""
    layers = [_layer()]
    hooks = GradHooks(True, 2.0, 2.0)
    per_layer = TENSORS_PER_LAYER * HOOK_CALLS * 1e-3 + UNFUSED_PER_LAYER * (ADD_CALLS * 1e-3 + 1e-3)
    for scope, expected in ((("attn", "mlp"), per_layer), ((FULL_ITERATION,), 0.0)):
        graphed = [backward_pass(layers, _context(h, scope=scope)) for h in (None, hooks)]
        host = sum(s.host_s for s in graphed[1].segments) - sum(s.host_s for s in graphed[0].segments)
        assert host == pytest.approx(expected, rel=1e-9, abs=1e-15)
        assert sum(s.local_bytes for s in graphed[1].segments) > sum(s.local_bytes for s in graphed[0].segments)


def _project(dtype: str = "fp16", fusion: bool = True, mode: str = "train", engine: str = "analytic",
             grad_fp32: bool = True) -> Project:
    spec = GPTSpec(name="tiny", layers=4, hidden=256, heads=4, seq_len=256, vocab=2048)
    return Project(
        name="tiny", hardware=load_system("dgx-a100"), workload=spec,
        mapping=Mapping(tp=2, pp=1, dp=1, micro_batch=1, global_batch=4, recompute="full",
                        gradient_accumulation_fusion=fusion, grad_reduce_in_fp32=grad_fp32),
        run=RunSettings(dtype=dtype, engine=engine, contention=False, mode=mode),
    )


def test_widths_follow_the_run():
    """fp16 keeps an fp16 buffer (Megatron's default), bf16 an fp32 one unless grad_reduce_in_fp32 is off;
    fp32 training adds fp32 gradients; inference has no backward and no hooks."""
    for dtype, grad_fp32, per_param in (("fp16", True, 6.0), ("bf16", True, 10.0), ("bf16", False, 6.0),
                                        ("fp32", True, 12.0)):
        hooks = grad_hooks(_project(dtype, grad_fp32=grad_fp32), 4.0 if dtype == "fp32" else 2.0)
        assert hooks is not None and hooks.add_bytes == per_param
    assert grad_hooks(_project(mode="infer"), 2.0) is None
    assert grad_hooks(_project(fusion=False), 2.0).fusion is False


def test_the_flag_is_quiet_and_fusion_is_the_default():
    """Megatron's default (fusion on) saves as before; turning it off is kept in the file."""
    assert Mapping().gradient_accumulation_fusion is True
    assert "gradient_accumulation_fusion" not in Mapping().model_dump(mode="json")
    assert Mapping(gradient_accumulation_fusion=False).model_dump(mode="json")["gradient_accumulation_fusion"] is False


def test_the_plan_carries_the_hooks_and_engines_agree():
    """The plan's backward passes carry the hooks (more without fusion); both engines take them from the plan."""
    plans = [make_plan(_project(fusion=f)) for f in (True, False)]
    b = [p.stages[0].passes[(0, "B")].busy_s for p in plans]
    assert b[1] > b[0]
    for fusion in (True, False):
        times = [simulate(_project(fusion=fusion, engine=e)).iteration_time_s for e in ("analytic", "event")]
        assert times[0] == pytest.approx(times[1], rel=1e-6)


@pytest.mark.parametrize("fusion", [True, False])
def test_the_search_times_the_hooks_as_the_engine(fusion: bool):
    """The search's evaluator builds its passes from the same context (``OpSettings``): the same iteration with
    fusion on and off, and the hooks change it."""
    spec = GPTSpec(name="gpt-agree", layers=8, hidden=1024, heads=16, seq_len=1024, vocab=8192)
    base = Project(name="agree", hardware=load_system("dgx-a100"), workload=spec,
                   mapping=Mapping(micro_batch=1, global_batch=16, gradient_accumulation_fusion=fusion),
                   run=RunSettings(dtype="fp16", mode="train", engine="analytic", contention=False))
    p = assert_search_matches_engine(base, Candidate(4, 2, 1, 1), keep_base=True)
    assert p.mapping.gradient_accumulation_fusion is fusion


def test_cli_flag_turns_fusion_off(capsys):
    """``tilewright run --no-gradient-accumulation-fusion`` times the unfused hooks: a slower iteration."""
    base = ["--system", "dgx-a100", "--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads", "16",
            "--seq-len", "1024", "--vocab", "51200", "--tp", "8", "--global-batch", "8", "--json"]
    times = []
    for extra in ([], ["--no-gradient-accumulation-fusion"]):
        assert main(["run", *base, *extra]) == 0
        times.append(json.loads(capsys.readouterr().out)["iteration_time_s"])
    assert times[1] > times[0]


def test_an_moe_router_weight_is_never_fused():
    """Megatron-Core's router multiplies by a plain parameter: its hook adds the gradient even with fusion; the
    routed experts' grouped weights are fused."""
    spec = LlamaSpec(name="moe", layers=1, hidden=H, heads=8, ffn=4 * H, vocab=4096, seq_len=SEQ,
                     moe=MoESpec(experts=8, top_k=2, expert_ffn=H))
    graph = build_workload(spec)
    ops = graph.layer_ops(graph.block_layers[0])
    router = next(op for op in ops if op.moe is not None and op.moe.role is MoERole.router)
    assert param_tensors(router, SEQ, True) == (1, [router.params])
    experts = [op for op in ops if op.moe is not None and op.moe.role is MoERole.expert and op.params > 0]
    assert experts and all(param_tensors(op, SEQ, True) == (1, []) for op in experts)
