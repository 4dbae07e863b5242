"""Tensor-parallel communication overlapped with the GEMMs beside it (``mapping.overlap_tp_comm``,
``plan.tp_overlap``): ring-exchange all-gathers, pipelined forward reduce-scatters that take SMs from their
GEMM, bulk backward reduce-scatters; what the GEMM cannot cover, and the pipeline's one chunk, still shows."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.plan.tp_overlap import PIPELINE_SMS, PIPELINE_SPLITS, RING_SMS, TpOverlap, gemm_chunks
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


def test_ring_exchange_reduce_scatter_sets_one_sm_aside_and_shows_one_of_tp_chunks():
    """NVIDIA's fp8 H100 userbuffers configurations (RingExchangeOverlapCfg(num_sm=1, set_sm_margin=True) for
    proj_fprop and fc2_fprop): the GEMM keeps all but one SM; one of tp chunks shows, and what it cannot cover."""
    ov = TpOverlap(_linear, tp=8, units=132, ring_reduce_scatter=True)
    ov.gemm(2.0)
    (kind, shown), slower = ov.collective(Seg(), "reduce-scatter", 4e9)
    slowed = 2.0 * 132 / 131  # RING_SMS of 132 set aside
    assert RING_SMS == 1 and kind == "reduce-scatter"
    assert slower == pytest.approx(slowed - 2.0)
    assert shown == pytest.approx(1e9 * (4.0 - slowed + 4.0 / 8))
    ov.gemm(10.0)  # a GEMM longer than the ring: only the last of the 8 chunks shows
    (_, shown), _ = ov.collective(Seg(), "reduce-scatter", 4e9)
    assert shown == pytest.approx(0.5e9)


def test_ring_exchange_changes_only_the_forward_reduce_scatters():
    """The backward's reductions stay bulk and the all-gathers ring exchanges either way."""
    for backward in (False, True):
        pipe = TpOverlap(_linear, tp=8, units=132, backward=backward)
        ring = TpOverlap(_linear, tp=8, units=132, backward=backward, ring_reduce_scatter=True)
        for ov in (pipe, ring):
            ov.gemm(1.0)
        a = pipe.collective(Seg(), "reduce-scatter", 2e9)
        b = ring.collective(Seg(), "reduce-scatter", 2e9)
        assert (a == b) == backward
        seg_p, seg_r = Seg(), Seg()
        pipe.collective(seg_p, "all-gather", 2e9)
        ring.collective(seg_r, "all-gather", 2e9)
        pipe.gemm(1.0)
        ring.gemm(1.0)
        assert seg_p.comm == seg_r.comm


def test_bulk_backward_reduce_scatter_shows_only_what_the_gemm_cannot_cover():
    ov = TpOverlap(_linear, tp=8, units=132, backward=True)
    ov.gemm(3.0)
    assert ov.collective(Seg(), "reduce-scatter", 2e9) == (("reduce-scatter", 0.0), 0.0)
    ov.gemm(1.0)
    (_, shown), slower = ov.collective(Seg(), "reduce-scatter", 2e9)
    assert shown == pytest.approx(1e9) and slower == 0.0


def _project(overlap: bool, engine: str = "analytic", rs: str = "pipeline") -> Project:
    mapping = Mapping(tp=8, pp=2, dp=1, micro_batch=1, global_batch=8, sequence_parallel=True,
                      overlap_tp_comm=overlap, tp_overlap_reduce_scatter=rs)
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


def test_a_ring_exchange_run_keeps_the_backward_and_slows_no_forward_gemm_by_sixteen_sms():
    """'ring_exchange' against 'pipeline' in a whole plan: the backward passes are the same segments; every
    forward reduce-scatter still carries at least its last of tp chunks; the forward's busy time drops by the
    SMs no longer set aside (15 of 132 on proj's and fc2's GEMMs); both engines agree."""
    pipe, ring = make_plan(_project(True)), make_plan(_project(True, rs="ring_exchange"))
    off = make_plan(_project(False))
    p_b, r_b = pipe.stages[0].passes[(0, "B")], ring.stages[0].passes[(0, "B")]
    assert [(s.busy_s, s.comm) for s in p_b.segments] == [(s.busy_s, s.comm) for s in r_b.segments]
    p_f, r_f = pipe.stages[0].passes[(0, "F")], ring.stages[0].passes[(0, "F")]
    full = [b for s in off.stages[0].passes[(0, "F")].segments if s.comm for k, b in [s.comm] if k == "reduce-scatter"]
    shown = [b for s in r_f.segments if s.comm for k, b in [s.comm] if k == "reduce-scatter"]
    assert len(shown) == len(full) > 0
    assert all(b >= f / 8 * (1 - 1e-12) for b, f in zip(shown, full, strict=True))
    assert sum(s.busy_s for s in r_f.segments) < sum(s.busy_s for s in p_f.segments)
    analytic = simulate(_project(True, rs="ring_exchange"))
    event = simulate(_project(True, "event", rs="ring_exchange"))
    assert event.iteration_time_s == pytest.approx(analytic.iteration_time_s, rel=1e-6)


def test_the_reduce_scatter_method_is_quiet_at_its_default():
    """Old projects save back unchanged: the field is written only when it is not 'pipeline'."""
    assert "tp_overlap_reduce_scatter" not in Mapping(tp=8, sequence_parallel=True).model_dump(mode="json")
    ring = Mapping(tp=8, sequence_parallel=True, overlap_tp_comm=True, tp_overlap_reduce_scatter="ring_exchange")
    assert ring.model_dump(mode="json")["tp_overlap_reduce_scatter"] == "ring_exchange"
    assert Mapping.model_validate(ring.model_dump(mode="json")) == ring


def test_userbuffers_split_the_gemms_beside_a_ring_or_a_pipeline():
    """Forward: qkv/fc1 after the all-gather ring in tp chunks, proj/fc2 before the reduce-scatter in tp chunks
    (ring) or 4 splits (pipeline); backward: only the row-parallel GEMMs' data gradient (half the op's backward)
    after the gradient's all-gather ring; the column GEMMs' bulk backward runs whole."""
    for ring in (False, True):
        assert gemm_chunks(True, False, 8, ring) == (8, 1.0)
        assert gemm_chunks(False, False, 8, ring) == ((8, 1.0) if ring else (PIPELINE_SPLITS, 1.0))
        assert gemm_chunks(True, True, 8, ring) == (1, 0.0)
        assert gemm_chunks(False, True, 8, ring) == (8, 0.5)


def _forward_busy(seq: int, overlap: bool) -> float:
    spec = SPEC.model_copy(update={"seq_len": seq})
    project = _project(overlap, rs="ring_exchange").model_copy(update={"workload": spec})
    ps = make_plan(project).stages[0].passes[(0, "F")]
    return ps.busy_s - ps.dispatch_wait_s  # the device's own time: the split GEMMs, not the host's calls


def test_split_gemms_cost_more_the_fewer_rows_each_chunk_keeps():
    """At 512 tokens a tp-8 chunk holds 64 rows, a fraction of one output tile: the split GEMMs lose much to
    tile and wave quantization and to reading the weights once per chunk; the loss shrinks as the chunks grow
    and is next to nothing at 64k tokens (8,192 rows a chunk). The ring's SM set aside (1 of 132) is in both."""
    ratios = [_forward_busy(s, True) / _forward_busy(s, False) for s in (512, 2048, 8192, 65536)]
    assert ratios[0] > 1.3
    assert all(a > b for a, b in zip(ratios, ratios[1:], strict=False))
    assert 1.0 <= ratios[-1] < 1.01


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


def test_cli_flag_sets_the_reduce_scatter_method(capsys):
    """``run --overlap-tp-comm --tp-overlap-rs ring_exchange`` runs the mapping the field describes: the same
    iteration as the project with the field set, and another than the pipelined default."""
    import json

    from tilewright.engine.cli import main

    cli = ["run", "--system", "dgx-a100", "--model", "gpt", "--layers", "2", "--hidden", "2048", "--heads", "16",
           "--seq-len", "1024", "--vocab", "8192", "--tp", "4", "--pp", "1", "--dp", "2", "--global-batch", "4",
           "--sequence-parallel", "--overlap-tp-comm", "--engine", "analytic", "--json", "--quiet"]
    assert main(cli) == 0
    pipelined = json.loads(capsys.readouterr().out)["iteration_time_s"]
    assert main([*cli, "--tp-overlap-rs", "ring_exchange"]) == 0
    ring = json.loads(capsys.readouterr().out)["iteration_time_s"]
    spec = GPTSpec(name="gpt", layers=2, hidden=2048, heads=16, seq_len=1024, vocab=8192)
    p = Project(name="g", hardware=load_system("dgx-a100"), workload=spec,
                mapping=Mapping(tp=4, dp=2, micro_batch=1, global_batch=4, sequence_parallel=True,
                                overlap_tp_comm=True, tp_overlap_reduce_scatter="ring_exchange"),
                run=RunSettings(dtype="bf16", engine="analytic"))
    assert ring == pytest.approx(simulate(p).iteration_time_s, rel=1e-12)
    assert ring != pipelined


def test_search_keeps_the_projects_reduce_scatter_method(tmp_path):
    """A recipe's reduce-scatter method is not a parallelism choice: the search template keeps the project's, and
    a candidate that overlaps tp communication runs it."""
    import json

    from tilewright.engine.cli.dispatch import build_parser
    from tilewright.engine.cli.search import search_template
    from tilewright.engine.io.project_file import project_to_data
    from tilewright.engine.search.parallel.candidate import Candidate

    spec = GPTSpec(name="gpt", layers=2, hidden=2048, heads=16, seq_len=1024, vocab=8192)
    p = Project(name="g", hardware=load_system("dgx-a100"), workload=spec,
                mapping=Mapping(tp=4, dp=2, micro_batch=1, global_batch=4, sequence_parallel=True,
                                overlap_tp_comm=True, tp_overlap_reduce_scatter="ring_exchange"),
                run=RunSettings(dtype="bf16", engine="analytic"))
    path = tmp_path / "ring.json"
    path.write_text(json.dumps(project_to_data(p)))
    template, _, _ = search_template(build_parser().parse_args(["search", str(path)]))
    assert template.mapping.tp_overlap_reduce_scatter == "ring_exchange"
    c = Candidate(tp=4, pp=1, dp=2, micro_batch=1, sequence_parallel=True, overlap_tp=True)
    assert c.mapping(4, template.mapping).tp_overlap_reduce_scatter == "ring_exchange"


def _fp8_stage_busy(overlap: bool, scaling: str) -> float:
    m = Mapping(tp=8, pp=2, dp=1, micro_batch=1, global_batch=8, sequence_parallel=True, overlap_tp_comm=overlap,
                tp_overlap_reduce_scatter="ring_exchange", formats={"fp8_scaling": scaling})
    p = Project(name="t", hardware=load_system("dgx-h100"), workload=SPEC, mapping=m,
                run=RunSettings(dtype="fp8", engine="analytic", contention=False))
    stage = make_plan(p).stages[0]
    return stage.passes[(0, "F")].busy_s + stage.passes[(0, "B")].busy_s


def test_a_split_fp8_gemm_quantizes_its_input_once():
    """Transformer Engine casts a GEMM's input to fp8 once and splits only the GEMM call: the quantization's cost
    (current scaling's amax pass and scale kernel beyond delayed scaling's single cast) is the same with the
    GEMMs split into ring chunks as without overlap. Costing each chunk with its own casts made it 2.5x larger.
    What remains is the one SM the ring sets aside, which slows every kernel of the op by 1/131."""
    split = _fp8_stage_busy(True, "tensor") - _fp8_stage_busy(True, "delayed")
    whole = _fp8_stage_busy(False, "tensor") - _fp8_stage_busy(False, "delayed")
    assert whole > 0
    assert split == pytest.approx(whole, rel=0.01)

