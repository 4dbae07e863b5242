"""The host (CPU) work of Megatron-Core's MoE layer on a GPU (``plan.moe_host``): counted from Megatron-Core's router,
all-to-all dispatcher and TEGroupedMLP and Transformer Engine's GroupedLinear, charged per MoE op instead of the op
kind's generic count (``plan.launch``), per local expert where TE loops over the experts.

Expected values are the module docstring's counts (restated here, per group and pass) times the preset's
``host_dispatch_s`` / ``host_call_s``; the generic charge the plan no longer makes is ``launch.host_seconds``,
read from the engine as a primitive."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.ops import MoERole
from tilewright.engine.ir.workload import MoESpec
from tilewright.engine.plan import experts
from tilewright.engine.plan.launch import host_seconds
from tilewright.engine.simulate import make_plan, simulate
from tilewright.engine.workloads import build_workload

EXPERTS, TOP_K, LAYERS = 16, 2, 2

# Megatron-Core's MoE layer per pass, from the counts in plan.moe_host's docstring: (eager kernels, calls) of the
# groups our router, routing (+ the dispatcher before its sync), experts_up (the rest of the dispatch + fc1),
# experts_gate (in fc1), experts_activation, experts_down (fc2 + combine side) and combine ops stand for, and
# each GroupedLinear's (fixed calls, calls per local expert, cuBLASLt GEMMs per local expert: host_dispatch_s each).
FORWARD = {"kernels": 3 + (22 + 15) + 2 + 0 + 1 + 2 + 1, "calls": 9 + (27 + 36) + 22 + 0 + 7 + 13 + 15}
BACKWARD = {"kernels": 3 + 11 + 1 + 0 + 2 + 0 + 1, "calls": 3 + 8 + 15 + 0 + 3 + 6 + 4}
LINEAR = {(False, "F"): (27, 4, 1), (False, "B"): (22, 5, 2), (True, "F"): (27, 12, 1), (True, "B"): (22, 11, 2)}
FP8_PADDING_CALLS = 4 + 3  # Fp8Padding (tokens, probabilities) and Fp8Unpadding, forward


def _spec(hidden: int = 1024, seq: int = 1024) -> LlamaSpec:
    return LlamaSpec(name="moe", layers=LAYERS, hidden=hidden, heads=16, ffn=4 * hidden, vocab=32000, seq_len=seq,
                     moe=MoESpec(experts=EXPERTS, top_k=TOP_K, expert_ffn=hidden))


def _project(ep: int, mb: int = 1, dtype: str = "bf16", spec: LlamaSpec | None = None, system: str = "dgx-h100",
             engine: str = "analytic") -> Project:
    return Project(name="moe", hardware=load_system(system), workload=spec or _spec(),
                   mapping=Mapping(tp=1, dp=8, ep=ep, micro_batch=mb, global_batch=8 * mb * 2),
                   run=RunSettings(dtype=dtype, engine=engine, contention=False))


def _host(plan, kind: str) -> float:
    return sum(s.host_s for st in plan.stages for (_c, k), ps in st.passes.items() if k == kind for s in ps.segments)


def _busy(plan, kind: str) -> list[float]:
    return [s.busy_s for st in plan.stages for (_c, k), ps in st.passes.items() if k == kind for s in ps.segments]


def _off(monkeypatch) -> None:
    """The plan without Megatron-Core's MoE host work: every MoE op keeps its kind's generic charge."""
    monkeypatch.setattr(experts, "framework_host", lambda *a, **k: None)


def _compute(project: Project):
    return make_plan(project).stages[0].dev.compute


def _moe_ops(spec: LlamaSpec):
    """One block's router, routing, routed-expert and combine ops (every block of ``_spec`` is MoE)."""
    graph = build_workload(spec)
    ops = [op for op in graph.layer_ops(graph.block_layers[0]) if op.moe is not None]
    return [op for op in ops if op.moe.role is not MoERole.shared]


def _expected_layer(kind: str, local: int, fp8: bool, compute) -> float:
    """Megatron-Core's host seconds for one MoE layer's pass, from the counts."""
    groups = FORWARD if kind == "F" else BACKWARD
    fixed, per_expert, gemms = LINEAR[(fp8, kind)]
    calls = groups["calls"] + 2 * (fixed + per_expert * local) + (FP8_PADDING_CALLS if fp8 and kind == "F" else 0)
    return (groups["kernels"] + 2 * gemms * local) * compute.host_dispatch_s + calls * compute.host_call_s


@pytest.mark.parametrize("kind", ["F", "B"])
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_the_plan_charges_one_moe_layers_counted_host_work(kind, dtype, monkeypatch):
    """Per MoE layer: Megatron-Core's counted host work replaces the generic charge of the MoE ops (router,
    routing, routed experts, combine); nothing else in the plan changes its host time."""
    project = _project(ep=4, dtype=dtype)
    compute = _compute(project)
    assert compute.host_dispatch_s > 0 and compute.host_call_s > 0
    on = _host(make_plan(project), kind)
    _off(monkeypatch)
    off = _host(make_plan(project), kind)
    generic = sum(host_seconds(op, kind == "B", compute) for op in _moe_ops(project.workload))
    local = EXPERTS // 4
    expected = LAYERS * (_expected_layer(kind, local, dtype == "fp8", compute) - generic)
    assert on - off == pytest.approx(expected, rel=1e-9)
    assert expected > 0  # Megatron-Core's MoE layer costs the host more than its ops' kinds suggest


@pytest.mark.parametrize("kind", ["F", "B"])
def test_the_grouped_linears_work_grows_with_the_local_experts(kind):
    """Halving ep doubles each rank's local experts: both GroupedLinears (fc1, fc2) make their per-expert calls
    and cuBLASLt GEMMs for every extra expert, and nothing else changes."""
    few, many = make_plan(_project(ep=8)), make_plan(_project(ep=2))  # 2 and 8 local experts
    compute = few.stages[0].dev.compute
    _, per_expert, gemms = LINEAR[(False, kind)]
    per_expert_s = per_expert * compute.host_call_s + gemms * compute.host_dispatch_s
    expected = LAYERS * 2 * per_expert_s * (EXPERTS // 2 - EXPERTS // 8)
    assert _host(many, kind) - _host(few, kind) == pytest.approx(expected, rel=1e-9)


def test_fp8_quantizes_per_expert_on_the_host():
    """FP8 with current scaling: each expert's split is quantized on its own (three buffers and amax, scale
    and cast kernels per expert, TE's fused multi-tensor kernel being delayed scaling's), forward and
    backward, plus the padding modules' calls: the fp8 run's host work exceeds bf16's by exactly that."""
    bf16, fp8 = make_plan(_project(ep=4)), make_plan(_project(ep=4, dtype="fp8"))
    compute = bf16.stages[0].dev.compute
    local = EXPERTS // 4
    for kind in ("F", "B"):
        extra = 2 * (LINEAR[(True, kind)][1] - LINEAR[(False, kind)][1]) * local
        extra += FP8_PADDING_CALLS if kind == "F" else 0
        assert _host(fp8, kind) - _host(bf16, kind) == pytest.approx(LAYERS * extra * compute.host_call_s, rel=1e-9)


def test_nothing_is_charged_without_host_costs(monkeypatch):
    """A GPU preset with its host costs zeroed issues nothing from a host: no host time anywhere, and the plan
    is the one without the MoE host work."""
    system = load_system("dgx-h100")
    for _, c in system.walk():
        if c.compute is not None:
            c.compute = c.compute.model_copy(update={"host_dispatch_s": 0.0, "host_call_s": 0.0, "host_sync_s": 0.0,
                                                          "host_collective_s": 0.0, "host_backward_s": 0.0})
    project = _project(ep=4).model_copy(update={"hardware": system})
    plan = make_plan(project)
    assert _host(plan, "F") == 0.0 and _host(plan, "B") == 0.0
    busy = _busy(plan, "F") + _busy(plan, "B")
    _off(monkeypatch)
    off = make_plan(project)
    assert busy == _busy(off, "F") + _busy(off, "B")


def test_nothing_is_charged_on_a_grid_device():
    """A grid device (a Wormhole chip) runs each op as one program: no host framework, so no MoE host work
    (``framework_host`` and the dispatcher's ``host_s`` are None: the generic charge, zero there, stands)."""
    n150 = load_system("wormhole-n150")
    chip = next(c for _, c in n150.walk() if c.compute is not None and c.compute.grid is not None)
    grid = chip.compute
    gpu = _compute(_project(ep=4))
    for op in _moe_ops(_spec()):
        for backward in (False, True):
            assert experts.framework_host(op, backward, 4, False, grid) is None
            assert experts.dispatch_work(op, backward, 1, 1, 4, 2.0, grid).host_s is None
            assert experts.framework_host(op, backward, 4, False, gpu) is not None


def test_a_device_bound_moe_layer_is_not_slowed(monkeypatch):
    """Large micro-batches: every segment's device time exceeds its host time, so the MoE host work changes no
    segment's duration; a small layer at micro-batch 1 is host-bound and slows (the check can fail)."""
    big = _project(ep=4, mb=8, spec=_spec(hidden=4096, seq=4096))
    small = _project(ep=4, mb=1, spec=_spec(hidden=256, seq=128))
    on_big, on_small = make_plan(big), make_plan(small)
    _off(monkeypatch)
    off_big, off_small = make_plan(big), make_plan(small)
    for kind in ("F", "B"):
        assert _host(on_big, kind) > _host(off_big, kind)  # charged …
        assert _busy(on_big, kind) == pytest.approx(_busy(off_big, kind), rel=1e-12)  # … but hidden
        assert sum(_busy(on_small, kind)) > sum(_busy(off_small, kind)) * 1.05


def test_both_engines_agree_on_a_host_bound_moe_project():
    """The event engine replays the plan's segments: the MoE host work lands in both engines alike."""
    runs = [simulate(_project(ep=4, spec=_spec(hidden=256, seq=128), engine=e)) for e in ("analytic", "event")]
    assert runs[0].iteration_time_s == pytest.approx(runs[1].iteration_time_s, rel=1e-9)
    assert runs[0].time_breakdown_s.get("host_wait", 0.0) > 0
    assert runs[0].time_breakdown_s["host_wait"] == pytest.approx(runs[1].time_breakdown_s["host_wait"], rel=1e-9)


def test_the_dispatchers_preprocessing_is_issued_before_the_host_sync(monkeypatch):
    """Forward: the router's and routing's work and the dispatcher's metadata, D2H copies and permutation (15
    kernels, 36 calls) are issued before the dropless forward's host sync, in the segment the sync closes,
    where the device still has the layer's attention to run; the rest follows the sync. (After the first
    layer that segment also holds the previous layer's combine, which follows its all-to-all.)"""
    project = _project(ep=4)
    compute = _compute(project)

    def before_sync(plan) -> list[float]:
        segs = [s for (_c, k), ps in plan.stages[0].passes.items() if k == "F" for s in ps.segments]
        return [segs[i - 1].host_s for i, s in enumerate(segs) if s.label == "MoE host synchronisation"]

    on = before_sync(make_plan(project))
    _off(monkeypatch)
    off = before_sync(make_plan(project))
    assert len(on) == LAYERS
    ops = {op.moe.role: op for op in _moe_ops(project.workload) if op.moe.role is not MoERole.expert}
    generic = host_seconds(ops[MoERole.router], False, compute) + host_seconds(ops[MoERole.routing], False, compute)
    counted = (3 + 22 + 15) * compute.host_dispatch_s + (9 + 27 + 36) * compute.host_call_s
    combine = compute.host_dispatch_s + 15 * compute.host_call_s - host_seconds(ops[MoERole.combine], False, compute)
    for i, (a, b) in enumerate(zip(on, off, strict=True)):
        assert a - b == pytest.approx(counted - generic + (combine if i else 0.0), rel=1e-9)
