"""Transformer Engine's ``GroupedLinear`` issues one cuBLASLt GEMM per local expert from its multi-stream loop,
each call building its descriptors and querying cuBLASLt's heuristic before the launch (``plan.moe_host``,
``per_expert_gemms``): a GEMM costs the host ``host_dispatch_s`` (RAFT measured ~10 us for that un-memoized path),
not a plain call's ``host_call_s``.

The expected numbers are derived here from the GEMMs each pass runs per expert (forward: the output; backward:
the data and the weight gradient) and the two GroupedLinears of a layer (fc1 with gate and up fused, fc2), with
the preset's call cost zeroed so that only the launches remain."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.workload import MoESpec
from tilewright.engine.simulate import make_plan

EXPERTS, LAYERS = 16, 2
LINEARS = 2  # fc1 (gate and up in one GroupedLinear) and fc2
GEMMS_PER_EXPERT = {"F": 1, "B": 2}  # forward output; backward data and weight gradients


def _project(ep: int, dtype: str = "bf16", zero_calls: bool = True) -> Project:
    system = load_system("dgx-h100")
    if zero_calls:  # only launches cost the host: what changes with the local experts is the GEMMs
        for _, c in system.walk():
            if c.compute is not None:
                c.compute = c.compute.model_copy(update={"host_call_s": 0.0})
    spec = LlamaSpec(name="moe", layers=LAYERS, hidden=1024, heads=16, ffn=4096, vocab=32000, seq_len=1024,
                     moe=MoESpec(experts=EXPERTS, top_k=2, expert_ffn=1024))
    return Project(name="moe", hardware=system, workload=spec,
                   mapping=Mapping(tp=1, dp=8, ep=ep, micro_batch=1, global_batch=16),
                   run=RunSettings(dtype=dtype, engine="analytic", contention=False))


def _host(project: Project, kind: str) -> tuple[float, float]:
    plan = make_plan(project)
    host = sum(s.host_s for st in plan.stages for (_c, k), ps in st.passes.items() if k == kind
               for s in ps.segments)
    return host, plan.stages[0].dev.compute.host_dispatch_s


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
@pytest.mark.parametrize("kind", ["F", "B"])
def test_each_local_experts_gemm_costs_a_launch(kind, dtype):
    """With plain calls free, going from 2 to 8 local experts adds exactly one launch per GEMM per extra expert
    per GroupedLinear per layer: the cuBLASLt path is charged as a launch, in bf16 and fp8 alike."""
    few, dispatch_s = _host(_project(ep=8, dtype=dtype), kind)  # 2 local experts
    many, _ = _host(_project(ep=2, dtype=dtype), kind)  # 8 local experts
    assert dispatch_s > 0
    extra_experts = EXPERTS // 2 - EXPERTS // 8
    expected = LAYERS * LINEARS * GEMMS_PER_EXPERT[kind] * extra_experts * dispatch_s
    assert many - few == pytest.approx(expected, rel=1e-9)


def test_a_gemm_costs_the_host_more_than_a_call():
    """The preset prices the per-GEMM path above a plain framework call (10 us against 3 us on dgx-h100), so the
    per-expert GEMMs are what grows the GroupedLinear's host time most."""
    compute = next(c.compute for _, c in load_system("dgx-h100").walk() if c.compute is not None)
    assert compute.host_dispatch_s > compute.host_call_s > 0
