"""Activation offloading with recomputation is refused, as Megatron-Core refuses it: ``TransformerConfig``
raises "CPU offloading does not work when activation recomputation is enabled" whenever ``cpu_offloading`` and
``recompute_granularity`` (full or selective) are both set (``plan.checks._offload_checks``). ``auto`` never
places a recomputing run's activations in host memory (``plan.residency.resolve``)."""

from __future__ import annotations

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.checks import check_project, host_memories
from tilewright.engine.plan.residency import resolve
from tilewright.engine.simulate import make_plan

SPEC = GPTSpec(name="gpt-offload", layers=2, hidden=1024, heads=16, seq_len=1024, vocab=51200)


def _project(recompute: str, levels: dict[str, str], mode: str = "train") -> Project:
    mapping = Mapping(tp=1, pp=1, dp=1, micro_batch=1, global_batch=2, recompute=recompute, memory_levels=levels)
    return Project(name="offload", hardware=load_system("dgx-a100"), workload=SPEC, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine="analytic", mode=mode))


def test_the_dgx_host_memory_is_the_host_level():
    assert host_memories(_project("none", {})) == {"host"}  # the node's DDR, not the GPU's HBM


@pytest.mark.parametrize("recompute", ["full", "selective"])
def test_host_activations_with_recompute_are_refused(recompute):
    problems = check_project(_project(recompute, {"activations": "host"}))
    assert [p.path for p in problems] == ["mapping.memory_levels.activations"]
    assert "Megatron-Core" in problems[0].reason and recompute in problems[0].reason


def test_offload_alone_and_recompute_alone_stay_allowed():
    assert check_project(_project("none", {"activations": "host"})) == []
    assert check_project(_project("full", {"activations": "hbm"})) == []
    assert check_project(_project("full", {"optimizer": "host"})) == []  # optimizer offload is another thing
    assert check_project(_project("full", {"activations": "host"}, mode="infer")) == []  # no backward to feed


def test_cli_refuses_with_the_field(capsys: pytest.CaptureFixture[str]):
    code = main(["run", "--system", "dgx-a100", "--model", "gpt", "--layers", "2", "--hidden", "1024", "--heads",
                 "16", "--seq-len", "1024", "--tp", "1", "--dp", "1", "--global-batch", "2", "--micro-batch", "1",
                 "--recompute", "full", "--engine", "analytic", "--set",
                 'mapping.memory_levels={"activations": "host"}'])
    assert code == 2
    assert "mapping.memory_levels.activations" in capsys.readouterr().err


def test_auto_keeps_a_recomputing_runs_activations_on_the_device():
    """Activations too large for every level: ``auto`` falls back to the slowest level, the host, unless the run
    recomputes, where they stay in the GPU's HBM (and the memory report shows the overflow)."""
    project = _project("full", {"activations": "auto"})
    plan = make_plan(project)
    device = plan.stages[0].groups[0][0]
    sizes = {"activations": 1e15}
    free = resolve(project.mapping, plan.hw, device, plan.stages[0].dev, sizes)
    kept = resolve(project.mapping, plan.hw, device, plan.stages[0].dev, sizes, frozenset({"activations"}))
    assert free is not None and kept is not None
    assert free.placed["activations"] == "host"
    assert kept.placed["activations"] == "dram"
