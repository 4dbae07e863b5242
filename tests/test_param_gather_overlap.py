"""ZeRO-1/2 with Megatron's ``overlap_param_gather``: the post-step weight gather hides behind the next
forward, bucket by bucket, except its first bucket and what the forward cannot cover (``plan.param_gather``).

Expected times are derived from the dgx-a100 preset's NVSwitch figures, not from the engine: a ring
all-gather of B bytes over p ranks sends (p − 1)/p · B per rank at the link's achieved bandwidth, plus a
start-up latency that does not depend on B (so it cancels between a gather and a slice of it)."""

from __future__ import annotations

import pytest
from tilewright.engine.engines.energy import iteration_traffic
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.program import program_for
from tilewright.engine.plan.timing import pass_parts
from tilewright.engine.simulate import make_plan, simulate

DP = 8  # one DGX A100 node: every rank one NVSwitch hop from the others
NVLINK_BYTES_PER_S = 300e9 * 0.75  # dgx-a100 preset: NVLink3 300 GB/s per direction, efficiency 0.75
LONG = GPTSpec(name="gpt-pg", layers=8, hidden=2048, heads=16, seq_len=1024, vocab=51200)
# short sequences, one sample per micro-batch, wide layers: the forward (host-bound at 32 tokens: its kernels'
# dispatch, whatever their size) is far shorter than the weights' gather
SHORT = LONG.model_copy(update={"seq_len": 32, "hidden": 4096, "heads": 32})


def _project(zero: int = 1, engine: str = "analytic", spec: GPTSpec = LONG, **mapping) -> Project:
    mb = 1 if spec is SHORT else 4
    m = {"tp": 1, "pp": 1, "dp": DP, "micro_batch": mb, "global_batch": mb * DP * 4, "zero": zero} | mapping
    return Project(
        name="pg",
        hardware=load_system("dgx-a100"),
        workload=spec,
        mapping=Mapping(**m),
        run=RunSettings(dtype="bf16", engine=engine, contention=False),
    )


def _ring_seconds(nbytes: float) -> float:
    """Bandwidth term of a ring all-gather of ``nbytes`` over DP ranks."""
    return (DP - 1) / DP * nbytes / NVLINK_BYTES_PER_S


def _layers(plan) -> int:
    return sum(len(ls) for ls in plan.stages[0].chunk_layers.values())


def test_long_forward_shows_only_the_first_layers_bucket():
    """The 8-block GPT's stage holds 10 layers (embedding, blocks, head); its forward of 4 × 1024 tokens is
    far longer than the gather, so only the first bucket — 1/10 of the bf16 weights — shows: the saving
    is the ring's bandwidth time of the other 9/10 (the latency is paid by the first bucket either way)."""
    off, on = make_plan(_project()), make_plan(_project(overlap_param_gather=True))
    weights = off.stages[0].params * 2  # bf16
    layers = _layers(on)
    assert layers == 10
    first, rest = on.zero_gather_exposed(0)
    whole = on.zero_gather(0)
    assert not rest.phases
    assert first.phases[0].bytes_per_member == pytest.approx(whole.phases[0].bytes_per_member / layers, rel=1e-12)
    saved = simulate(_project()).iteration_time_s - simulate(_project(overlap_param_gather=True)).iteration_time_s
    assert saved == pytest.approx(_ring_seconds(weights) * (1 - 1 / layers), rel=1e-6)
    # the hidden bytes still cross the links
    assert iteration_traffic(program_for(on)).link_bytes == pytest.approx(
        iteration_traffic(program_for(off)).link_bytes, rel=1e-12
    )


def test_short_forward_leaves_more_of_the_gather_exposed():
    """Forward of 32 tokens of a 4096-wide GPT: the other 9 buckets run behind the first micro-batch's forward up
    to its last layer, F · 9/10; what it cannot cover shows as that fraction of the rest's bytes."""
    plan = make_plan(_project(spec=SHORT, overlap_param_gather=True))
    off = simulate(_project(spec=SHORT))
    on = simulate(_project(spec=SHORT, overlap_param_gather=True))
    weights = plan.stages[0].params * 2
    layers = _layers(plan)
    forward = pass_parts(plan, 0, plan.stages[0].passes[(0, "F")])[0]
    hide = forward * (layers - 1) / layers
    whole = plan.zero_gather(0).time(plan.hw)
    latency = whole - _ring_seconds(weights)  # the gather's start-up, the same for any slice of it
    rest = latency + _ring_seconds(weights * (layers - 1) / layers)
    assert rest > hide  # the case this test is for
    shown = (rest - hide) / rest
    first = latency + _ring_seconds(weights / layers)
    exposed = first + latency + _ring_seconds(weights * (layers - 1) / layers * shown)
    assert exposed > first  # more than the first bucket shows
    assert off.iteration_time_s - on.iteration_time_s == pytest.approx(whole - exposed, rel=1e-6)
    assert off.time_breakdown_s["dp_comm"] - on.time_breakdown_s["dp_comm"] == pytest.approx(whole - exposed, rel=1e-6)


@pytest.mark.parametrize("zero", [0, 3])
def test_zero0_and_zero3_have_no_post_step_gather_to_hide(zero: int):
    """ZeRO-0 replicates the weights and ZeRO-3 keeps them sharded: neither gathers after the step, so the
    flag changes nothing there (ZeRO-3's per-layer prefetch is ``plan.sharding``'s)."""
    plan = make_plan(_project(zero, overlap_param_gather=True))
    assert all(not part.phases for part in plan.zero_gather_exposed(0))
    if zero == 0:
        assert simulate(_project(zero, overlap_param_gather=True)).iteration_time_s == pytest.approx(
            simulate(_project(zero)).iteration_time_s, rel=1e-12
        )


@pytest.mark.parametrize("zero", [1, 2])
def test_flag_off_gathers_everything_after_the_step(zero: int):
    """Without the flag the whole gather is waited for: the stage ends its optimizer step plus the gather
    after its gradients are reduced, and dp_comm holds the gather in full."""
    plan = make_plan(_project(zero))
    first, rest = plan.zero_gather_exposed(0)
    assert first is plan.zero_gather(0) and not rest.phases
    weights = plan.stages[0].params * 2
    on, off = simulate(_project(zero, overlap_param_gather=True)), simulate(_project(zero))
    layers = _layers(plan)
    assert off.iteration_time_s - on.iteration_time_s == pytest.approx(
        _ring_seconds(weights) * (1 - 1 / layers), rel=1e-6
    )


CASES = [
    {"zero": 1},
    {"zero": 2},
    {"zero": 1, "spec": SHORT},
    {"zero": 2, "spec": SHORT, "overlap_grad_reduce": True},
    {"zero": 1, "tp": 2, "pp": 2, "dp": 2, "global_batch": 32},
    {"zero": 1, "tp": 1, "pp": 2, "dp": 4, "global_batch": 32, "schedule": "interleaved-1f1b", "interleave": 2},
]


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_both_engines_agree_without_contention(case):
    analytic = simulate(_project(engine="analytic", overlap_param_gather=True, **case))
    event = simulate(_project(engine="event", overlap_param_gather=True, **case))
    t = analytic.iteration_time_s
    assert event.iteration_time_s == pytest.approx(t, rel=1e-9)
    for k, v in analytic.time_breakdown_s.items():
        assert event.time_breakdown_s.get(k, 0.0) == pytest.approx(v, abs=1e-9 * t), k
