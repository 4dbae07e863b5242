"""The flow network's shortcuts change no number: reusing a max-min solution across orders of the same
flows, walking components over fewer links, and knowing the run's patterns up front give bit for bit the
finish times, link loads and event count of the plain network (every solve in its own order, every link
walked). Also: every DRAM stream an aggregated unit issues is in the pattern universe the network is
built with (``traffic_patterns``)."""

from __future__ import annotations

import itertools
import random

import numpy as np
import simpy
from tilewright.engine.engines.event.compress import compress_patterns
from tilewright.engine.engines.event.maxmin import max_min_rates_arrays
from tilewright.engine.engines.event.network import FlowNetwork, Pattern
from tilewright.engine.engines.event.traffic import WHOLE_GROUP, dram_usage, traffic_patterns
from tilewright.engine.io.presets import load_project_preset
from tilewright.engine.ir.project import Project
from tilewright.engine.simulate import make_plan


class PlainNetwork(FlowNetwork):
    """The network without its shortcuts: each component solved in its own order, every link walked."""

    def _solve(self, key: tuple[Pattern, ...]) -> list[float]:
        return max_min_rates_arrays([self._rows(p) for p in key], self._capacity)

    def _walk(self, pattern: Pattern) -> list[set[int]]:
        return [members for _link, members in pattern.members]


def _scenario(seed: int, whole: bool) -> tuple[list[float], list[dict[int, float]], list[tuple[float, int, float]]]:
    """Capacities, usage patterns (overlapping routes) and flows (start, pattern, bytes)."""
    rng = random.Random(seed)
    links = 12
    capacity = [rng.choice([1.0, 2.5, 3.0, 7.25]) * rng.uniform(0.5, 2.0) for _ in range(links)]
    values = [1, 1, 2, 3] if whole else [0.1, 0.3, 1.7, 2]
    patterns = [{lk: rng.choice(values) for lk in rng.sample(range(links), rng.randint(1, 6))} for _ in range(9)]
    flows = [(rng.uniform(0, 5), rng.randrange(len(patterns)), rng.uniform(1, 40)) for _ in range(120)]
    return capacity, patterns, flows


def _simulate(cls: type[FlowNetwork], capacity, patterns, flows, universe: int):
    """Finish times, per-link loads over time and scheduled events; the first ``universe`` patterns are
    known up front (compressed), the others appear during the run."""
    env = simpy.Environment()
    net = cls(env, capacity, reduced=compress_patterns(patterns[:universe], capacity))
    finish: list[float | None] = [None] * len(flows)

    def proc(i: int, start: float, p: int, nbytes: float):
        yield env.timeout(start)
        yield net.transfer(patterns[p], nbytes)
        finish[i] = env.now

    for i, flow in enumerate(flows):
        env.process(proc(i, *flow))
    env.run()
    traces = net.link_traces(list(range(len(capacity))))
    loads = {lk: (t.times.tolist(), t.loads.tolist()) for lk, t in traces.items()}
    return finish, loads, next(env._eid)


def test_shortcuts_give_the_plain_networks_numbers_bit_for_bit():
    for seed in range(12):
        whole = seed % 3 != 2  # whole-number usages reuse solutions across orders; fractional ones cannot
        capacity, patterns, flows = _scenario(seed, whole)
        universe = len(patterns) if seed % 2 else len(patterns) - 3  # some patterns unknown up front
        fast = _simulate(FlowNetwork, capacity, patterns, flows, universe)
        plain = _simulate(PlainNetwork, capacity, patterns, flows, universe)
        assert all(t is not None for t in fast[0])
        assert fast[0] == plain[0], seed  # finish times, exactly
        assert fast[1] == plain[1], seed  # link loads over time, exactly
        assert fast[2] == plain[2], seed  # the same events scheduled


def test_a_solution_is_reused_for_every_order_of_the_same_flows():
    rng = random.Random(3)
    capacity = [rng.uniform(1.0, 9.0) for _ in range(8)]
    usages = [{lk: rng.choice([1, 2, 3]) for lk in rng.sample(range(8), 4)} for _ in range(4)]
    net = FlowNetwork(simpy.Environment(), capacity)
    pats = [net._pattern(u) for u in usages]
    for order in itertools.permutations(range(4)):
        key = tuple(pats[i] for i in order)
        expected = max_min_rates_arrays([net._rows(p) for p in key], np.asarray(capacity))
        assert net._solve(key) == expected  # bit for bit the ordered solve
    assert len(net._canonical) == 1  # one solve served all 24 orders


def _two_replica_palm():
    """PALM's wafer case with two data-parallel replicas: its tensor groups' links carry no other group's
    collectives, the case where the DRAM streams once went missing from the pattern universe."""
    data = load_project_preset("palm-wafer-t18b").model_dump(mode="json")
    m = data["mapping"]
    m.update(pp=m["pp"] // 2, dp=2, global_batch=2 * m["global_batch"])
    return make_plan(Project.model_validate(data))


def test_every_dram_stream_of_an_aggregated_unit_is_in_the_universe():
    plan = _two_replica_palm()
    unit = (0, WHOLE_GROUP)
    _private, patterns = traffic_patterns(plan, [unit], True)
    known = {id(p) for p in patterns}
    streaming = [r for r, st in enumerate(plan.stages) if any(ps.has_dram for ps in st.passes.values())]
    assert streaming
    for r in streaming:  # the usage the run's DRAM transfers pass (the memoized object) is the one compressed
        assert id(dram_usage(plan, r, unit, True)) in known


def test_a_solution_the_guard_decided_is_not_reused_for_other_orders():
    # an unbounded link never saturates (its spare goes nan): the solver's guard picks the link to freeze,
    # the one choice that can depend on the flows' order, so each order is solved as it comes (compared
    # as hex strings: nan is not equal to itself)
    capacity = [float("inf"), float("inf")]
    net = FlowNetwork(simpy.Environment(), capacity)
    a, b = net._pattern({0: 1, 1: 2}), net._pattern({1: 1})
    with np.errstate(invalid="ignore"):
        for key in ((a, b), (b, a)):
            ordered = max_min_rates_arrays([net._rows(p) for p in key], np.asarray(capacity))
            assert [x.hex() for x in net._solve(key)] == [x.hex() for x in ordered]
    assert list(net._canonical.values()) == [None]
