"""Plans cache their collectives on themselves, and are freed with everything they cached."""

from __future__ import annotations

import gc
import weakref

from tilewright.engine.simulate import make_plan, simulate

from tests.engine_cases import dgx


def test_a_plan_is_freed_after_its_run():
    plan = make_plan(dgx())
    simulate(plan.project, plan)  # fills the plan's caches (collectives, sends, DRAM routes)
    assert any(k.startswith("_memo_") for k in plan.__dict__)
    ref, hw_ref = weakref.ref(plan), weakref.ref(plan.hw)
    del plan
    gc.collect()
    assert ref() is None and hw_ref() is None


def test_cached_answers_are_the_same_object_per_plan_and_distinct_across_plans():
    a, b = make_plan(dgx()), make_plan(dgx())
    assert a.tp_collective(0, 0, "all-reduce", 1e6) is a.tp_collective(0, 0, "all-reduce", 1e6)
    assert a.tp_collective(0, 0, "all-reduce", 1e6) is not b.tp_collective(0, 0, "all-reduce", 1e6)
    assert a.tp_time(0, 0, "all-reduce", 1e6) == b.tp_time(0, 0, "all-reduce", 1e6)
