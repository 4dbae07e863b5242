"""Pipeline schedules: every step exactly once, dependencies satisfiable, Megatron's warm-up counts."""

from __future__ import annotations

import pytest
from tilewright.engine.ir.mapping import Schedule
from tilewright.engine.plan.schedules import predecessor, stage_order

CASES = [
    (Schedule.gpipe, 4, 8, 1),
    (Schedule.one_f_one_b, 4, 8, 1),
    (Schedule.one_f_one_b, 8, 3, 1),
    (Schedule.interleaved, 4, 8, 2),
    (Schedule.interleaved, 4, 4, 3),
    (Schedule.interleaved, 2, 6, 4),
]


@pytest.mark.parametrize("schedule,pp,m,v", CASES)
def test_each_step_once(schedule, pp, m, v):
    for rank in range(pp):
        steps = stage_order(schedule, rank, pp, m, v)
        assert len(steps) == 2 * m * v
        assert len(set(steps)) == len(steps)
        for s in steps:  # backward of a chunk comes after its forward on the same rank
            if s.kind == "B":
                assert steps.index(s) > steps.index(type(s)("F", s.micro_batch, s.chunk))


@pytest.mark.parametrize("schedule,pp,m,v", CASES)
def test_schedule_runs_without_deadlock(schedule, pp, m, v):
    """Execute all ranks' orders respecting cross-rank dependencies: must complete."""
    orders = {r: stage_order(schedule, r, pp, m, v) for r in range(pp)}
    pos = dict.fromkeys(range(pp), 0)
    done: set[tuple] = set()
    progressed = True
    while progressed:
        progressed = False
        for r in range(pp):
            if pos[r] == len(orders[r]):
                continue
            step = orders[r][pos[r]]
            dep = predecessor(step, r, pp, v)
            if dep is None or dep in done:
                done.add((step.kind, step.micro_batch, step.chunk, r))
                pos[r] += 1
                progressed = True
    assert all(pos[r] == len(orders[r]) for r in range(pp))


def test_1f1b_warmup_and_in_flight():
    pp, m = 4, 8
    for rank in range(pp):
        steps = stage_order(Schedule.one_f_one_b, rank, pp, m)
        warm = next(i for i, s in enumerate(steps) if s.kind == "B") - 1
        assert warm == pp - rank - 1
        in_flight = peak = 0
        for s in steps:
            in_flight += 1 if s.kind == "F" else -1
            peak = max(peak, in_flight)
        assert peak == pp - rank  # 1F1B bounds stored activations by pp - rank micro-batches


def test_interleaved_warmup_matches_megatron():
    pp, m, v = 4, 8, 2
    for rank in range(pp):
        steps = stage_order(Schedule.interleaved, rank, pp, m, v)
        first_b = next(i for i, s in enumerate(steps) if s.kind == "B")
        assert first_b == (pp - rank - 1) * 2 + (v - 1) * pp + 1
