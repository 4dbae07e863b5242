"""Host time of a GPT layer under Megatron-Core's and Transformer Engine's Python (``plan.framework_host``), derived
by hand from the sources the module cites — the measured CPU time of one linear module's forward (NVIDIA/
TransformerEngine pull request #1191: Megatron-Core's ``ColumnParallelLinear`` 74 µs, ``TEColumnParallelLinear``
140 µs) and the calls counted in TE's ``_Linear``/``_LayerNormLinear`` — and the era default that picks the
framework (never against any training-step time)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping
from tilewright.engine.ir.hardware import Compute, RuntimeGraphs
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.perf.device import device_model
from tilewright.engine.plan.framework_host import host_framework
from tilewright.engine.plan.launch import host_seconds, kernels
from tilewright.engine.plan.passes import PassContext, backward_pass, forward_pass
from tilewright.engine.workloads import build_workload

PRESETS = ("dgx-a100", "dgx-h100")
# Megatron-LM v2.x's GPT layer (plan.launch): launches and other calls, forward and backward
V2_FWD, V2_BWD = (16, 100), (30, 68)
V2_LINEAR = ((1, 8), (3, 8))  # one linear's (launches, calls), forward and backward (plan.launch)
V2_NORM = ((1, 8), (3, 5))
LINEARS, NORMS = 4, 2  # per GPT layer: QKV, projection, fc1, fc2; two LayerNorms
# Transformer Engine (framework_host docstring): a linear's backward launches the data- and weight-gradient GEMMs
# (bias gradient in the epilogue) and makes 3 + 2 + 1 + 3 + 2 × 4 + 2 + 2 + 1 calls; the LayerNorm inside
# LayerNormLinear launches its kernel with 6 calls and its IdentityOp module's call forward, 1 launch and 2 calls
# backward
TE_LINEAR_BWD = (2, 3 + 2 + 1 + 3 + 2 * 4 + 2 + 2 + 1)
TE_NORM = ((1, 6 + 1), (1, 2))
# Megatron-Core's layer end: make_viewless_tensor's helper, Function (3), kernel helper, empty and .data swap
VIEWLESS = (1 + 3 + 1 + 1 + 1, 3)


def _compute(system: str) -> Compute:
    return load_system(system).children[0].children[0].compute


def _layer(hidden: int = 1024, heads: int = 16, seq: int = 1024):
    spec = GPTSpec(name="gpt", layers=2, hidden=hidden, heads=heads, seq_len=seq, vocab=4096)
    graph = build_workload(spec)
    return graph.layer_ops(graph.block_layers[0])


def _host(c: Compute, launches: int, calls: int) -> float:
    return launches * c.host_dispatch_s + calls * c.host_call_s


def _layer_host(c: Compute, framework: str, backward: bool) -> float:
    return sum(host_seconds(op, backward, c, framework) for op in _layer())


@pytest.mark.parametrize("system", PRESETS)
@pytest.mark.parametrize(("framework", "measured_us"), [("mcore", 74.0), ("mcore-te", 140.0)])
def test_a_linear_forward_costs_what_pr_1191_measured(system, framework, measured_us):
    """One linear op's forward host time under each framework is the measured module time within half a call
    (the count rounds (measured − one launch) / host_call_s to whole calls)."""
    c = _compute(system)
    linear = next(op for op in _layer() if op.kind is OpKind.matmul)
    assert host_seconds(linear, False, c, framework) == pytest.approx(measured_us * 1e-6, abs=c.host_call_s / 2)


@pytest.mark.parametrize("system", PRESETS)
def test_a_te_layers_host_time_by_hand(system):
    """Megatron-Core + TE: the four linears at the measured 140 µs (forward) and the counted backward, the two
    LayerNorms at TE's counts, the layer's make_viewless_tensor, the rest of the layer at v2.x's: the v2.x layer
    with each linear's 34 µs forward replaced by 140 µs, and so on."""
    c = _compute(system)
    te_linear_fwd = 140e-6
    fwd = (_host(c, *V2_FWD) - LINEARS * _host(c, *V2_LINEAR[0]) + LINEARS * te_linear_fwd
           - NORMS * _host(c, *V2_NORM[0]) + NORMS * _host(c, *TE_NORM[0]) + VIEWLESS[0] * c.host_call_s)
    bwd = (_host(c, *V2_BWD) - LINEARS * _host(c, *V2_LINEAR[1]) + LINEARS * _host(c, *TE_LINEAR_BWD)
           - NORMS * _host(c, *V2_NORM[1]) + NORMS * _host(c, *TE_NORM[1]) + VIEWLESS[1] * c.host_call_s)
    assert _layer_host(c, "mcore-te", False) == pytest.approx(fwd, abs=LINEARS * c.host_call_s / 2)
    assert _layer_host(c, "mcore-te", True) == pytest.approx(bwd, rel=1e-12)
    # on the A100 host: 895 µs forward (v2.x 460), 583 µs backward (v2.x 504)
    if system == "dgx-a100":
        assert _layer_host(c, "mcore-te", False) == pytest.approx(895e-6, rel=1e-9)
        assert _layer_host(c, "mcore-te", True) == pytest.approx(583e-6, rel=1e-9)


@pytest.mark.parametrize("system", PRESETS)
def test_megatron_cores_local_linears_cost_more_forward_only(system):
    """'mcore' changes the linears' forward (74 µs measured against v2.x's 34 µs) and adds the layer's
    make_viewless_tensor; the linears' backward, the LayerNorms and everything else stay v2.x's, as does the
    'megatron-lm' framework itself."""
    c = _compute(system)
    v2_fwd, v2_bwd = _host(c, *V2_FWD), _host(c, *V2_BWD)
    assert _layer_host(c, "megatron-lm", False) == pytest.approx(v2_fwd, rel=1e-12)
    assert _layer_host(c, "megatron-lm", True) == pytest.approx(v2_bwd, rel=1e-12)
    local = v2_fwd - LINEARS * _host(c, *V2_LINEAR[0]) + LINEARS * 74e-6 + VIEWLESS[0] * c.host_call_s
    assert _layer_host(c, "mcore", False) == pytest.approx(local, abs=LINEARS * c.host_call_s / 2)
    assert _layer_host(c, "mcore", True) == pytest.approx(v2_bwd + VIEWLESS[1] * c.host_call_s, rel=1e-12)


def test_the_device_keeps_v2x_kernels():
    """The framework changes the host's Python only: the device's kernels per op (``launch.kernels``: its per-kernel
    floor) are the same whatever the framework (framework_host docstring, left out)."""
    assert sum(kernels(op, False) for op in _layer()) == V2_FWD[0]
    assert sum(kernels(op, True) for op in _layer()) == V2_BWD[0]


@pytest.mark.parametrize("system", PRESETS)
def test_a_tiny_te_layer_lasts_its_host_time_in_the_passes(system):
    """A layer far too small to keep the device busy (hidden 64, sequence 128, micro-batch 1, tp 1) lasts its host
    time under the pass context's framework: the passes charge ``host_framework``'s counts, not v2.x's."""
    gpu = load_system(system).children[0].children[0]
    dev = device_model(gpu.compute, gpu.memories, None, "bf16")
    layer = _layer(hidden=64, heads=2, seq=128)
    for framework in ("megatron-lm", "mcore", "mcore-te"):
        ctx = PassContext(dev, 1, 1, False, 2)
        ctx.host_framework = framework
        for build, backward in ((forward_pass, False), (backward_pass, True)):
            host = sum(host_seconds(op, backward, gpu.compute, framework) for op in layer)
            assert build([layer], ctx).busy_s == pytest.approx(host, rel=1e-9)
    ctx = PassContext(dev, 1, 1, False, 2)
    assert ctx.host_framework == "megatron-lm"  # the field's default: today's counts where nobody resolves it


def test_the_default_keeps_v2x_counts():
    """Unset, every run keeps v2.x's counts (a default that followed recompute would make a small job's host time
    jump when only its recompute changes); a choice wins for GPU training; inference and devices no host framework
    drives keep v2.x's."""
    gpu = _compute("dgx-a100")
    assert host_framework(None, gpu, True) == "megatron-lm"
    assert host_framework("mcore-te", gpu, False) == "megatron-lm"
    assert host_framework("mcore", gpu, True) == "mcore"
    assert host_framework("mcore-te", gpu, True) == "mcore-te"
    # a device no host framework drives kernel by kernel (``perf.device.issues_kernels``)
    eager_free = gpu.model_copy(update={"host_dispatch_s": 0.0, "runtime_graphs": RuntimeGraphs.none})
    assert host_framework("mcore-te", eager_free, True) == "megatron-lm"


def test_the_mapping_field_is_quiet_and_validated():
    """``mapping.host_framework`` is left out of saved files at its default (old projects save back unchanged) and
    accepts only the three frameworks."""
    assert "host_framework" not in Mapping().model_dump(mode="json")
    assert Mapping(host_framework="mcore-te").model_dump(mode="json")["host_framework"] == "mcore-te"
    with pytest.raises(ValueError):
        Mapping(host_framework="deepspeed")


def test_the_public_ci_rows_carry_their_frameworks():
    """benchmarks/data/public_megatron_logs.csv: rows whose Megatron-Core layers run Transformer Engine's modules
    (the 2023 ``pretrain_gpt_core.py`` rows, the 7B rows) say 'mcore-te', the legacy-model and local-spec rows
    'mcore'; the calibration hands the column to the mapping unless asked for the era default."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from calibrate_public_megatron_logs import project_for, rows

    for r in rows():
        te = re.search(r"\bTE\b|Transformer Engine", r["megatron_variant"]) is not None
        assert r["host_framework"] == ("mcore-te" if te else "mcore"), r["id"]
        assert project_for(r).mapping.host_framework == r["host_framework"]
        assert project_for(r, defaults=("host_framework",)).mapping.host_framework is None


def test_the_search_times_a_framework_as_the_engine():
    """The search's recurrence charges the mapping's host framework as the plan does (``OpSettings.context``):
    the same candidate under v2.x's and Transformer Engine's counts matches the engine, and the counts differ."""
    from tilewright.engine.search.parallel.candidate import Candidate
    from tilewright.engine.simulate import simulate

    from tests.agreement import assert_search_matches_engine
    from tests.engine_cases import dgx

    times = {}
    for framework in ("megatron-lm", "mcore-te"):
        p = assert_search_matches_engine(dgx(pp=2), Candidate(2, 2, 2, 1), keep_base=True,
                                         host_framework=framework)
        assert p.mapping.host_framework == framework
        times[framework] = simulate(p).iteration_time_s
    assert times["mcore-te"] > times["megatron-lm"]
