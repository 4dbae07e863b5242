"""Offloading as the frameworks run it on a GPU node (``plan.host_step``, ``plan.residency``).

1. The optimizer state in host memory: the host's CPUs step it (DeepSpeed's CPU-Adam, Megatron-Core's
   HybridDeviceOptimizer), gradients down and updated fp32 parameters up the PCIe link, the three pipelined —
   the slowest of the link's two directions, the CPUs' Adam rate and the host memory's bandwidth bounds it.
   A device without a host framework still streams its state over the link as before.
2. Activations in host memory: the op that makes them runs in HBM with its workspace, so the workspace stays
   on the device's track; a recompute pass's activations are not copied out again.

Every expected number derives from the dgx-a100 preset's fields (host link, host DDR bandwidth and
efficiency, the CPUs' Adam rate, 8 GPUs per node) and the per-parameter bytes of the sources the module
docstring names, not from the engine's output."""

from __future__ import annotations

import pytest
from tilewright.engine.engines.event.engine import EventEngine
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.compute import RuntimeGraphs
from tilewright.engine.ir.hardware import Component
from tilewright.engine.ir.mapping import Recompute
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.simulate import make_plan, simulate

from tests.agreement import assert_engines_agree, engine_result, search_estimate

SPEC = GPTSpec(name="gpt-offload", layers=4, hidden=1024, heads=16, seq_len=1024, vocab=32000)
GPUS_PER_NODE = 8  # a DGX A100's GPUs share its host DDR and CPUs
HOST_LINK = 25e9  # dgx-a100 preset: pinned copies over each GPU's PCIe 4.0 x16, per direction
HOST_DDR = 409.6e9 * 0.7  # 2 x EPYC 7742, 16 DDR4-3200 channels, at the preset's STREAM efficiency
ADAM_RATE = 1.4e9  # the preset's CPU-Adam rate for the whole host (DeepSpeed PR #735: 11.6B params in 8.2 s)
DOWN = UP = 4.0  # Megatron's HybridDeviceOptimizer copies the fp32 main gradient down, the fp32 main param up
HOST_BYTES = 16 + 12 + DOWN + UP  # fused CPU AdamW: 4 fp32 reads, 3 writes; the copies land in the same DDR


def _system(**host: object) -> Component:
    """dgx-a100 with its host DDR's fields replaced by ``host``."""
    hw = load_system("dgx-a100")
    node = hw.children[0]
    mems = [m.model_copy(update=host) if m.name == "host" else m for m in node.memories]
    return hw.model_copy(update={"children": [node.model_copy(update={"memories": mems}), *hw.children[1:]]})


def _project(levels: dict[str, str], hw: Component | None = None, engine: str = "analytic", **mapping) -> Project:
    fields = {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 2, "global_batch": 32, "zero": 1} | mapping
    return Project(name="offload", hardware=hw or load_system("dgx-a100"), workload=SPEC,
                   mapping=Mapping(memory_levels=levels, **fields),
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _local_params(p: Project) -> float:
    """Parameters whose optimizer state one GPU holds: ZeRO-1 shards the stage's over dp."""
    st = make_plan(p).stages[0]
    return st.params / p.mapping.dp if p.mapping.zero >= 1 else st.params


def test_the_host_cpus_step_the_offloaded_optimizer_at_their_adam_rate():
    """On a DGX A100 the CPUs bound the step: 1.4e9 params/s for the node, an eighth per GPU, where the
    link would take 4 B / 25 GB/s each way and the DDR 36 B / 35.8 GB/s per parameter."""
    p = _project({"optimizer": "host"})
    local = _local_params(p)
    per_param = max(GPUS_PER_NODE / ADAM_RATE, HOST_BYTES * GPUS_PER_NODE / HOST_DDR, DOWN / HOST_LINK)
    assert per_param == GPUS_PER_NODE / ADAM_RATE  # the CPUs, not the memory nor the link
    off = simulate(p)
    assert off.time_breakdown_s["optimizer"] == pytest.approx(local * per_param, rel=1e-9)


def test_without_a_measured_rate_the_host_memory_bounds_the_cpu_step():
    p = _project({"optimizer": "host"}, _system(host_adam_params_per_s=None))
    off = simulate(p)
    want = _local_params(p) * HOST_BYTES / (HOST_DDR / GPUS_PER_NODE)
    assert off.time_breakdown_s["optimizer"] == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize(("levels", "crossing"), [
    ({"optimizer": "host"}, max(DOWN, UP)),
    ({"optimizer": "host", "gradients": "host"}, UP),  # the gradients are in host memory already
    ({"optimizer": "host", "gradients": "host", "weights": "host"}, 0.0),  # and the weights are streamed
])
def test_a_slow_link_bounds_the_step_by_what_crosses_it(levels, crossing):
    """At 1 GB/s per direction the copies outlast the CPUs: gradients down and parameters up run at once
    (full duplex, pipelined tensor by tensor), so the slower direction sets the step; with nothing crossing,
    the CPUs do."""
    link = 1e9
    p = _project(levels, _system(host_link_bandwidth_bytes_per_s=link))
    local = _local_params(p)
    want = local * max(crossing / link, GPUS_PER_NODE / ADAM_RATE)
    assert simulate(p).time_breakdown_s["optimizer"] == pytest.approx(want, rel=1e-9)


def test_a_device_without_a_host_framework_streams_its_state_as_before():
    """The same GPU without a host framework issuing its kernels (no ``host_dispatch_s``, no runtime graphs): no
    CPU step — a fused Adam step on the device over host-resident state, master and both moments read and
    written over the link (24 B per parameter), gradients and the bf16 copy in HBM."""
    hw = load_system("dgx-a100")
    node = hw.children[0]
    gpu = node.children[0]
    bare_compute = gpu.compute.model_copy(update={"host_dispatch_s": 0.0, "runtime_graphs": RuntimeGraphs.none})
    bare = gpu.model_copy(update={"compute": bare_compute})
    hw = hw.model_copy(update={"children": [node.model_copy(update={"children": [bare, *node.children[1:]]}),
                                            *hw.children[1:]]})
    p = _project({"optimizer": "host"}, hw)
    assert simulate(p).time_breakdown_s["optimizer"] == pytest.approx(_local_params(p) * 24 / HOST_LINK, rel=1e-9)


@pytest.mark.parametrize("levels", [{"optimizer": "host"}, {"activations": "host"}])
def test_the_engines_agree_on_offload(levels):
    assert_engines_agree(simulate(_project(levels)), EventEngine().run(make_plan(_project(levels, engine="event"))))


@pytest.mark.parametrize("c", [
    Candidate(tp=1, pp=1, dp=8, micro_batch=2, zero=1, offload="host"),
    Candidate(tp=2, pp=2, dp=2, micro_batch=1, zero=1, offload="host"),
], ids=["dp8", "tp2-pp2"])
def test_the_search_times_an_offload_candidate_as_the_engine(c: Candidate):
    """The search's evaluator takes the same step (``residency.step_seconds``) on its candidate's residency."""
    base = _project({})
    p = base.model_copy(update={"mapping": c.mapping(base.mapping.global_batch)})
    _, exact, _ = search_estimate(p, c)
    want = engine_result(p)
    assert exact == pytest.approx(want.iteration_time_s, rel=1e-6)
    assert want.time_breakdown_s["optimizer"] > 0


def test_activation_offload_keeps_the_workspace_on_the_device():
    """The host track holds the offloaded layers' stored activations alone (one micro-batch in flight at pp 1;
    ``plan.activation_offload``); the op's workspace is the device's, beside its model state and the kept
    layers' activations."""
    p = _project({"activations": "host"})
    st = make_plan(p).stages[0]
    result = simulate(p)
    host = [t for t in result.memory if t.level == "host"]
    device = [t for t in result.memory if t.level != "host"]
    assert 0 < st.offloaded_bytes[0] < st.act_bytes[0]
    assert max(host[0].totals()) == pytest.approx(st.offloaded_bytes[0], rel=1e-9)
    assert max(device[0].by_category["activations"]) == pytest.approx(st.act_bytes[0] - st.offloaded_bytes[0],
                                                                       rel=1e-9)
    assert max(device[0].by_category["workspace"]) == pytest.approx(st.workspace, rel=1e-9)
    assert result.peak_memory_bytes >= st.workspace + st.state.weights + st.state.gradients


def test_the_search_fits_the_workspace_on_the_device_too():
    """The search's memory check counts the workspace on the device's level when activations are offloaded:
    its fullest level is the device's, as the engine's peak."""
    from tilewright.engine.hardware import elaborate
    from tilewright.engine.search.parallel.estimate import Estimator
    from tilewright.engine.workloads import build_workload

    c = Candidate(tp=1, pp=1, dp=8, micro_batch=2, zero=1)
    base = _project({"activations": "host"})
    p = base.model_copy(update={"mapping": c.mapping(32, base.mapping)})
    hw = elaborate(p.hardware, devices_needed=c.devices)
    est = Estimator(p, hw, build_workload(p.workload))
    table, key = est.layer_table(c)
    chunks = est.chunks(table, key, c.pp, c.interleave)
    fits, need = est.fits(c, c.micro_batches(32), chunks)
    assert fits
    assert need == pytest.approx(engine_result(p).peak_memory_bytes, rel=1e-6)


def test_a_recompute_pass_copies_nothing_to_the_host():
    """Full recomputation re-runs the forward inside the backward: what it makes feeds the backward at once on
    the device (Megatron refuses activation offloading with recomputation); the forward and backward copy."""
    plan = make_plan(_project({"activations": "host"}, recompute=Recompute.full))
    passes = plan.stages[0].passes
    assert all(seg.offload_s == 0 for seg in passes[(0, "R")].segments)
    assert any(seg.offload_s > 0 for seg in passes[(0, "F")].segments)
    assert any(seg.offload_s > 0 for seg in passes[(0, "B")].segments)


def test_each_pass_copies_the_stored_activations_once():
    """Where the reproducer's memory stall comes from: each forward copies one micro-batch's stored activations
    of the offloaded layers out (as ``perf.memory`` counts them for the host track) and each backward copies
    them back, at the link's
    rate per direction, overlapped with the pass's kernels — nothing counted twice. Two micro-batches per
    replica run forward then backward (pp 1), so the link is busy 2 × 2 × stored / link per iteration, which
    bounds the iteration from below when the kernels are shorter."""
    p = _project({"activations": "host"})
    plan = make_plan(p)
    st = plan.stages[0]
    stored = st.offloaded_bytes[0]
    for kind in ("F", "B"):
        ps = st.passes[(0, kind)]
        assert sum(seg.offload_s for seg in ps.segments) == pytest.approx(stored / HOST_LINK, rel=1e-9)
        assert ps.busy_s >= stored / HOST_LINK
    copies = plan.micro_batches * 2 * stored / HOST_LINK
    base = simulate(_project({}))
    result = simulate(p)
    assert copies <= result.iteration_time_s <= copies + base.iteration_time_s
