"""The exposed part of an overlapped expert all-to-all (``mapping.overlap_ep_comm``, ``pass_comms.PassComms._a2a``) is
its time minus what the cover hides, charged as the bytes of the same all-to-all that take that long
(``plan.exposed``) — not the all-to-all carrying that fraction of its bytes, which pays its fixed latency again."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.exposed import bytes_for
from tilewright.engine.plan.pass_builder import PassBuilder
from tilewright.engine.plan.sharding import EP_PREFIX
from tilewright.engine.simulate import make_plan

from tests.a2a_fixtures import h100_builder

LATENCY = 20e-6  # s: a made-up all-to-all's fixed part
BANDWIDTH = 50e9  # bytes/s: and its bandwidth


def _seconds(nbytes: float) -> float:
    return LATENCY + nbytes / BANDWIDTH


def test_the_exposed_bytes_take_the_uncovered_seconds():
    nbytes = 10e6  # 20 µs + 200 µs
    for shown in (30e-6, 100e-6, 219e-6):
        b = bytes_for(_seconds, nbytes, shown)
        assert _seconds(b) == pytest.approx(shown, rel=1e-9)
        assert b == pytest.approx((shown - LATENCY) * BANDWIDTH, rel=1e-9)  # the latency is paid once
        fraction = nbytes * shown / _seconds(nbytes)  # the old charge: a smaller all-to-all
        assert _seconds(fraction) > shown


def test_whole_and_below_the_floor():
    assert bytes_for(_seconds, 10e6, 1.0) == 10e6  # longer than the whole: all of it shows
    assert bytes_for(_seconds, 10e6, 5e-6) == 0.0  # well below the latency: nothing
    tiny = bytes_for(_seconds, 10e6, 15e-6)  # nearer the latency than nothing: the floor itself
    assert 0 < tiny < 1e-3 and _seconds(tiny) == pytest.approx(LATENCY)
    assert bytes_for(_seconds, 0.0, 1.0) == 0.0


def _context(cover_s: float) -> tuple[PassBuilder, object]:
    """A forward's builder that has run ``cover_s`` of compute since its last all-to-all, and an op of the layer."""
    b, op, _ = h100_builder("F")
    b.layer_busy = cover_s  # the compute since the pass's last all-to-all (here: its start) hides it
    return b, op


@pytest.mark.parametrize("cover_s", [0.0, 50e-6, 150e-6, 215e-6, 300e-6])
def test_builder_charges_the_all_to_all_minus_its_cover(cover_s):
    """The cover is the node's compute stretched by the 24 of the H100's 132 SMs the all-to-all's kernel holds
    beside it (``perf.comm_sm``); the compute loses 24 / 132 of the overlapped window, charged to the open
    segment and not to the node's compute (the next all-to-all's cover)."""
    nbytes = 10e6
    b, op = _context(cover_s)
    assert (b.ctx.dev.compute.gemm_units, b.ctx.dev.compute.collective_sms) == (132, 24)
    shown = b._a2a(op, nbytes)
    cover = cover_s * 132 / (132 - 24)
    want = max(0.0, _seconds(nbytes) - cover)
    if want >= LATENCY:
        assert _seconds(shown) == pytest.approx(want, rel=1e-9)
    else:  # below the all-to-all's own floor: nothing, or the floor where nearer
        assert shown == 0.0 or _seconds(shown) == pytest.approx(LATENCY)
    slower = min(_seconds(nbytes), cover) * 24 / 132
    assert (b._open.busy_s if b._open is not None else 0.0) == pytest.approx(slower, rel=1e-9)
    assert b.layer_busy == cover_s  # the layer's compute at full rate, the SMs' loss not in it
    assert b.node_busy == 0.0  # the next all-to-all's node starts here


def test_plan_exposed_parts_are_shorter_than_the_whole():
    """Over InfiniBand (16 GPUs, two nodes) with narrow experts (ffn 256, top-4: the all-to-all outlasts the
    experts' node beside it) part of an all-to-all shows: every exposed part, as the plan times it, is shorter
    than the whole."""
    spec = GPTSpec(name="moe", layers=2, hidden=1024, heads=8, seq_len=2048, vocab=32000,
                   moe={"experts": 16, "top_k": 4, "expert_ffn": 256})

    def project(overlap: bool) -> Project:
        m = Mapping(tp=1, pp=1, dp=16, ep=16, micro_batch=1, global_batch=32, overlap_ep_comm=overlap)
        return Project(name="moe", hardware=load_system("dgx-h100"), workload=spec, mapping=m,
                       run=RunSettings(dtype="bf16", contention=False))

    plain, hidden = make_plan(project(False)), make_plan(project(True))
    kind = EP_PREFIX + "all-to-all"
    seen = 0
    for p in ("F", "B"):
        whole = [s.comm[1] for s in plain.stages[0].passes[(0, p)].segments if s.comm and s.comm[0] == kind]
        shown = [s.comm[1] for s in hidden.stages[0].passes[(0, p)].segments if s.comm and s.comm[0] == kind]
        assert all(0 < b < max(whole) for b in shown)
        for b in shown:
            assert hidden.tp_time(0, 0, kind, b) < plain.tp_time(0, 0, kind, max(whole))
        seen += len(shown)
    assert seen > 0
