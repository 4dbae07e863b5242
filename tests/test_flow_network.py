"""Max-min fair flow network: shares, staggered starts, bottlenecks, utilisation and byte conservation."""

from __future__ import annotations

import random

import pytest
import simpy
from tilewright.engine.engines.event.maxmin import max_min_rates
from tilewright.engine.engines.event.network import FlowNetwork


def _run(capacity, flows, contention=True):
    """flows: (start, usage, bytes) → finish times."""
    env = simpy.Environment()
    net = FlowNetwork(env, capacity, contention=contention)
    finish = [None] * len(flows)

    def proc(i, start, usage, nbytes):
        yield env.timeout(start)
        yield net.transfer(usage, nbytes)
        finish[i] = env.now

    for i, f in enumerate(flows):
        env.process(proc(i, *f))
    env.run()
    return finish, net


def test_two_flows_share_a_link():
    finish, _ = _run([10.0], [(0, {0: 1}, 100), (0, {0: 1}, 100)])
    assert finish == pytest.approx([20.0, 20.0])


def test_staggered_start_slows_the_first():
    finish, _ = _run([10.0], [(0, {0: 1}, 100), (5, {0: 1}, 25)])
    assert finish == pytest.approx([12.5, 10.0])


def test_bottleneck_elsewhere_frees_capacity():
    # flow B is held to 2 by link 1, so flow A gets the remaining 8 of link 0
    assert max_min_rates([{0: 1}, {0: 1, 1: 1}], [10.0, 2.0]) == pytest.approx([8.0, 2.0])


def test_usage_multiplicity_counts_twice():
    assert max_min_rates([{0: 2}], [10.0]) == pytest.approx([5.0])


def test_without_contention_flows_are_independent():
    finish, _ = _run([10.0], [(0, {0: 1}, 100), (0, {0: 1}, 100)], contention=False)
    assert finish == pytest.approx([10.0, 10.0])


def test_random_flows_conserve_bytes_and_respect_capacity():
    rng = random.Random(7)
    capacity = [rng.uniform(1, 20) for _ in range(6)]
    flows = []
    for _ in range(40):
        links = rng.sample(range(6), rng.randint(1, 3))
        flows.append((rng.uniform(0, 10), {lk: rng.choice([1, 1, 2]) for lk in links}, rng.uniform(1, 50)))
    finish, net = _run(capacity, flows)
    assert all(f is not None for f in finish)
    expected = {lk: 0.0 for lk in range(6)}
    for _start, usage, nbytes in flows:
        for lk, u in usage.items():
            expected[lk] += u * nbytes
    end = max(finish)
    assert net.link_bytes() == pytest.approx(expected)
    for lk in range(6):
        trace = net.link_trace(lk)
        carried = 0.0
        for i, t in enumerate(trace.times):
            t_next = trace.times[i + 1] if i + 1 < len(trace.times) else end
            carried += trace.loads[i] * (t_next - t)
            assert trace.loads[i] <= capacity[lk] * (1 + 1e-9)
        assert carried == pytest.approx(expected[lk], rel=1e-6)
    for (start, usage, nbytes), f in zip(flows, finish, strict=True):
        alone = max(u * nbytes / capacity[lk] for lk, u in usage.items())
        assert f - start >= alone * (1 - 1e-9)
