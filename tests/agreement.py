"""The two engines, and the search's evaluator and the engine, side by side: the checks that they agree on one
option, shared by the tests of each option."""

from __future__ import annotations

import pytest
from tilewright.engine.engines.analytic.engine import AnalyticEngine
from tilewright.engine.hardware import elaborate
from tilewright.engine.ir import Project
from tilewright.engine.plan.checks import check_project
from tilewright.engine.results.result import Result
from tilewright.engine.search.parallel.candidate import Candidate
from tilewright.engine.search.parallel.estimate import Estimator
from tilewright.engine.search.parallel.extended import exact_evaluator
from tilewright.engine.simulate import make_plan
from tilewright.engine.workloads import build_workload


def search_estimate(p: Project, c: Candidate) -> tuple[float, float, float]:
    """(closed-form time, recurrence time, memory) of candidate ``c`` from the search's evaluator for ``p``,
    whose mapping is ``c``'s (its global batch sets the micro-batches)."""
    hw = elaborate(p.hardware, devices_needed=c.devices)
    est = Estimator(p, hw, build_workload(p.workload))
    m = c.micro_batches(p.mapping.global_batch)
    table, key = est.layer_table(c)
    chunks = est.chunks(table, key, c.pp, c.interleave)
    timed = est.timed_chunks(c, m, chunks)
    return est.iteration_time(c, m, timed), est.exact_time(c, m, timed), est.memory(c, m, chunks)


def assert_search_matches_engine(base: Project, c: Candidate, rel: float = 1e-6, keep_base: bool = False,
                                 **update: object) -> Project:
    """The search's recurrence times candidate ``c`` and counts its memory as the analytic engine does, on
    ``base`` with ``c``'s mapping (the base's other fields kept with ``keep_base``) and ``update`` set on it;
    returns the project checked."""
    mapping = c.mapping(base.mapping.global_batch, base.mapping if keep_base else None)
    p = base.model_copy(update={"mapping": mapping.model_copy(update=update)})
    _, exact, memory = search_estimate(p, c)
    want = engine_result(p)
    assert exact == pytest.approx(want.iteration_time_s, rel=rel)
    assert memory == pytest.approx(want.peak_memory_bytes, rel=rel)
    return p


def assert_search_plans_as_engine(base: Project, c: Candidate, rel: float = 1e-9, **update: object) -> Project:
    """A second-stage candidate (``Candidate.extended``: ZeRO-2/3, FSDP, ep, cp …), which the search times by
    planning it (``extended.exact_evaluator``) rather than with the fast evaluator of ``assert_search_matches_engine``
    (its layer table carries no per-layer gathers), timed and counted as the analytic engine runs ``base`` — with
    ``update`` set on its mapping first, as a project file would say it — under the mapping ``c`` builds from it;
    returns the project checked."""
    base = base.model_copy(update={"mapping": base.mapping.model_copy(update=update)})
    timed = exact_evaluator(base, base.mapping.global_batch)(c)
    p = base.model_copy(update={"mapping": c.mapping(base.mapping.global_batch, base.mapping)})
    want = engine_result(p)
    assert timed is not None
    assert timed.iteration_time_s == pytest.approx(want.iteration_time_s, rel=rel)
    assert timed.peak_memory_bytes == pytest.approx(want.peak_memory_bytes, rel=rel)
    return p


def engine_result(p: Project) -> Result:
    """The analytic engine's run of ``p``, which must check clean."""
    assert check_project(p) == []
    return AnalyticEngine().run(make_plan(p))


def assert_engines_agree(analytic: Result, event: Result) -> None:
    """The event engine (without contention) times the plan as the analytic engine does: the iteration, every
    category of its breakdown and the peak memory."""
    t = analytic.iteration_time_s
    assert event.iteration_time_s == pytest.approx(t, rel=1e-9)
    for k, v in analytic.time_breakdown_s.items():
        assert event.time_breakdown_s.get(k, 0.0) == pytest.approx(v, abs=1e-9 * t), k
    assert event.peak_memory_bytes == pytest.approx(analytic.peak_memory_bytes, rel=1e-9)
