"""A sharded layer's gathers and reduce-scatters hide behind the previous layer's span, not only its device time.

FSDP's prefetched all-gather and its reduce-scatter run on NCCL streams of their own, so they progress while the
compute stream waits for the host's launches. Where the host binds, a layer lasts its host time
(``Segment.close``), and that whole span covers the next layer's collectives (``PassBuilder.next_layer``): the
slower the host, the less of them shows, until only the ones with nothing before them are left (the first
layer's gathers, the last reduce-scatter), whatever the host costs beyond that."""

from __future__ import annotations

import sys
from pathlib import Path

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
    assert slower_still == host_bound  # saturated: what shows has nothing before it to hide behind
    assert host_bound > 0
