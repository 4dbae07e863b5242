"""Offload in training: ``mapping.memory_levels`` putting state in a DGX node's host memory (PCIe).

Expected costs derive from the preset's host link (25 GB/s per A100, pinned copies), its CPUs' Adam rate and
the per-parameter bytes of mixed-precision Adam, not from the engine's output."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.simulate import make_plan, simulate

HOST_LINK = 25e9  # dgx-a100 preset: each GPU's PCIe 4.0 x16 link to the node's DDR
CPU_ADAM = 1.4e9  # dgx-a100 preset: params/s the node's CPUs update with CPU-Adam (DeepSpeed PR #735)
SPEC = GPTSpec(name="gpt-offload", layers=4, hidden=1024, heads=16, seq_len=1024, vocab=51200)


def _project(levels: dict[str, str] | None = None, engine: str = "analytic") -> Project:
    mapping = Mapping(tp=1, pp=1, dp=2, micro_batch=2, global_batch=8, zero=1, memory_levels=levels or {})
    return Project(
        name="offload",
        hardware=load_system("dgx-a100"),
        workload=SPEC,
        mapping=mapping,
        run=RunSettings(dtype="bf16", engine=engine, contention=False),
    )


def _hbm_peak(result) -> float:
    """Peak occupancy of the GPU's own memory track."""
    tracks = [t for t in result.memory if "host" not in t.device]
    return max(max(t.totals()) for t in tracks)


def test_optimizer_state_in_host_memory_is_stepped_by_the_host_cpus_and_leaves_the_gpu():
    """The host's CPUs step the state where it lives (``plan.host_step``: the preset's CPU-Adam rate for the
    node, shared by its 8 GPUs, bounds it here, above 4 B each way over the link); the state (12 B per
    parameter, ZeRO-1 shards it over dp) no longer occupies the GPU."""
    base, off = simulate(_project()), simulate(_project({"optimizer": "host"}))
    local = make_plan(_project()).stages[0].params / 2
    assert 8 / CPU_ADAM > 4 / HOST_LINK
    assert off.time_breakdown_s["optimizer"] == pytest.approx(local * 8 / CPU_ADAM, rel=1e-6)
    assert off.iteration_time_s - base.iteration_time_s == pytest.approx(
        off.time_breakdown_s["optimizer"] - base.time_breakdown_s["optimizer"], rel=1e-6
    )
    assert _hbm_peak(base) - _hbm_peak(off) == pytest.approx(local * 12, rel=1e-6)


def test_activation_offload_copies_the_stored_activations_out_and_back():
    """Stored activations of the offloaded layers (all transformer layers but the last, ``plan.activation_offload``)
    go to the host in the forward and come back in the backward; with these small kernels and a 25 GB/s link,
    the copies bound every pass: per micro-batch at least 2 × stored bytes / link, and the GPU no longer holds
    them."""
    base, off = simulate(_project()), simulate(_project({"activations": "host"}))
    plan = make_plan(_project({"activations": "host"}))
    stored = plan.stages[0].offloaded_bytes[0]  # per micro-batch
    copies = 2 * stored / HOST_LINK * plan.micro_batches
    assert off.iteration_time_s >= base.iteration_time_s + 0.5 * copies
    assert off.iteration_time_s <= base.iteration_time_s + copies
    assert _hbm_peak(off) < _hbm_peak(base) - 0.9 * stored


def test_weights_in_host_memory_are_streamed_every_pass():
    base, off = simulate(_project()), simulate(_project({"weights": "host"}))
    assert off.iteration_time_s > base.iteration_time_s


@pytest.mark.parametrize("levels", [{"optimizer": "host"}, {"activations": "host"}, {"weights": "host"}])
def test_both_engines_agree(levels):
    a = simulate(_project(levels, "analytic"))
    e = simulate(_project(levels, "event"))
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
