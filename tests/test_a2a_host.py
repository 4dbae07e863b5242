"""The host work of Megatron-Core's overlapped expert-parallel schedule (``plan.a2a_host``): each MoE layer split into
four schedule nodes (attention, dispatch, MLP, combine), each node's forward and backward a call of its own.

Expected values are restated here from Megatron-Core's ``ScheduleNode`` / ``TransformerLayerNode`` (per node: the
event's wait and record, the NVTX push and pop, the stream context's three calls; the detached inputs, the freed
inputs, the backward's ``record_stream`` per gradient and one ``run_backward`` per node) times the preset's
``host_call_s`` / ``host_backward_s``, and set against the same plan without that work (the nodes' charge patched
out), so nothing else the overlap changes enters the difference."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan import pass_builder
from tilewright.engine.simulate import make_plan, simulate

LAYERS = 2
SPEC = GPTSpec(name="moe", layers=LAYERS, hidden=2048, heads=16, seq_len=2048, vocab=32000,
               moe={"experts": 16, "top_k": 2, "expert_ffn": 4096})

# per node, forward and backward: event wait + record, NVTX push + pop, current_stream + set_stream + set_stream
PER_NODE = 2 + 2 + 3
NODES = 4  # attention, dispatch, MLP, combine
# forward: each input's detach (attention 1, dispatch 2, MLP 1, combine 1), the residual's and the dispatched
# probabilities' detach, three calls per freed input (dispatch 2, MLP 1, combine 1), the combine's record_stream of
# the residual (2 calls), less the MoELayer module call the nodes bypass
FORWARD_CALLS = NODES * PER_NODE + (1 + 2 + 1 + 1) + 2 + 3 * (2 + 1 + 1) + 2 - 1
# backward: record_stream per gradient handed on (combine 1, MLP 1, dispatch 2, attention 3)
BACKWARD_CALLS = NODES * PER_NODE + (1 + 1 + 2 + 3)


def _project(overlap: bool = True, dp: int = 16, mb: int = 1, engine: str = "analytic", **extra) -> Project:
    mapping = Mapping(tp=1, pp=1, dp=dp, ep=dp, micro_batch=mb, global_batch=2 * dp * mb, overlap_ep_comm=overlap,
                      **extra)
    return Project(name="moe", hardware=load_system("dgx-h100"), workload=SPEC, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _host(plan, kind: str) -> float:
    return sum(s.host_s for st in plan.stages for (_c, k), ps in st.passes.items() if k == kind for s in ps.segments)


def _without_nodes(monkeypatch, project: Project):
    with monkeypatch.context() as m:
        m.setattr(pass_builder, "schedule_host_seconds", lambda *a, **k: 0.0)
        return make_plan(project)


def test_each_moe_layer_pays_its_nodes_host_work(monkeypatch):
    project = _project()
    plan, bare = make_plan(project), _without_nodes(monkeypatch, project)
    compute = plan.stages[0].dev.compute
    assert FORWARD_CALLS == 48 and BACKWARD_CALLS == 35
    forward = LAYERS * FORWARD_CALLS * compute.host_call_s
    backward = LAYERS * (BACKWARD_CALLS * compute.host_call_s + NODES * compute.host_backward_s)
    assert _host(plan, "F") - _host(bare, "F") == pytest.approx(forward, rel=1e-9)
    assert _host(plan, "B") - _host(bare, "B") == pytest.approx(backward, rel=1e-9)
    # on dgx-h100 (host_call_s 3 us, host_backward_s 96 us): 144 us forward, 489 us backward per MoE layer
    assert forward / LAYERS == pytest.approx(144e-6, rel=1e-6)
    assert backward / LAYERS == pytest.approx(489e-6, rel=1e-6)


def test_no_node_work_without_the_overlap(monkeypatch):
    project = _project(overlap=False)
    plan, bare = make_plan(project), _without_nodes(monkeypatch, project)
    for kind in ("F", "B"):
        assert _host(plan, kind) == _host(bare, kind)


def test_a_hidden_all_to_all_still_costs_its_call(monkeypatch):
    """8 GPUs on NVSwitch: the overlapped forward hides every all-to-all (``test_ep_overlap``), yet the host still
    makes each NCCL call: the forward's host work (nodes apart) equals the plain schedule's, where every all-to-all
    closes a segment that carries its call."""
    hidden, plain = _without_nodes(monkeypatch, _project(dp=8)), make_plan(_project(overlap=False, dp=8))
    assert not [s for s in hidden.stages[0].passes[(0, "F")].segments if s.comm and "all-to-all" in s.comm[0]]
    assert [s for s in plain.stages[0].passes[(0, "F")].segments if s.comm and "all-to-all" in s.comm[0]]
    assert _host(hidden, "F") == pytest.approx(_host(plain, "F"), rel=1e-12)


def test_recompute_passes_run_no_nodes(monkeypatch):
    """A selective recompute re-runs modules inside a node's backward: no nodes of its own."""
    project = _project(recompute="selective")
    plan, bare = make_plan(project), _without_nodes(monkeypatch, project)
    assert any(k == "R" for st in plan.stages for (_c, k) in st.passes)
    assert _host(plan, "R") == _host(bare, "R")


def test_the_node_work_binds_where_the_device_is_short(monkeypatch):
    """A short micro-batch (tiny layers, host-bound): the iteration grows by the nodes' host time; both engines
    agree."""
    small = GPTSpec(name="moe", layers=LAYERS, hidden=512, heads=8, seq_len=256, vocab=32000,
                    moe={"experts": 16, "top_k": 2, "expert_ffn": 512})
    project = _project().model_copy(update={"workload": small})
    with_nodes = simulate(project)
    with monkeypatch.context() as m:
        m.setattr(pass_builder, "schedule_host_seconds", lambda *a, **k: 0.0)
        without = simulate(project)
    assert with_nodes.iteration_time_s > without.iteration_time_s
    event = simulate(project.model_copy(update={"run": project.run.model_copy(update={"engine": "event"})}))
    assert event.iteration_time_s == pytest.approx(with_nodes.iteration_time_s, rel=1e-9)
