"""A sharded layer's gathers and reduce-scatters hide behind the previous layer's span, not only its device time.

FSDP's prefetched all-gather and its reduce-scatter run on NCCL streams of their own, so they progress while the
compute stream waits for the host's launches. Where the host binds, a layer lasts its host time
(``Segment.close``), and that whole span covers the next layer's collectives (``PassBuilder.next_layer``): the
slower the host, the less of them shows, until only the ones with nothing before them are left (the first
layer's gathers, the last reduce-scatter), whatever the host costs beyond that."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.simulate import simulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from calibrate_public_megatron_logs import scaled_host  # noqa: E402  (every host cost of the preset × F)


def _exposed_sharding(scale: float) -> float:
    spec = GPTSpec(name="g", layers=4, hidden=4096, heads=32, seq_len=1024, vocab=8192)
    p = Project(name="fsdp", hardware=load_system("dgx-h100"), workload=spec,
                mapping=Mapping(dp=8, micro_batch=1, global_batch=16, fsdp=True), run=RunSettings(engine="analytic"))
    return simulate(scaled_host(p, scale)).time_breakdown_s["dp_comm"]


def test_a_host_bound_layer_hides_the_next_layers_collectives() -> None:
    device_bound, host_bound, slower_still = (_exposed_sharding(s) for s in (1.0, 20.0, 100.0))
    assert host_bound < 0.5 * device_bound  # the spans now cover what the device time could not
    assert slower_still == pytest.approx(host_bound, rel=1e-9)  # saturated: nothing before what shows
    assert host_bound > 0


def test_the_span_adds_each_segments_wait_for_the_host() -> None:
    """A layer of two segments, one device-bound (100 µs of kernels, 10 µs of host), closed by a collective, and
    one host-bound (10 µs of kernels, 100 µs of host): each lasts max(device, host), 100 + 100 = 200 µs, not
    max(110, 110). The segment open when the next layer starts counts for it only what it gains after."""
    from tests.a2a_fixtures import h100_builder

    b, op, _ = h100_builder("F")
    b.next_layer()
    b.add_op(op, backward=False)
    b._open.busy_s, b._open.host_s = 100e-6, 10e-6
    b.layer_busy = 100e-6
    b.dp_comms([("all-gather", 1e6)], op.layer, op.name, calls=False)  # closes the device-bound segment
    b.add_op(op, backward=False)
    b._open.busy_s, b._open.host_s = 10e-6, 100e-6
    b.layer_busy = 110e-6
    assert b.next_layer() == pytest.approx(200e-6)
    assert b.prev_layer_device == pytest.approx(110e-6)
    b._open.host_s += 50e-6  # the next layer's host work in the same open segment: 50 µs more of wait
    b.layer_busy = 0.0
    assert b.next_layer() == pytest.approx(50e-6)


def test_only_the_kernels_lose_the_sms_nccl_holds() -> None:
    """A host-bound layer (20 µs of kernels, 1,000 µs of host) covers a 2,000 µs gather for its span, 1,000 µs:
    the SMs NCCL holds slow its 20 µs of kernels only (by 132 / 108), not the host's time."""
    from tests.a2a_fixtures import SMS, UNITS, h100_builder

    b, op, _ = h100_builder("F")
    b.next_layer()
    b.add_op(op, backward=False)
    b._open.busy_s, b._open.host_s = 20e-6, 1000e-6
    b.layer_busy = 20e-6
    span = b.next_layer()
    assert span == pytest.approx(1000e-6)
    b.add_op(op, backward=False)
    before = b._open.busy_s

    class _Shard:
        def seconds(self, kind: str, nbytes: float) -> float:
            return 2000e-6

    assert b.shard_cover(_Shard(), [("all-gather", 1.0)], span, op.name, op.layer) == pytest.approx(span)
    lost = b._open.busy_s - before
    assert 0 < lost <= 20e-6 * UNITS / (UNITS - SMS) - 20e-6 + 1e-15
