"""A fully recomputed layer under ZeRO-3/FSDP is gathered twice per micro-batch, not three times
(``engine.plan.sharding``): its recompute runs just before its backward, inside the gather made for that
backward (FSDP2's ``_pre_forward`` returns at once in PRE_BACKWARD; DeepSpeed keeps the parameters for the
backward that follows the recompute).

Expected bytes and seconds are derived here from the layer's parameters and the preset's NVSwitch figures: a
ring all-gather or reduce-scatter of B bytes over p ranks sends (p − 1)/p · B per rank at the link's achieved
bandwidth."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.simulate import make_plan, simulate

DP = 8  # one DGX A100 node: every rank one NVSwitch hop from the others
NVLINK_BYTES_PER_S = 300e9 * 0.75  # dgx-a100 preset: NVLink3 300 GB/s per direction, efficiency 0.75
SPEC = GPTSpec(name="gpt-zero", layers=8, hidden=2048, heads=16, seq_len=1024, vocab=51200)
WEIGHT_BYTES = 2  # bf16 weights gathered


def _project(engine: str = "analytic", **mapping) -> Project:
    m = {"tp": 1, "pp": 1, "dp": DP, "micro_batch": 4, "global_batch": 4 * DP * 4} | mapping
    return Project(name="zero", hardware=load_system("dgx-a100"), workload=SPEC, mapping=Mapping(**m),
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _gathered(plan, kind: str) -> float:
    """The all-gather bytes a pass of chunk 0 carries (exposed; all of them without prefetch)."""
    passes = plan.stages[0].passes
    if (0, kind) not in passes:
        return 0.0
    return sum(seg.comm[1] for seg in passes[(0, kind)].segments
               if seg.comm is not None and seg.comm[0] == "dp:all-gather")


@pytest.mark.parametrize("recompute", ["full", "selective"])
def test_a_recomputed_layer_is_gathered_for_its_forward_and_backward_only(recompute):
    """Without prefetch every gather shows whole: per micro-batch the forward and the backward each gather every
    layer's weights (all the stage's parameters at 2 B), the recompute pass none, whatever is recomputed."""
    plan = make_plan(_project(zero=3, recompute=recompute))
    weights = plan.stages[0].params * WEIGHT_BYTES
    assert (0, "R") in plan.stages[0].passes
    assert _gathered(plan, "R") == 0.0
    assert _gathered(plan, "F") == pytest.approx(weights, rel=1e-9)
    assert _gathered(plan, "B") == pytest.approx(weights, rel=1e-9)


def test_full_recompute_adds_no_gather_time():
    """ZeRO-3 over ZeRO-1 costs the same bandwidth with full recomputation as without: per iteration of m
    micro-batches 2m gathers of the weights less the one gather ZeRO-1 makes after the step, and m − 1 more
    reduce-scatters of the gradients (stage 1 reduces once) — no third gather for the recompute. The rest is the
    per-collective latency and host call (bounded as ``test_zero_sharding`` bounds it)."""
    one, three = (simulate(_project(zero=z, recompute="full")) for z in (1, 3))
    plan = make_plan(_project(zero=3, recompute="full"))
    params, m = plan.stages[0].params, plan.micro_batches
    weights, grads = params * WEIGHT_BYTES, params * 4  # fp32 gradients (mixed precision)
    extra = (DP - 1) / DP * ((2 * m - 1) * weights + (m - 1) * grads) / NVLINK_BYTES_PER_S
    measured = three.iteration_time_s - one.iteration_time_s
    layers = len(plan.workload.layers)
    call = plan.stages[0].dev.compute.host_collective_s
    latency = 3 * layers * m * (8.4e-6 + (DP - 1) * 3.4e-6 + call)  # NCCL Simple: base + per ring step
    assert extra < measured <= extra + latency
    third = (DP - 1) / DP * m * weights / NVLINK_BYTES_PER_S  # what a gather in the recompute would add
    assert measured < extra + third / 2


def test_fsdp2_copy_out_follows_the_gather_not_the_recompute():
    """FSDP2's copy-out after each gather (``mapping.fsdp_copies``) streams the gathered layer through device
    memory once per gather: the recompute pass makes none, so its device time does not change with it."""
    plain, copies = (make_plan(_project(fsdp=True, recompute="full", fsdp_copies=c)) for c in (False, True))
    r = [p.stages[0].passes[(0, "R")] for p in (plain, copies)]
    assert r[1].busy_s == pytest.approx(r[0].busy_s, rel=1e-12)
    assert sum(s.local_bytes for s in r[1].segments) == pytest.approx(sum(s.local_bytes for s in r[0].segments))
    f = [p.stages[0].passes[(0, "F")] for p in (plain, copies)]
    weights = plain.stages[0].params * WEIGHT_BYTES
    # the forward's copy-out reads and writes every layer's gathered weights once
    assert sum(s.local_bytes for s in f[1].segments) - sum(s.local_bytes for s in f[0].segments) == pytest.approx(
        2 * weights, rel=1e-9)


@pytest.mark.parametrize("mapping", [{"zero": 3, "recompute": "full"}, {"fsdp": True, "recompute": "full"},
                                     {"fsdp": True, "recompute": "full", "recompute_layers": 3}])
def test_both_engines_agree_with_recomputation(mapping):
    a = simulate(_project(**mapping))
    e = simulate(_project("event", **mapping))
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-6)
    assert e.time_breakdown_s["dp_comm"] == pytest.approx(a.time_breakdown_s["dp_comm"], rel=1e-6)
