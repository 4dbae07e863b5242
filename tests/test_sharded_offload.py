"""Offloaded sharded state moves its shard over the host link (``engine.plan.sharding``, ``offloaded_shards``):
ZeRO-3/FSDP weights in host memory are copied host → device as the rank's shard before each all-gather and the
ops read the gathered layer from device memory; gradients in host memory go back as the reduce-scattered shard.
ZeRO-2 gathers no weights, so host-held weights still stream whole to every op.

Expected seconds are derived here from the dgx-a100 preset's host link: 25 GB/s per GPU (pinned host-device
copies; the node's DDR4, 409.6 GB/s × 0.7 over 8 GPUs, is not the bound), with bf16 weights (2 B) and fp32
gradients (4 B) per parameter."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.simulate import make_plan, simulate

DP = 8
HOST_LINK = 25e9  # dgx-a100 preset: host_link_bandwidth_bytes_per_s
SPEC = GPTSpec(name="gpt-zero", layers=8, hidden=2048, heads=16, seq_len=1024, vocab=51200)
DEVICE = {"weights": "hbm", "gradients": "hbm"}  # the same levels named, so only the host's share differs


def _project(levels: dict, engine: str = "analytic", **mapping) -> Project:
    m = {"tp": 1, "pp": 1, "dp": DP, "micro_batch": 4, "global_batch": 4 * DP * 4, "memory_levels": levels} | mapping
    return Project(name="zero", hardware=load_system("dgx-a100"), workload=SPEC, mapping=Mapping(**m),
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _busy(plan, kind: str) -> float:
    return plan.stages[0].passes[(0, kind)].busy_s


def _device_wait(host, dram, kind: str) -> float:
    """What a pass of ``host`` spends more on the device than the same pass of ``dram``: its extra busy time plus
    the time the device waited for the host in ``dram`` and no longer does (the host issues the next kernels
    while the device waits for a copy, so a copy first takes up that slack)."""
    slack = dram.stages[0].passes[(0, kind)].dispatch_wait_s - host.stages[0].passes[(0, kind)].dispatch_wait_s
    return _busy(host, kind) - _busy(dram, kind) + slack


def test_without_prefetch_each_gather_waits_for_its_shard_only():
    """ZeRO-3 without prefetch: nothing hides the copies, so the forward and the backward each take one copy of
    every layer's weight shard longer (1 / dp of the stage's weights over the host link), not the whole weights
    streamed to every op."""
    dram, host = (make_plan(_project(levels, zero=3)) for levels in (DEVICE, DEVICE | {"weights": "host"}))
    shard_s = dram.stages[0].params * 2 / DP / HOST_LINK
    assert _device_wait(host, dram, "F") == pytest.approx(shard_s, rel=1e-6)
    assert _device_wait(host, dram, "B") == pytest.approx(shard_s, rel=1e-6)


def test_offloaded_gradients_go_back_as_their_shard():
    """Gradients in host memory: each layer's reduce-scattered shard (1 / dp of its fp32 gradients) copied to
    the host after its reduce-scatter; without overlap nothing hides it."""
    dram, host = (make_plan(_project(levels, zero=3)) for levels in (DEVICE, DEVICE | {"gradients": "host"}))
    shard_s = dram.stages[0].params * 4 / DP / HOST_LINK
    assert _busy(host, "F") == pytest.approx(_busy(dram, "F"), rel=1e-12)
    assert _device_wait(host, dram, "B") == pytest.approx(shard_s, rel=1e-6)


def test_prefetch_hides_the_copies_behind_compute():
    """FSDP prefetches: a layer's shard copy runs ahead of its gather behind the layer before it, so only the
    first layer's (nothing before it to hide behind) shows, never more than all copies together."""
    dram, host = (make_plan(_project(levels, fsdp=True)) for levels in (DEVICE, DEVICE | {"weights": "host"}))
    shard_s = dram.stages[0].params * 2 / DP / HOST_LINK
    shown = _device_wait(host, dram, "F")
    assert 0 < shown < shard_s / 2


def test_zero2_streams_whole_weights_to_every_op():
    """ZeRO-2 holds every weight whole: from host memory the forward streams them all, at least the stage's
    weights over the host link."""
    plan = make_plan(_project(DEVICE | {"weights": "host"}, zero=2))
    assert _busy(plan, "F") >= plan.stages[0].params * 2 / HOST_LINK


@pytest.mark.parametrize("mapping", [{"zero": 3}, {"fsdp": True}, {"fsdp": True, "recompute": "full"}])
def test_both_engines_agree_with_offloaded_shards(mapping):
    levels = {"weights": "host", "gradients": "host"}
    a, e = (simulate(_project(levels, engine, **mapping)) for engine in ("analytic", "event"))
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-6)
