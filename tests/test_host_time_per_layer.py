"""Host time of a Megatron-LM GPT layer on the DGX presets (``engine.plan.launch``), derived by hand from the
preset's per-call constants and Megatron's per-layer counts, and the presets' per-kernel cost checked against the
published host measurements their comment cites (not against any training-step time)."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec
from tilewright.engine.ir.hardware import Compute
from tilewright.engine.perf.device import device_model
from tilewright.engine.plan.launch import host_seconds
from tilewright.engine.plan.passes import PassContext, backward_pass, forward_pass
from tilewright.engine.workloads import build_workload

# Megatron-LM's GPT layer (megatron/model/transformer.py, unfused attention, fused LayerNorm, bias-GeLU and
# bias-dropout-add): kernels and framework calls that launch nothing, forward and backward (launch.py docstring).
FWD_KERNELS, BWD_KERNELS = 16, 30
FWD_CALLS, BWD_CALLS = 100, 68
PRESETS = ("dgx-a100", "dgx-h100")


def _compute(system: str) -> Compute:
    return load_system(system).children[0].children[0].compute


def _layer(hidden: int = 1024, heads: int = 16, seq: int = 1024):
    spec = GPTSpec(name="gpt", layers=2, hidden=hidden, heads=heads, seq_len=seq, vocab=4096)
    graph = build_workload(spec)
    return graph.layer_ops(graph.block_layers[0])


@pytest.mark.parametrize("system", PRESETS)
def test_a_layers_host_time_is_its_calls_times_the_presets_costs(system):
    """Forward: 16 kernel-issuing calls at host_dispatch_s and 100 others at host_call_s; backward 30 and 68."""
    c = _compute(system)
    ops = _layer()
    for backward, n_kernels, n_calls in ((False, FWD_KERNELS, FWD_CALLS), (True, BWD_KERNELS, BWD_CALLS)):
        expected = n_kernels * c.host_dispatch_s + n_calls * c.host_call_s
        assert sum(host_seconds(op, backward, c) for op in ops) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("system", PRESETS)
def test_a_tiny_layer_on_the_preset_lasts_its_host_time(system):
    """A layer whose kernels take the device far less than the host needs to issue them (hidden 64, sequence 128,
    micro-batch 1, tp 1: one segment per pass) lasts exactly its host time, forward and backward, and the time
    the device waits is the host time less what the device needs."""
    gpu = load_system(system).children[0].children[0]
    dev = device_model(gpu.compute, gpu.memories, None, "bf16")
    c = gpu.compute
    layers = [_layer(hidden=64, heads=2, seq=128)]
    ctx = PassContext(dev, 1, 1, False, 2)
    for build, n_kernels, n_calls in ((forward_pass, FWD_KERNELS, FWD_CALLS), (backward_pass, BWD_KERNELS, BWD_CALLS)):
        host = n_kernels * c.host_dispatch_s + n_calls * c.host_call_s
        ps = build(layers, ctx)
        assert ps.busy_s == pytest.approx(host, rel=1e-9)
        assert 0 < ps.dispatch_wait_s < host


def _eager_rmsnorm_forward_s(c: Compute, bf16: bool) -> float:
    """An eager RMSNorm forward in T5LayerNorm's form: the module call, pow, mean, add, rsqrt and two multiplies
    (six kernels); fp32 also calls a cast to its own format that launches nothing, bf16's casts to fp32 and back
    launch (eight kernels)."""
    if bf16:
        return 8 * c.host_dispatch_s + 1 * c.host_call_s
    return 6 * c.host_dispatch_s + 2 * c.host_call_s


def test_the_a100_hosts_per_kernel_cost_matches_measured_eager_forwards():
    """NVIDIA/apex PR #1274 (A100, torch.utils.benchmark, [8, 28, 1024], host-bound): an eager RMSNorm forward
    takes 66.1 µs in fp32 and 78.4 µs in bf16. The preset's constants predict both within 10 %."""
    c = _compute("dgx-a100")
    assert _eager_rmsnorm_forward_s(c, bf16=False) == pytest.approx(66.1e-6, rel=0.10)
    assert _eager_rmsnorm_forward_s(c, bf16=True) == pytest.approx(78.4e-6, rel=0.10)


@pytest.mark.parametrize("system", PRESETS)
def test_a_linear_modules_forward_matches_the_measured_cpu_time(system):
    """torch.nn.Linear's forward, a module call and F.linear's one GEMM, costs 13.48 µs of CPU on a DGX H100 host
    (NVIDIA/TransformerEngine issue #2053); the A100 host measures alike on the eager ops above."""
    c = _compute(system)
    assert c.host_call_s + c.host_dispatch_s == pytest.approx(13.48e-6, rel=0.10)
