"""Offloaded state is reported apart from the device's peak (``results.result.memory_verdict`` /
``host_memory``): with ``mapping.memory_levels`` putting activations in the node's host memory, the peak
memory and the out-of-memory verdict are about the GPU's HBM; the host memory use gets its own, labelled
report (summary line, --json keys ``host_peak_memory_bytes``, ``host_memory_breakdown_bytes``, ``host_oom``)."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.results.result import MemoryTrack, host_memory, memory_verdict
from tilewright.engine.simulate import make_plan, simulate

SPEC = GPTSpec(name="gpt", layers=4, hidden=1024, heads=16, seq_len=1024, vocab=32000)
STATE = ("weights", "gradients", "optimizer")


def _project(levels: dict[str, str] | None = None, engine: str = "analytic") -> Project:
    mapping = Mapping(dp=8, zero=1, micro_batch=2, global_batch=32, memory_levels=levels or {})
    return Project(name="offload", hardware=load_system("dgx-a100"), workload=SPEC, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine))


def _max_over_time(track: MemoryTrack, cats: tuple[str, ...]) -> float:
    n = len(track.times)
    return max(sum(track.by_category[c][i] for c in cats) for i in range(n))


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_offloaded_activations_leave_the_device_peak(engine):
    plain, offload = simulate(_project(engine=engine)), simulate(_project({"activations": "host"}, engine))
    gpu = offload.memory_breakdown_bytes
    held = [t for t in plain.memory if t.device == plain.memory[0].device][0]
    st = make_plan(_project({"activations": "host"}, engine)).stages[0]
    host_share = st.offloaded_bytes[0] / st.act_bytes[0]  # the offloaded layers' (plan.activation_offload)
    # the ops still compute in HBM: their workspace stays on the device (``residency.workspace_level``), and the
    # layers not offloaded (the last transformer layer, the embedding, the head) keep their activations there
    assert gpu["activations"] == pytest.approx((1 - host_share) * max(held.by_category["activations"]))
    assert gpu["workspace"] == pytest.approx(max(held.by_category["workspace"]))
    # the device holds its model state, as much as without offloading: weights and optimizer never change
    assert gpu["weights"] == pytest.approx(max(held.by_category["weights"]))
    assert gpu["optimizer"] == pytest.approx(max(held.by_category["optimizer"]))
    assert offload.peak_memory_bytes == pytest.approx(_max_over_time(held, (*STATE, "workspace"))
                                                      + gpu["activations"])
    assert offload.peak_memory_bytes < plain.peak_memory_bytes
    # the host holds what left the device: the stored activations
    m = offload.metrics_json()
    assert m["host_peak_memory_bytes"] == pytest.approx(host_share * _max_over_time(held, ("activations",)))
    assert m["host_memory_breakdown_bytes"]["weights"] == 0
    assert m["host_memory_capacity_bytes"] > offload.peak_memory_bytes
    assert "host_oom" not in m and offload.oom is None
    text = offload.summary_text()
    assert "host memory" in text and "peak memory" in text
    assert "host_peak_memory_bytes" not in plain.metrics_json()


def _track(device: str, capacity: float, level: str, **cats: list[float]) -> MemoryTrack:
    return MemoryTrack(device, capacity, [0.0, 1.0, 2.0], dict(cats), level=level)


def test_a_full_host_memory_is_no_device_overflow():
    gpu = _track("n/gpu[0]/hbm", 80.0, "dram", weights=[10.0, 10.0, 10.0], activations=[0.0] * 3)
    host = _track("n/gpu[0]/ddr", 100.0, "host", weights=[0.0] * 3, activations=[50.0, 150.0, 20.0])
    row, oom = memory_verdict([gpu, host])
    assert oom is None and sum(row.values()) == 10.0
    held, capacity, over = host_memory([gpu, host])
    assert sum(held.values()) == 150.0 and capacity == 100.0
    assert over is not None and over.need_bytes == 150.0 and over.device == "n/gpu[0]/ddr"


def test_a_devices_own_levels_add_up():
    """SRAM and DRAM levels of one device (a tiled chip's ``memory_levels``) are one device's memory: its
    peak is their sum at one moment, each still checked against its own capacity."""
    sram = _track("n/chip/sram", 8.0, "sram", weights=[6.0, 6.0, 6.0], activations=[0.0] * 3)
    dram = _track("n/chip/dram", 100.0, "dram", weights=[0.0] * 3, activations=[1.0, 30.0, 5.0])
    other = _track("n/chip2/dram", 100.0, "dram", weights=[0.0] * 3, activations=[20.0, 20.0, 20.0])
    row, oom = memory_verdict([sram, dram, other])
    assert row["weights"] == 6.0 and row["activations"] == 30.0 and oom is None
    over = _track("n/chip/sram", 5.0, "sram", weights=[6.0, 6.0, 6.0], activations=[0.0] * 3)
    assert memory_verdict([over, dram])[1].device == "n/chip/sram"


def test_a_full_host_memory_is_reported_as_the_hosts():
    """A device's share of its node's memory too small for what it offloads: reported as the host's, not
    as the GPU's out-of-memory."""
    import dataclasses

    result = simulate(_project({"activations": "host"}))
    need = result.metrics_json()["host_peak_memory_bytes"]
    tracks = [dataclasses.replace(t, capacity_bytes=need / 2) if t.host else t for t in result.memory]
    full = dataclasses.replace(result, memory=tracks)
    assert full.oom is None and full.host_oom is not None
    assert full.host_oom.need_bytes == pytest.approx(need) and full.host_oom.capacity_bytes == need / 2
    assert full.metrics_json()["host_oom"]["need_bytes"] == pytest.approx(need)
    text = full.summary_text()
    assert "HOST MEMORY FULL" in text and "OUT OF MEMORY" not in text


def test_a_full_host_memory_reads_as_out_of_memory_in_the_search_rows():
    """The search's event-engine confirmation counts a full host memory as out of memory, as its analytic
    stage does (``extended``'s ``Exact``) and ``tilewright run``'s exit code."""
    import dataclasses

    from tilewright.engine.search.parallel.candidate import Candidate
    from tilewright.engine.search.parallel.ranking import Ranked, SearchResult, result_json

    result = simulate(_project({"activations": "host"}))
    need = result.metrics_json()["host_peak_memory_bytes"]
    full = dataclasses.replace(result, memory=[dataclasses.replace(t, capacity_bytes=need / 2) if t.host else t
                                               for t in result.memory])
    c = Candidate(tp=1, pp=1, dp=8, micro_batch=2)  # type: ignore[arg-type]
    rows = [Ranked(c, result.iteration_time_s, result.peak_memory_bytes, event=r) for r in (result, full)]
    fits, over = result_json(SearchResult(rows, global_batch=32, devices=8))["candidates"]
    assert fits["event_oom"] is False and over["event_oom"] is True
