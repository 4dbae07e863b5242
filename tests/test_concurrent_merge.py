"""Collectives on disjoint groups at once (``plan.group_comm.merge_concurrent``), where the groups need not run
the same algorithm: on an irregular wafer grid each data-parallel group picks the algorithm cheapest for it, so
the picks can differ in their phases. Both the plan and the search's evaluator merge through it."""

from __future__ import annotations

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import LlamaSpec, Project, RunSettings
from tilewright.engine.perf.collective_phase import Collective, Phase
from tilewright.engine.plan.group_comm import merge_concurrent
from tilewright.engine.search.parallel.candidate import Candidate

from tests.agreement import engine_result, search_estimate


def test_congruent_groups_add_their_link_usage_phase_by_phase() -> None:
    a = Collective("all-reduce", "ring", (Phase({1: 1.0, 2: 0.5}, 100.0, 1e-6), Phase({1: 1.0}, 100.0, 2e-6)))
    b = Collective("all-reduce", "ring", (Phase({2: 1.0, 3: 1.0}, 100.0, 3e-6), Phase({3: 2.0}, 100.0, 1e-6)))
    m = merge_concurrent([a, b])
    assert [ph.usage for ph in m.phases] == [{1: 1.0, 2: 1.5, 3: 1.0}, {1: 1.0, 3: 2.0}]
    assert [ph.bytes_per_member for ph in m.phases] == [100.0, 100.0]
    assert [ph.latency_s for ph in m.phases] == [3e-6, 2e-6]


def test_groups_with_other_algorithms_share_links_by_their_bytes() -> None:
    """Group a runs two phases of 100 and 40 bytes per member; group b one phase of 50 bytes on a shared link 7.
    Phase 0: link 7 carries a's 100 × 1 and b's 50 × 2 bytes = 200 bytes = 100 bytes at usage 2; phase 1 is a's
    alone."""
    a = Collective("all-reduce", "line", (Phase({7: 1.0}, 100.0, 1e-6), Phase({8: 1.0}, 40.0, 1e-6)))
    b = Collective("all-reduce", "ring", (Phase({7: 2.0, 9: 1.0}, 50.0, 4e-6),))
    m = merge_concurrent([a, b])
    assert len(m.phases) == 2
    assert m.phases[0].bytes_per_member == 100.0
    assert m.phases[0].usage == {7: 1.0 + 2.0 * 50.0 / 100.0, 9: 50.0 / 100.0}
    assert m.phases[0].latency_s == 4e-6
    assert m.phases[1] == Phase({8: 1.0}, 40.0, 1e-6)
    # merged in the other order, the same loads
    r = merge_concurrent([b, a])
    assert r.phases[0].usage == m.phases[0].usage and r.phases[0].bytes_per_member == 100.0
    assert r.phases[1].usage == {8: 1.0}


def test_wafer_data_parallel_groups_with_different_algorithms_are_timed() -> None:
    """Llama-2-7B (seq 512, attention op by op, full recompute) at tp 16 × pp 4 × dp 5 on the PaLM wafer, snake
    placement: the 5 data-parallel groups do not all run one algorithm. Both the engine and the search's
    evaluator raised IndexError here (``import-hf --system palm-wafer`` met it in its search); now the engine
    times the gradient reduction, and the search's closed form and recurrence equal the engine."""
    spec = LlamaSpec(name="llama-2-7b", layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000,
                     seq_len=512)
    c = Candidate(tp=16, pp=4, dp=5, micro_batch=1, recompute="full", placement="snake", rank_order="tp-dp-pp")
    p = Project(name="wafer", hardware=load_system("palm-wafer"), workload=spec,
                mapping=c.mapping(320, None), run=RunSettings(dtype="bf16", engine="analytic"))
    want = engine_result(p)
    assert want.time_breakdown_s["dp_comm"] > 0
    closed, exact, memory = search_estimate(p, c)
    assert closed == pytest.approx(want.iteration_time_s, rel=1e-9)
    assert exact == pytest.approx(want.iteration_time_s, rel=1e-9)
    assert memory == pytest.approx(want.peak_memory_bytes, rel=1e-9)


@pytest.mark.parametrize("n", [2, 5])
def test_identical_collectives_merge_bit_for_bit_as_before(n: int) -> None:
    """The scaling applies only where bytes differ: n identical groups give exactly n × each link's usage."""
    one = Collective("reduce-scatter", "ring", (Phase({1: 0.3, 2: 0.7}, 123.0, 5e-6),))
    m = merge_concurrent([one] * n)
    total = 0.0
    for _ in range(n):
        total += 0.3
    assert m.phases[0].usage[1] == total
    assert m.phases[0].bytes_per_member == 123.0
