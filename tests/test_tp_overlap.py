"""Tensor-parallel communication overlapped with the GEMMs beside it (``mapping.overlap_tp_comm``,
``plan.tp_overlap``): ring-exchange all-gathers, pipelined forward reduce-scatters that take SMs from their
GEMM, bulk backward reduce-scatters; what the GEMM cannot cover, and the pipeline's one chunk, still shows."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.tp_overlap import PIPELINE_SMS, PIPELINE_SPLITS, TpOverlap
from tilewright.engine.simulate import make_plan, simulate

SPEC = GPTSpec(name="gpt", layers=4, hidden=8192, heads=64, seq_len=4096, vocab=51200)


class Seg:
    comm: tuple[str, float] | None = None


def _linear(kind: str, nbytes: float) -> float:
    return nbytes * 1e-9  # 1 GB/s: seconds equal gigabytes


def test_ring_exchange_all_gather_hides_behind_the_gemm_after_it():
    ov = TpOverlap(_linear, tp=4, units=132)
    seg = Seg()
    assert ov.collective(seg, "all-gather", 4e9) == (("all-gather", 4e9), 0.0)  # waits for its GEMM
    ov.gemm(3.0)  # 4 s of gather beside 3 s of GEMM: 1 s uncovered + one chunk (1 s) shows
    assert seg.comm == ("all-gather", pytest.approx(2e9))
    seg2 = Seg()
    ov.collective(seg2, "all-gather", 4e9)
    ov.gemm(10.0)  # a long GEMM hides all but the first chunk
    assert seg2.comm == ("all-gather", pytest.approx(1e9))


def test_pipelined_reduce_scatter_takes_sms_from_its_gemm():
    ov = TpOverlap(_linear, tp=8, units=132)
    ov.gemm(2.0)
    (kind, shown), slower = ov.collective(Seg(), "reduce-scatter", 4e9)
    slowed = 2.0 * 132 / (132 - PIPELINE_SMS)
    assert slower == pytest.approx(slowed - 2.0)
    assert shown == pytest.approx(1e9 * (4.0 - slowed + 4.0 / PIPELINE_SPLITS))
    assert ov.last_gemm_s == 0.0  # the next reduction pairs with the next GEMM, not this one


def test_bulk_backward_reduce_scatter_shows_only_what_the_gemm_cannot_cover():
    ov = TpOverlap(_linear, tp=8, units=132, backward=True)
    ov.gemm(3.0)
    assert ov.collective(Seg(), "reduce-scatter", 2e9) == (("reduce-scatter", 0.0), 0.0)
    ov.gemm(1.0)
    (_, shown), slower = ov.collective(Seg(), "reduce-scatter", 2e9)
    assert shown == pytest.approx(1e9) and slower == 0.0


def _project(overlap: bool, engine: str = "analytic") -> Project:
    mapping = Mapping(tp=8, pp=2, dp=1, micro_batch=1, global_batch=8, sequence_parallel=True,
                      overlap_tp_comm=overlap)
    return Project(name="t", hardware=load_system("dgx-h100"), workload=SPEC, mapping=mapping,
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def test_a_run_shows_less_tensor_parallel_time_but_never_none():
    off, on = simulate(_project(False)), simulate(_project(True))
    assert 0 < on.time_breakdown_s["tp_comm"] < 0.5 * off.time_breakdown_s["tp_comm"]
    assert on.iteration_time_s < off.iteration_time_s
    assert simulate(_project(True, "event")).iteration_time_s == pytest.approx(on.iteration_time_s, rel=1e-6)


def test_every_layer_collective_carries_at_least_its_last_chunk():
    plan_off, plan_on = make_plan(_project(False)), make_plan(_project(True))
    for kind in ("F", "B"):
        off = [s.comm for s in plan_off.stages[0].passes[(0, kind)].segments if s.comm]
        on = [s.comm for s in plan_on.stages[0].passes[(0, kind)].segments if s.comm]
        assert [k for k, _ in on] == [k for k, _ in off]  # the same collectives, in the same order
        assert all(b_on <= b_off * (1 + 1e-12) for (_, b_on), (_, b_off) in zip(on, off, strict=True))
        assert sum(b for _, b in on) < sum(b for _, b in off)


def test_overlap_needs_sequence_parallelism():
    with pytest.raises(ValueError, match="sequence_parallel"):
        Mapping(tp=8, overlap_tp_comm=True)
    Mapping(tp=1, overlap_tp_comm=True)  # nothing to overlap: accepted, changes nothing


def test_the_search_tries_the_overlap_on_sequence_parallel_seeds():
    from tilewright.engine.search.parallel.candidate import Candidate
    from tilewright.engine.search.parallel.extended import Extensions, variants

    ext = Extensions(eps=[1], cps=[1], zeros=[0, 1], fsdp=False, offload=None, overlap=True)
    seed = Candidate(tp=8, pp=2, dp=1, micro_batch=1, sequence_parallel=True)
    tried = [c for c in variants(seed, ext, SPEC, fits=True) if c.overlap_tp]
    assert len(tried) == 1 and tried[0].mapping(8).overlap_tp_comm and "ovl-tp" in tried[0].label()
    no_sp = Candidate(tp=8, pp=2, dp=1, micro_batch=1)
    assert not [c for c in variants(no_sp, ext, SPEC, fits=True) if c.overlap_tp]
    closed = Extensions(eps=[1], cps=[1], zeros=[0, 1], fsdp=False, offload=None, overlap=False)
    assert not [c for c in variants(seed, closed, SPEC, fits=True) if c.overlap_tp]
    assert not closed.allows(tried[0]) and ext.allows(tried[0])
