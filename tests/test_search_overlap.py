"""The search's overlap option: gradients reduced in buckets under the last backward
(``mapping.overlap_grad_reduce``, Megatron ``--overlap-grad-reduce``) is a second-stage dimension."""

from __future__ import annotations

import json

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.search.parallel.extended import Extensions, first_stage_only, variants
from tilewright.engine.simulate import simulate

SPEC = GPTSpec(name="small", layers=4, hidden=2048, heads=16, seq_len=1024, vocab=32000)


def _project() -> Project:
    return Project(
        name="small",
        hardware=load_system("dgx-a100"),
        workload=SPEC,
        mapping=Mapping(tp=1, pp=1, dp=16, micro_batch=1, global_batch=32),
        run=RunSettings(dtype="bf16", engine="analytic", contention=False),
    )


def test_overlap_variants_only_where_they_can_hide_time():
    """A kept seed with dp > 1 gets the overlap at its own ZeRO stage and at ZeRO-2; a seed without dp
    or one that missed memory (overlap frees nothing) gets none, and --no-overlap removes them."""
    ext = Extensions(eps=[1], cps=[1], zeros=[0, 1, 2, 3], fsdp=False, offload=None, overlap=True)
    seed = Candidate(tp=2, pp=2, dp=4, micro_batch=1, zero=1)
    over = [c for c in variants(seed, ext, SPEC, fits=True) if c.overlap_grad_reduce]
    assert sorted(c.zero for c in over) == [1, 2]
    assert all((c.tp, c.pp, c.dp, c.micro_batch) == (2, 2, 4, 1) for c in over)
    assert not [c for c in variants(seed, ext, SPEC, fits=False) if c.overlap_grad_reduce]
    no_dp = Candidate(tp=2, pp=2, dp=1, micro_batch=1)
    assert not [c for c in variants(no_dp, ext, SPEC, fits=True) if c.overlap_grad_reduce]
    closed = Extensions(eps=[1], cps=[1], zeros=[0, 1, 2, 3], fsdp=False, offload=None, overlap=False)
    assert not [c for c in variants(seed, closed, SPEC, fits=True) if c.overlap_grad_reduce]
    assert not closed.allows(over[0]) and ext.allows(over[0])


def test_overlap_candidate_maps_to_the_mapping_and_keeps_a_users_choice():
    c = Candidate(tp=1, pp=1, dp=16, micro_batch=1, overlap_grad_reduce=True)
    assert c.extended and "ovl-grad" in c.label()
    assert c.mapping(32).overlap_grad_reduce
    user = Mapping(tp=1, dp=16, global_batch=32, overlap_grad_reduce=True)
    plain = Candidate(tp=1, pp=1, dp=16, micro_batch=1)
    assert plain.mapping(32, user).overlap_grad_reduce  # the base's choice stands when the search sets none


def test_search_ranks_the_overlap_as_run_times_it_and_it_hides_the_reduction():
    """On 16 GPUs over two nodes the data-parallel all-reduce crosses InfiniBand: overlapping it with the
    backward makes an iteration faster, the search finds that, and its time is what ``run`` gives."""
    from tilewright.engine.search.parallel.search import search

    project = _project()
    dense = search(project, 16, 32, resimulate=False, extensions=first_stage_only())
    full = search(project, 16, 32, resimulate=False)
    overlapped = [r for r in full.ranked if r.candidate.overlap_grad_reduce]
    assert overlapped
    assert full.ranked[0].iteration_time_s <= dense.ranked[0].iteration_time_s * (1 + 1e-9)
    r = overlapped[0]
    mapping = r.candidate.mapping(32, project.mapping)
    with_overlap = simulate(project.model_copy(update={"mapping": mapping}))
    assert r.iteration_time_s == pytest.approx(with_overlap.iteration_time_s, rel=1e-9)
    without = mapping.model_copy(update={"overlap_grad_reduce": False})
    exposed = simulate(project.model_copy(update={"mapping": without}))
    assert with_overlap.iteration_time_s < exposed.iteration_time_s


def test_cli_no_overlap_narrows_the_second_stage(capsys):
    from tilewright.engine.cli import main

    base = ["search", "--system", "dgx-a100", "--model", "gpt", "--layers", "4", "--hidden", "2048", "--heads",
            "16", "--seq-len", "1024", "--devices", "16", "--global-batch", "32", "--no-simulate", "--json",
            "--quiet"]
    assert main(base) == 0
    free = json.loads(capsys.readouterr().out)["candidates"]
    assert any(c["overlap_grad_reduce"] for c in free)
    assert main([*base, "--no-overlap"]) == 0
    narrowed = json.loads(capsys.readouterr().out)["candidates"]
    assert narrowed and not any(c["overlap_grad_reduce"] for c in narrowed)


def test_context_parallel_variants_get_the_overlap_and_expert_parallelism_too():
    """cp regroups a seed's dp replicas; its gradients, reduced over dp · cp, hide under the backward as well,
    whether or not the seed itself fitted (cp shrinks the activations), and an MoE model's cp variants also
    split their experts over the dp · cp replicas."""
    from tilewright.engine.ir.workload import MoESpec

    moe = SPEC.model_copy(update={"seq_len": 8192, "moe": MoESpec(experts=8, top_k=2, expert_ffn=4096)})
    ext = Extensions(eps=[1, 2, 4], cps=[1, 2], zeros=[0, 1], fsdp=False, offload=None, overlap=True)
    seed = Candidate(tp=1, pp=1, dp=8, micro_batch=1, zero=1)
    for fits in (True, False):
        got = variants(seed, ext, moe, fits=fits)
        ctx = [c for c in got if c.cp == 2]
        assert all(c.dp * c.cp == 8 for c in ctx)
        assert {c.ep for c in ctx} == {1, 2, 4}
        assert {(c.ep, c.zero) for c in ctx if c.overlap_grad_reduce} >= {(1, 0), (1, 1), (2, 1), (4, 1)}
    closed = Extensions(eps=[1, 2, 4], cps=[1, 2], zeros=[0, 1], fsdp=False, offload=None, overlap=False)
    assert not [c for c in variants(seed, closed, moe, fits=True) if c.overlap_grad_reduce]
