"""The overlapped expert all-to-all's cover follows the schedule (``PassComms._a2a``): Megatron-Core's combined 1F1B
(``TransformerLayerSchedulePlan.run``) and DeepSeek's DualPipe run each all-to-all of one micro-batch beside one
node of the other's layer — attention beside the combine, the MLP beside the dispatch — so each all-to-all hides
behind the compute its pass ran since its previous all-to-all, and no compute hides two of them. Before, every
all-to-all of a layer hid behind all the layer's compute so far: the attention and router covered the combine
again, and compute added before the first all-to-all could make the layer faster than without it.

The expected exposures are derived here from the pieces: a made-up all-to-all's seconds, the compute before each,
and the 24 of the H100's 132 SMs the all-to-all's kernel takes from it (``perf.comm_sm``)."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.pass_builder import PassBuilder
from tilewright.engine.simulate import simulate

from tests.a2a_fixtures import LATENCY, NBYTES, SMS, UNITS, a2a_seconds, h100_builder
from tests.agreement import assert_engines_agree

_seconds = a2a_seconds


def _builder(kind: str = "F") -> tuple[PassBuilder, object]:
    """A builder of one pass over a real H100 whose all-to-alls take ``_seconds``, and an op to hang them on."""
    b, op, _ = h100_builder(kind)
    return b, op


def _layer(before_s: float, between_s: float) -> tuple[float, float, float]:
    """A layer of ``before_s`` of compute, an all-to-all, ``between_s`` more, a second all-to-all: (seconds each
    all-to-all shows, the layer's whole time: its compute, what the all-to-alls' SMs cost it, what shows)."""
    b, op = _builder()
    b.layer_busy += before_s
    first = b._a2a(op, NBYTES)
    b.layer_busy += between_s
    second = b._a2a(op, NBYTES)
    shown = [_seconds(n) if n > 0 else 0.0 for n in (first, second)]
    slowed = b._open.busy_s if b._open is not None else 0.0
    return shown[0], shown[1], before_s + between_s + slowed + sum(shown)


def _want(cover_s: float) -> float:
    """What an all-to-all beside ``cover_s`` of compute shows: its seconds beyond the compute stretched by the
    SMs it holds; below the all-to-all's own floor, nothing or the floor (``plan.exposed``)."""
    left = max(0.0, _seconds(NBYTES) - cover_s * UNITS / (UNITS - SMS))
    return left if left >= LATENCY or left == 0.0 else -1.0  # -1: either 0 or the floor


@pytest.mark.parametrize(("before_s", "between_s"), [(0.0, 0.0), (50e-6, 100e-6), (150e-6, 30e-6),
                                                     (30e-6, 150e-6), (200e-6, 200e-6), (250e-6, 10e-6)])
def test_each_all_to_all_hides_behind_its_own_node_only(before_s, between_s):
    first, second, _ = _layer(before_s, between_s)
    for got, cover in ((first, before_s), (second, between_s)):  # the second: not before + between
        want = _want(cover)
        if want < 0:
            assert got == 0.0 or got == pytest.approx(LATENCY)
        else:
            assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_compute_before_the_first_all_to_all_never_makes_the_layer_faster():
    """Adding δ of compute before the first all-to-all costs the layer at least nothing and at most δ stretched
    by the all-to-all's SMs: what it hides of an exposed all-to-all it pays in its own time, and it hides nothing
    of the second (the old cover, all the layer's compute so far, hid both behind it)."""
    between = 60e-6  # the second all-to-all shows 220 − 60·132/108 = 146.7 µs whatever comes before
    # 0 … 400 µs: the first all-to-all from wholly shown to hidden, leaving out where what it shows falls below its
    # floor (``plan.exposed`` then charges the nearer of nothing and the floor, a step of its own)
    steps = [i * 10e-6 for i in range(41) if _want(i * 10e-6) >= 0]
    layers = [_layer(d, between) for d in steps]
    assert len({round(second, 15) for _, second, _ in layers}) == 1
    times = [t for _, _, t in layers]
    for i in range(1, len(steps)):
        assert times[i] >= times[i - 1] - 1e-15
        assert times[i] - times[i - 1] <= (steps[i] - steps[i - 1]) * UNITS / (UNITS - SMS) + 1e-15


def test_the_compute_between_resets_at_each_all_to_all_across_layers():
    """The node runs across a layer boundary: a backward's combine gradient hides behind the attention of the
    layer before it in backward order (Megatron-Core's "attn" node beside the forward's combine)."""
    b, op = _builder("B")
    assert b._a2a(op, NBYTES) == 0.0  # the first, the last layer's combine gradient: held to the pass's end
    b.layer_busy += 300e-6  # the layer's MLP backward: the dispatch's gradient hides
    assert b._a2a(op, NBYTES) == 0.0
    b.layer_busy += 40e-6  # its attention backward
    b.next_layer()
    b.layer_busy += 20e-6  # the next layer's combine and shared experts' backward
    assert b.node_busy == pytest.approx(60e-6)
    shown = b._a2a(op, NBYTES)
    assert _seconds(shown) == pytest.approx(_seconds(NBYTES) - 60e-6 * UNITS / (UNITS - SMS), rel=1e-9)
    assert b.node_busy == 0.0 and b.layer_busy == pytest.approx(20e-6)


# narrow experts (ffn 256) and top-4 over two DGX-H100 nodes: the all-to-alls outlast the experts' nodes
SPEC = GPTSpec(name="moe", layers=3, hidden=1024, heads=8, seq_len=2048, vocab=32000,
               moe={"experts": 16, "top_k": 4, "expert_ffn": 256, "shared_experts": 1})


def _project(shared_ffn: int, engine: str = "analytic") -> Project:
    spec = SPEC.model_copy(update={"moe": SPEC.moe.model_copy(update={"shared_expert_ffn": shared_ffn})})
    mapping = Mapping(tp=1, pp=1, dp=16, ep=16, expert_imbalance=1.0, micro_batch=1, global_batch=32,
                      overlap_ep_comm=True)
    return Project(name="moe", hardware=load_system("dgx-h100"), workload=spec, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


WORK = ("compute", "memory_stall")  # the device's own work: a small GEMM's time is mostly its memory stall


def test_a_wider_shared_expert_never_speeds_the_overlapped_run_up():
    """A wider shared expert adds compute beside the all-to-alls (and nothing to them): the iteration cannot get
    shorter. The old cover counted the shared expert's backward under both of the layer's backward all-to-alls,
    and the run got faster from a 64- to a 256-wide shared expert (3.47 % → 3.22 % over none)."""
    runs = [simulate(_project(f)) for f in (64, 128, 256, 512)]
    for a, b in zip(runs, runs[1:], strict=False):
        assert sum(b.time_breakdown_s[k] for k in WORK) > sum(a.time_breakdown_s[k] for k in WORK)
        assert b.iteration_time_s >= a.iteration_time_s
    assert_engines_agree(runs[-1], simulate(_project(512, "event")))
