"""Plans cache their collectives on themselves, and are freed with everything they cached — by reference
counting, where their last user drops them: a run leaves no reference cycle of the engine's for the
cyclic collector (the studio runs that collector on its GUI thread, where 14,000 objects of a wafer
plan's cycles cost a 30–75 ms pause after every run)."""

from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def collector_off():
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def test_a_plan_and_its_hardware_graph_die_with_their_last_reference():
    with collector_off():
        plan = make_plan(dgx())
        simulate(plan.project, plan)
        assert any(k.startswith("_memo_") for k in plan.__dict__)
        ref, hw_ref = weakref.ref(plan), weakref.ref(plan.hw)
        del plan
        assert ref() is None and hw_ref() is None  # no gc.collect(): reference counting alone


def test_a_run_leaves_no_cyclic_garbage_of_the_engine():
    """Both engines, on a preset whose plan has a memory-port graph, collectives and a pipeline."""
    from tilewright.engine.io import load_project

    project = load_project("presets/projects/palm-wafer-t18b.json")
    for engine in ("analytic", "event"):
        run = project.model_copy(update={"run": project.run.model_copy(update={"engine": engine})})
        with collector_off():
            gc.collect()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                simulate(run)
                gc.collect()
                ours = [type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("tilewright")]
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
        assert ours == [], f"{engine}: reference cycles left {sorted(set(ours))}"
