"""Megatron-Core checkpoints the attention core whatever its backend (``perf.recompute.reruns_flash``): with
selective recomputation of the core and a fused (flash) attention kernel, its backward re-runs that kernel's
forward for no memory saved. Megatron-LM's legacy flash path bypasses the checkpoint: nothing re-runs. The R pass
must hold exactly the fused kernel's forward FLOPs, HFU must count them again, and the run must say why."""

from __future__ import annotations

import pytest
from tilewright.engine.ir import Project
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.perf.op_cost import flash_ops, pass_flops
from tilewright.engine.plan.passes import fused_edges
from tilewright.engine.simulate import make_plan, simulate

from tests.engine_cases import dgx


def _project(framework: str, recompute: Recompute = Recompute.selective) -> Project:
    data = dgx(tp=2, pp=1, dp=1).model_dump(mode="json")
    # a LLaMA block: no dropout, so the fused kernel holds all the core selective recomputation would re-run
    data["workload"] = {"kind": "llama", "name": "llama-test", "layers": 4, "hidden": 1024, "heads": 16,
                        "kv_heads": 4, "seq_len": 512, "vocab": 8192}
    data["mapping"] |= {"recompute": recompute.value, "host_framework": framework,
                        "fusion": [["attention", "softmax"]], "global_batch": 4, "micro_batch": 1}
    data["run"] |= {"engine": "analytic"}
    return Project.model_validate(data)


def _flash_forward_flops_per_sample(project: Project) -> float:
    """FLOPs per sample of the fused kernels' forward over the model's blocks (the causal pairs they compute)."""
    plan = make_plan(project)
    fused = fused_edges(project.mapping.fusion)
    return sum(pass_flops(op, False, True) for i in plan.workload.block_layers
               for op in plan.workload.layer_ops(i) if op.name in flash_ops(plan.workload.layer_ops(i), fused))


def _rerun_flops(project: Project) -> float:
    passes = make_plan(project).stages[0].passes
    return sum(seg.flops for seg in passes[(0, "R")].segments) if (0, "R") in passes else 0.0


@pytest.mark.parametrize("framework", ["mcore", "mcore-te"])
def test_megatron_core_reruns_the_flash_forward_and_legacy_megatron_does_not(framework):
    core = _project(framework)
    m = core.mapping
    per_sample = _flash_forward_flops_per_sample(core)
    assert per_sample > 0, "the case must fuse its attention"
    assert _rerun_flops(_project("megatron-lm")) == 0.0
    assert _rerun_flops(core) == pytest.approx(per_sample * m.micro_batch / m.tp, rel=1e-9)  # heads split by tp
    none, sel = simulate(_project(framework, Recompute.none)), simulate(core)
    assert sel.iteration_time_s > none.iteration_time_s  # slower than no recomputation ...
    assert sel.peak_memory_bytes == pytest.approx(none.peak_memory_bytes, rel=1e-9)  # ... for the same memory
    assert any("Megatron-Core checkpoints the attention core" in n for n in sel.notes)


def test_hfu_counts_the_flash_forward_again_under_megatron_core():
    core = _project("mcore-te")
    extra = simulate(core).hardware_flops_per_iteration - simulate(_project("megatron-lm")).hardware_flops_per_iteration
    assert extra == pytest.approx(_flash_forward_flops_per_sample(core) * core.mapping.global_batch, rel=1e-9)
