"""The search's evaluator times a candidate as the analytic engine does, in two places it once did not.

1. A candidate spelled with names (``recompute="full"``, ``placement="row-major"``) gets the enums its mapping
   gets from ``Mapping``: the evaluator compares them by identity, and timed such a candidate with no
   recomputation on snake groups while the engine ran what the mapping named (on a PaLM-style wafer of SRAM-only
   tiles: 2.53 s against the engine's 3.39 s at tp 16 pp 4 full recompute; the DRAM streams of the recompute
   and the row-major groups' ports were what it missed).
2. A project with ``overlap_grad_reduce`` keeps it on every candidate the search maps (``Candidate.mapping``):
   each chunk's reduction then runs as the plan's two buckets (``Plan.dp_buckets``), all but the first layer's
   from its last backward's start — the evaluator reduced the whole after the backward's end (1.6 % slower on
   an interleaved GPT on a DGX H100). The buckets, and ``overlap_param_gather``'s exposed gather, are fractions
   of one collective (``plan.group_comm.scaled``: the whole one's algorithm and latencies), not a smaller
   collective of its own, which differs where latencies grow with the size (a Wormhole Galaxy's
   reduce-scatter) or a library picks its protocol by size (NCCL on the DGX H100).
"""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, LlamaSpec, Mapping, Project, RunSettings
from tilewright.engine.ir.mapping import PlacementStrategy, Recompute
from tilewright.engine.search.parallel.candidate import Candidate

from tests.agreement import assert_search_matches_engine, engine_result

LLAMA = LlamaSpec(name="llama-2-7b-8l", layers=8, hidden=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000,
                  seq_len=512)
GPT = GPTSpec(name="gpt-agree", layers=8, hidden=2048, heads=16, seq_len=1024, vocab=8192)


def _project(system: str, spec, global_batch: int, **mapping) -> Project:
    m = Mapping(tp=1, pp=1, dp=1, micro_batch=1, global_batch=global_batch, **mapping)
    return Project(name="agree", hardware=load_system(system), workload=spec, mapping=m,
                   run=RunSettings(dtype="bf16", mode="train", engine="analytic", contention=False))


def test_a_candidate_spelled_with_names_is_the_candidate_of_the_enums():
    named = Candidate(tp=4, pp=2, dp=2, micro_batch=1, recompute="full", placement="block")  # type: ignore[arg-type]
    typed = Candidate(tp=4, pp=2, dp=2, micro_batch=1, recompute=Recompute.full, placement=PlacementStrategy.block)
    assert named == typed and hash(named) == hash(typed)
    assert named.recompute is Recompute.full and named.placement is PlacementStrategy.block
    assert named.label() == typed.label() and named.as_json() == typed.as_json()


@pytest.mark.parametrize(
    ("recompute", "placement"),
    [("full", PlacementStrategy.snake), (Recompute.none, "row-major"), (Recompute.none, "block"),
     ("full", "row-major")],
    ids=["recompute", "row-major", "block", "both"],
)
def test_palm_wafer_candidates_spelled_with_names(recompute, placement):
    """tp 16 over a 4 × 4-tile die's rows or blocks: SRAM-only tiles stream their weights from the edge DRAM
    ports, so which tiles a group holds and whether the backward re-runs the forward set the time."""
    base = _project("palm-wafer", LLAMA, 16)
    c = Candidate(tp=16, pp=4, dp=1, micro_batch=1, recompute=recompute, placement=placement, sequence_parallel=True)
    assert_search_matches_engine(base, c)


GRAD_CASES = [
    ("dgx-h100", Candidate(1, 2, 4, 1, interleave=2, zero=1)),
    ("dgx-h100", Candidate(1, 2, 4, 1)),
    ("dgx-h100", Candidate(2, 2, 8, 1, sequence_parallel=True)),
    ("wormhole-galaxy", Candidate(2, 2, 4, 1, interleave=2, zero=1, sequence_parallel=True)),
    ("wormhole-galaxy", Candidate(1, 2, 16, 1, interleave=2, zero=1)),
]


@pytest.mark.parametrize(("system", "c"), GRAD_CASES, ids=[f"{s}-{c.label()}" for s, c in GRAD_CASES])
def test_the_projects_overlapped_gradient_reduction(system: str, c: Candidate):
    """The base's ``overlap_grad_reduce`` stands on a candidate that does not set it; the evaluator times its
    buckets as the engine does (checked: the overlap changes the engine's time, so the old answer misses)."""
    base = _project(system, GPT, 64, overlap_grad_reduce=True)
    p = assert_search_matches_engine(base, c, keep_base=True)
    assert p.mapping.overlap_grad_reduce
    without = p.mapping.model_copy(update={"overlap_grad_reduce": False})
    exposed = engine_result(p.model_copy(update={"mapping": without}))
    assert engine_result(p).iteration_time_s < exposed.iteration_time_s * (1 - 1e-4)


def test_the_exposed_weight_gather_is_a_fraction_of_the_whole():
    """``overlap_param_gather`` on eight GPUs of tensor parallelism and four replicas: the first bucket's gather
    keeps the whole gather's NCCL protocol and latencies, as the plan scales it."""
    base = _project("dgx-h100", GPT, 64, overlap_param_gather=True)
    assert_search_matches_engine(base, Candidate(8, 1, 4, 1, zero=1, sequence_parallel=True), keep_base=True)
