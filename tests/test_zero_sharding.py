"""ZeRO stages 2 and 3 and FSDP: their collectives and their memory (``engine.plan.sharding``).

Expected costs are derived here from the preset's NVSwitch figures, not from the engine: a ring all-gather
or reduce-scatter of B bytes over p ranks sends (p − 1)/p · B per rank at the link's achieved bandwidth."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.simulate import make_plan, simulate

DP = 8  # one DGX A100 node: every rank one NVSwitch hop from the others
NVLINK_BYTES_PER_S = 300e9 * 0.75  # dgx-a100 preset: NVLink3 300 GB/s per direction, efficiency 0.75
SPEC = GPTSpec(name="gpt-zero", layers=8, hidden=2048, heads=16, seq_len=1024, vocab=51200)


def _project(zero: int = 0, engine: str = "analytic", **mapping) -> Project:
    m = {"tp": 1, "pp": 1, "dp": DP, "micro_batch": 4, "global_batch": 4 * DP * 4, "zero": zero} | mapping
    return Project(
        name="zero",
        hardware=load_system("dgx-a100"),
        workload=SPEC,
        mapping=Mapping(**m),
        run=RunSettings(dtype="bf16", engine=engine, contention=False),
    )


def _ring_seconds(nbytes: float) -> float:
    """Bandwidth term of a ring all-gather / reduce-scatter of ``nbytes`` over DP ranks."""
    return (DP - 1) / DP * nbytes / NVLINK_BYTES_PER_S


def test_zero3_costs_the_per_layer_gathers_and_reductions_zero1_does_not():
    """ZeRO-1: one reduce-scatter of the gradients and one all-gather of the weights per iteration.
    ZeRO-3 without prefetch: per micro-batch, every layer's weights gathered for the forward and again
    for the backward and its gradients reduce-scattered; no gather after the step."""
    one, three = simulate(_project(1)), simulate(_project(3))
    plan = make_plan(_project(3))
    params, m = plan.stages[0].params, plan.micro_batches
    weights, grads = params * 2, params * 4  # bf16 weights; fp32 gradients (mixed precision)
    extra = _ring_seconds((2 * m - 1) * weights + (m - 1) * grads)
    measured = three.iteration_time_s - one.iteration_time_s
    # the rest is latency: at most NCCL's Simple protocol (the slowest to start, dgx-a100 preset: 8.4 us per
    # collective + 3.4 us per ring step) and the call's host time before its launch (host_collective_s, paid
    # where the host binds) for each of the 3 per-layer collectives of every micro-batch
    layers = len(plan.workload.layers)
    call = plan.stages[0].dev.compute.host_collective_s
    latency = 3 * layers * m * (8.4e-6 + (DP - 1) * 3.4e-6 + call)
    assert extra < measured <= extra + latency


def test_zero2_reduces_gradients_every_micro_batch():
    one, two = simulate(_project(1)), simulate(_project(2))
    plan = make_plan(_project(2))
    grads = plan.stages[0].params * 4
    extra = (plan.micro_batches - 1) * _ring_seconds(grads)
    measured = two.time_breakdown_s["dp_comm"] - one.time_breakdown_s["dp_comm"]
    assert measured == pytest.approx(extra, rel=0.05)


def test_prefetch_hides_gathers_behind_compute_but_never_more_than_they_cost():
    three = simulate(_project(3))
    fsdp = simulate(_project(fsdp=True))
    assert Mapping(dp=2, global_batch=2, fsdp=True).zero == 3
    saved = three.iteration_time_s - fsdp.iteration_time_s
    assert 0 < saved <= three.time_breakdown_s["dp_comm"]
    assert fsdp.time_breakdown_s["compute"] == pytest.approx(three.time_breakdown_s["compute"])


def test_memory_per_device_drops_stage_by_stage():
    """Per parameter (mixed precision, Adam): 2 B weights, 4 B gradients, 12 B optimizer state; stage k
    divides the first k of (optimizer, gradients, weights) by dp. Stage 3 holds the largest layer's full
    weights twice (computing and prefetched) and its full gradient while it is reduced."""
    peaks = [simulate(_project(z)).peak_memory_bytes for z in range(4)]
    plan = make_plan(_project(0))
    p = plan.stages[0].params
    shard = 1 - 1 / DP
    assert peaks[0] - peaks[1] == pytest.approx(12 * p * shard, rel=1e-6)
    assert peaks[1] - peaks[2] == pytest.approx(4 * p * shard, rel=1e-6)
    largest = max(sum(op.params for op in plan.workload.layer_ops(li.index)) for li in plan.workload.layers)
    working_set = largest * (2 * 2 + 4)
    assert peaks[2] - peaks[3] == pytest.approx(2 * p * shard - working_set, rel=1e-6)


@pytest.mark.parametrize(
    "mapping", [{"zero": 2}, {"zero": 3}, {"fsdp": True}, {"zero": 3, "tp": 2, "pp": 2, "dp": 2, "global_batch": 32}]
)
def test_both_engines_agree_without_contention(mapping):
    analytic = simulate(_project(engine="analytic", **mapping))
    event = simulate(_project(engine="event", **mapping))
    t = analytic.iteration_time_s
    assert event.iteration_time_s == pytest.approx(t, rel=1e-9)
    for k, v in analytic.time_breakdown_s.items():
        assert event.time_breakdown_s.get(k, 0.0) == pytest.approx(v, abs=1e-9 * t), k


def test_per_device_units_meet_once_per_sharded_collective():
    """Simulated device by device, with links shared, every rank of the stage joins each collective."""
    base = _project(3, engine="event", tp=2, dp=2, global_batch=16, micro_batch=2)
    per_device = base.model_copy(update={"run": base.run.model_copy(update={"aggregate": False, "contention": True})})
    aggregated = base.model_copy(update={"run": base.run.model_copy(update={"contention": True})})
    assert simulate(per_device).iteration_time_s == pytest.approx(simulate(aggregated).iteration_time_s, rel=1e-6)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tilewright.engine.cli",
            "run",
            "--system",
            "dgx-a100",
            "--model",
            "gpt",
            "--layers",
            "2",
            "--hidden",
            "512",
            "--heads",
            "8",
            "--seq-len",
            "256",
            "--dp",
            "4",
            "--global-batch",
            "8",
            "--engine",
            "analytic",
            "--json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_offers_every_stage_and_fsdp():
    times = {}
    for flags in (["--zero", "1"], ["--zero", "3"], ["--fsdp"]):
        out = _cli(*flags)
        assert out.returncode == 0, out.stderr
        times[flags[-1]] = json.loads(out.stdout)["iteration_time_s"]
    assert times["3"] > times["1"]
    assert times["--fsdp"] <= times["3"]


def test_cli_refuses_fsdp_with_another_stage():
    out = _cli("--fsdp", "--zero", "1")
    assert out.returncode == 2
    assert "fsdp" in out.stderr and "Traceback" not in out.stderr


def test_search_fits_a_model_too_large_for_dense_mappings_by_sharding_or_offload():
    """10 B parameters on two 80 GB GPUs: every first-stage mapping needs ≥ 9 B per parameter of model state
    (bf16 weights, fp32 gradients, 12 B of Adam over tp or dp 2: 90 GB); the second stage's optimizer
    offload to the node's host memory fits, and each candidate it ranks is what ``run`` predicts."""
    from tilewright.engine.search.parallel.extended import first_stage_only
    from tilewright.engine.search.parallel.search import search

    big = GPTSpec(name="gpt-10b", layers=10, hidden=9216, heads=72, seq_len=2048, vocab=51200)
    project = _project(0, tp=1, dp=1, micro_batch=1, global_batch=8)
    project = project.model_copy(update={"workload": big})
    assert search(project, 2, 8, resimulate=False, extensions=first_stage_only()).ranked == []
    result = search(project, 2, 8, resimulate=False)
    assert result.ranked
    best = result.ranked[0]
    assert best.candidate.offload is not None or best.candidate.zero >= 2
    mapping = best.candidate.mapping(8, project.mapping)
    run = simulate(project.model_copy(update={"mapping": mapping}))
    assert run.oom is None
    assert best.iteration_time_s == pytest.approx(run.iteration_time_s, rel=1e-9)
    dumps = {r.candidate.mapping(8, project.mapping).model_dump_json() for r in result.ranked}
    assert len(dumps) == len(result.ranked)  # no mapping ranked twice under two labels
