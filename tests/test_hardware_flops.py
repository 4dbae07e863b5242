"""HFU counts what the devices execute (``plan.hardware_flops``): a fused attention kernel's causal pairs and
its 2.5x backward, no selective re-run of what runs inside it, full recomputation at the pass's own FLOPs;
MFU keeps the model's FLOPs (every pair, no re-run)."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.ir.ops import OpKind
from tilewright.engine.simulate import make_plan
from tilewright.engine.workloads import build_workload

SPEC = GPTSpec(name="gpt-small", layers=2, hidden=1024, heads=16, seq_len=2048, vocab=8192)
FUSED = [["attention", "softmax"]]
BATCH = 8


def _plan(recompute: Recompute, fusion: list[list[str]]):
    mapping = Mapping(tp=1, pp=1, dp=1, micro_batch=1, global_batch=BATCH, recompute=recompute, fusion=fusion)
    project = Project(name="h", hardware=load_system("dgx-a100"), workload=SPEC, mapping=mapping,
                      run=RunSettings(dtype="bf16", engine="analytic"))
    return make_plan(project)


def _by_hand(recompute: Recompute, fused: bool) -> float:
    """Per sample, from the ops' own fields: a fused attention runs its causal pairs forward and 2.5x that
    backward; the softmax and attention dropout inside it run nothing of their own beyond their FLOPs."""
    ops = list(build_workload(SPEC).ops())
    blocks = set(build_workload(SPEC).block_layers)
    total = 0.0
    for op in ops:
        flash = fused and op.kind is OpKind.attention
        fwd = op.fused_flops if flash else op.flops
        total += fwd + (2.5 * fwd if flash else op.backward_flops)
        if recompute is Recompute.full and op.layer in blocks and op.kind is not OpKind.embedding:
            total += fwd
        if recompute is Recompute.selective and op.selective and not fused:
            total += fwd
    return total


@pytest.mark.parametrize("recompute", [Recompute.none, Recompute.selective, Recompute.full])
@pytest.mark.parametrize("fused", [False, True])
def test_hardware_flops_as_the_devices_run_them(recompute: Recompute, fused: bool):
    plan = _plan(recompute, FUSED if fused else [])
    assert plan.hardware_flops == pytest.approx(_by_hand(recompute, fused) * BATCH, rel=1e-9)
    assert plan.model_flops == _plan(Recompute.none, []).model_flops  # MFU's FLOPs never change


def test_a_causal_fused_kernel_runs_fewer_flops_than_the_model_counts():
    """Causal flash attention skips about half the pairs, more than its 2.5x backward adds back; selective
    recomputation then re-runs nothing."""
    plan = _plan(Recompute.selective, FUSED)
    assert plan.hardware_flops < plan.model_flops
    assert plan.hardware_flops == pytest.approx(_plan(Recompute.none, FUSED).hardware_flops)
