"""Eager PyTorch's pointwise kernel chains (``perf.eager_ops``, ``mapping.host_framework`` 'pytorch'): the kernels
and bytes of one RMSNorm and of the SwiGLU product derived here by running their programs over symbolic tensors,
what the passes charge for them, and that both engines and the search agree."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.perf.device import device_model
from tilewright.engine.perf.eager_ops import eager_chain, gated_activation_chain, rmsnorm_chain
from tilewright.engine.plan.framework_host import host_framework
from tilewright.engine.plan.launch import host_seconds, kernels
from tilewright.engine.plan.passes import PassContext, backward_pass, forward_pass
from tilewright.engine.simulate import simulate
from tilewright.engine.workloads import build_workload

from tests.agreement import assert_engines_agree


# -- a symbolic eager PyTorch: each call one kernel, bytes per element of the op's N-element tensor ----------------
@dataclass(frozen=True)
class T:
    width: float  # bytes per element
    rows: bool = False  # one value per row (a mean, rstd, the weight): negligible bytes per element


class Eager:
    """Runs a program op by op as eager PyTorch does: each ATen call a kernel that reads its full-size operands
    and writes its output; views (reshape, expand, a no-op cast) launch nothing."""

    def __init__(self) -> None:
        self.kernels: list[float] = []

    def call(self, *inputs: T, out: float, rows: bool = False) -> T:
        read = sum(t.width for t in inputs if not t.rows)
        self.kernels.append(read + (0.0 if rows else out))
        return T(out, rows)

    def to(self, x: T, width: float) -> T:  # Tensor.float() / type_as: no kernel when the dtype is already right
        return x if x.width == width else self.call(x, out=width)


def rmsnorm_forward(e: Eager, a: float) -> dict[str, T]:
    """torchtitan ``RMSNorm.forward``: ``_norm(x.float()).type_as(x) * weight``, ``_norm`` =
    ``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)``."""
    x, w = T(a), T(a, rows=True)
    xf = e.to(x, 4)
    sq = e.call(xf, out=4)  # pow(2)
    mean = e.call(sq, out=4, rows=True)  # mean(-1, keepdim=True)
    var = e.call(mean, out=4, rows=True)  # + eps
    rstd = e.call(var, out=4, rows=True)  # rsqrt
    n = e.call(xf, rstd, out=4)  # x * rstd
    y = e.to(n, a)  # type_as(x)
    out = e.call(y, w, out=a)  # * weight
    return {"x": x, "xf": xf, "rstd": rstd, "y": y, "w": w, "out": out}


def rmsnorm_backward(e: Eager, a: float, s: dict[str, T]) -> None:
    """Autograd over the forward above, each node's derivative as ``derivatives.yaml`` defines it."""
    g = T(a)
    gy = e.call(g, s["w"], out=a)  # mul: grad * other
    gw = e.call(g, s["y"], out=a)  # mul: grad * self, then summed to the weight's shape
    e.call(gw, out=a, rows=True)
    gn = e.to(gy, 4)  # type_as's backward: the cast back to fp32
    gx1 = e.call(gn, s["rstd"], out=4)  # mul: grad * rstd
    grf = e.call(gn, s["xf"], out=4)  # mul: grad * x, summed to rstd's shape
    gr = e.call(grf, out=4, rows=True)
    cube = e.call(s["rstd"], out=4, rows=True)  # rsqrt: -0.5 * grad * result.pow(3)
    half = e.call(gr, out=4, rows=True)
    gvar = e.call(half, cube, out=4, rows=True)
    gsq = e.call(gvar, out=4)  # + eps passes it on; mean: grad.expand(...) / numel, written whole
    one = e.call(s["xf"], out=4)  # pow_backward: grad * (2 * x.pow(1)); x.pow(1) a copy
    two = e.call(one, out=4)
    gx2 = e.call(gsq, two, out=4)
    gxf = e.call(gx1, gx2, out=4)  # autograd sums the two gradients reaching x.float()
    e.to(gxf, a)  # float()'s backward


def swiglu(e: Eager, a: float, backward: bool) -> None:
    """torchtitan ``FeedForward``: ``silu(w1(x)) * w3(x)`` over the ffn-wide tensors; backward mul's two
    gradients and ``silu_backward(grad, w1(x))``."""
    h1, h3 = T(a), T(a)
    if not backward:
        act = e.call(h1, out=a)
        e.call(act, h3, out=a)
        return
    g, act = T(a), T(a)
    e.call(g, h3, out=a)
    e.call(g, act, out=a)
    e.call(T(a), h1, out=a)


@pytest.mark.parametrize("a", [2.0, 4.0])
def test_one_rmsnorms_kernels_and_bytes_derived(a):
    """bf16 (2 B): 8 kernels forward moving 36 B per element, 16 backward moving 92 B; fp32 (4 B): the casts
    launch nothing."""
    e = Eager()
    saved = rmsnorm_forward(e, a)
    assert rmsnorm_chain(a, False) == pytest.approx(tuple(e.kernels))
    forward = list(e.kernels)
    e.kernels.clear()
    rmsnorm_backward(e, a, saved)
    assert rmsnorm_chain(a, True) == pytest.approx(tuple(e.kernels))
    if a == 2.0:
        assert (len(forward), sum(forward)) == (8, 36.0)
        assert (len(e.kernels), sum(e.kernels)) == (16, 92.0)
    else:
        assert (len(forward), len(e.kernels)) == (6, 14)


@pytest.mark.parametrize("backward", [False, True])
def test_the_swiglu_products_kernels_derived(backward):
    e = Eager()
    swiglu(e, 2.0, backward)
    assert gated_activation_chain(2.0, backward) == pytest.approx(tuple(e.kernels))


# -- the passes ------------------------------------------------------------------------------------------------------
def _llama(layers: int = 2, hidden: int = 2048, seq: int = 4096) -> LlamaSpec:
    return LlamaSpec(name="llama-eager", layers=layers, hidden=hidden, heads=16, kv_heads=4, ffn=5632, seq_len=seq,
                     vocab=8192)


def _layer(spec: LlamaSpec):
    graph = build_workload(spec)
    return graph.layer_ops(graph.block_layers[0])


def _gpu():
    return load_system("dgx-h100").children[0].children[0]


def _busy(layer, framework: str, backward: bool, fusion=frozenset()) -> float:
    gpu = _gpu()
    ctx = PassContext(device_model(gpu.compute, gpu.memories, None, "bf16"), 1, 1, False, 2)
    ctx.host_framework = framework
    if fusion:
        ctx.fused = fusion
    return (backward_pass if backward else forward_pass)([layer], ctx).busy_s


def test_which_ops_run_as_chains():
    layer = _layer(_llama())
    chained = {op.name.split(".", 1)[-1] for op in layer if eager_chain(op, False, 2.0) is not None}
    assert chained == {"norm1", "norm2", "activation"}  # residual adds, projections and attention: one kernel


@pytest.mark.parametrize("backward", [False, True])
def test_a_large_layer_pays_the_chains_bytes_at_the_achievable_bandwidth(backward):
    """A layer whose pointwise tensors are hundreds of MB: the eager layer's device time exceeds the fused one's
    by the chains' extra bytes at the achievable bandwidth, plus at most each extra kernel's floor and ramp."""
    spec = _llama()
    layer = _layer(spec)
    gpu = _gpu()
    dev = device_model(gpu.compute, gpu.memories, None, "bf16")
    n, m = spec.seq_len * spec.hidden, spec.seq_len * 5632  # a norm's elements, the activation's output's
    norm_bytes, act_bytes = ((92 - 6) * n, (18 - 10) * m) if backward else ((36 - 4) * n, (10 - 6) * m)
    extra = (2 * norm_bytes + act_bytes) / dev.dram_bandwidth
    more_kernels = 2 * (16 - 3) + (3 - 1) if backward else 2 * (8 - 1) + (2 - 1)
    slack = more_kernels * (gpu.compute.fixed_op_s + dev.stream_ramp_s)
    delta = _busy(layer, "pytorch", backward) - _busy(layer, "megatron-lm", backward)
    assert extra <= delta <= extra + slack


def test_compile_and_megatron_keep_one_pass():
    # the pointwise chains alone: Megatron's causal softmax kernel (score_kernels) is another framework difference
    layer = [op.model_copy(update={"causal_keys": 0}) for op in _layer(_llama())]
    for backward in (False, True):
        fused = _busy(layer, "megatron-lm", backward)
        assert _busy(layer, "pytorch-compile", backward) == pytest.approx(fused, rel=1e-12)
        assert _busy(layer, "mcore-te", backward) == pytest.approx(fused, rel=1e-12)


def test_a_fused_norm_is_one_pass():
    """torch.compile's fusion residual1 → norm2 (mapping.fusion) keeps norm2 one pass even under 'pytorch': the
    eager layer gets cheaper by norm2's chain."""
    layer = _layer(_llama())
    edge = frozenset({("residual1", "norm2")})
    assert _busy(layer, "pytorch", False, edge) < _busy(layer, "pytorch", False)


def test_a_tiny_layer_lasts_its_hosts_launches():
    """A host-bound layer (hidden 64, sequence 128) lasts its host time: v2.x's counts plus one launch per eager
    kernel beyond what v2.x counts (RMSNorm 8 forward and 16 backward against 1 and 3; SwiGLU 2 and 3 against 1)."""
    layer = _layer(LlamaSpec(name="tiny", layers=2, hidden=64, heads=2, kv_heads=2, ffn=128, seq_len=128,
                             vocab=512))
    c = _gpu().compute
    norm = next(op for op in layer if op.kind is OpKind.norm)
    assert (kernels(norm, False), kernels(norm, True)) == (1, 3)
    for backward, more in ((False, 2 * (8 - 1) + (2 - 1)), (True, 2 * (16 - 3) + (3 - 1))):
        v2 = sum(host_seconds(op, backward, c, "pytorch") for op in layer)
        assert _busy(layer, "pytorch", backward) == pytest.approx(v2 + more * c.host_dispatch_s, rel=1e-9)


def test_the_framework_resolves_for_gpu_training_only():
    gpu = _gpu().compute
    assert host_framework("pytorch", gpu, True) == "pytorch"
    assert host_framework("pytorch", gpu, False) == "megatron-lm"  # a serving runtime's layers
    assert Mapping(host_framework="pytorch-compile").model_dump(mode="json")["host_framework"] == "pytorch-compile"


def _project(framework: str, engine: str = "analytic") -> Project:
    return Project(name="eager", hardware=load_system("dgx-h100"), workload=_llama(seq=2048),
                   mapping=Mapping(tp=2, pp=2, dp=2, micro_batch=1, global_batch=8, host_framework=framework,
                                   fusion=[["attention", "softmax"]]),
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def test_both_engines_agree_on_an_eager_run():
    analytic, event = simulate(_project("pytorch")), simulate(_project("pytorch", "event"))
    assert_engines_agree(analytic, event)
    assert analytic.iteration_time_s > simulate(_project("pytorch-compile")).iteration_time_s


def test_the_search_times_eager_pytorch_as_the_engine():
    from tilewright.engine.search.parallel.candidate import Candidate

    from tests.agreement import assert_search_matches_engine
    from tests.engine_cases import dgx

    times = {}
    for framework in ("megatron-lm", "pytorch"):
        p = assert_search_matches_engine(dgx(pp=2), Candidate(2, 2, 2, 1), keep_base=True, host_framework=framework)
        times[framework] = simulate(p).iteration_time_s
    assert times["pytorch"] > times["megatron-lm"]


def test_the_torchtitan_rows_carry_their_frameworks():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from calibrate_fsdp import project_for, rows

    for r in rows():
        want = "pytorch-compile" if r.pub.compile else "pytorch"
        assert project_for(r).mapping.host_framework == want
