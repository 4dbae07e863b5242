"""The arithmetic behind the result views and the canvas heat overlay (no Qt): values worked out by hand
on ``tiny_result`` (see its docstring), then checked against a real run's invariants."""

from __future__ import annotations

import numpy as np
import pytest
from tilewright.engine.results import Series
from tilewright.studio.model import metrics
from tilewright.studio.ui.results.synthetic import GIB, metrics_only_result, tiny_result

A = ("sys/node[0]/gpu[0]", "sys/switch")
B = ("sys/switch", "sys/node[1]/gpu[0]")
GPU0, GPU1, GPU2 = "sys/node[0]/gpu[0]", "sys/node[0]/gpu[1]", "sys/node[1]/gpu[0]"


@pytest.fixture(scope="module")
def tiny():
    return tiny_result()


def test_link_utilisation_at_is_piecewise_constant(tiny):
    assert metrics.link_utilisation_at(tiny, 1.0) == {A: 0.0, B: 0.25}
    assert metrics.link_utilisation_at(tiny, 4.0) == {A: 1.0, B: 0.5}  # a value holds from its own time
    assert metrics.link_utilisation_at(tiny, 4.999) == {A: 1.0, B: 0.5}
    assert metrics.link_utilisation_at(tiny, 5.0) == {A: 0.0, B: 0.5}
    assert metrics.link_utilisation_at(tiny, 10.5) == {A: 0.0, B: 0.0}  # after the iteration: idle


def test_average_link_utilisation_and_busiest_first(tiny):
    avg = metrics.average_link_utilisation(tiny)
    assert avg[A] == pytest.approx(0.10)
    assert avg[B] == pytest.approx(0.45)
    ranked = metrics.busiest_links(tiny)
    assert [(s.src, s.dst) for s, _ in ranked] == [B, A]
    assert metrics.busiest_links(tiny, 1)[0][1] == pytest.approx(0.45)


def test_device_activity_windowed_and_instantaneous(tiny):
    assert metrics.average_device_activity(tiny) == pytest.approx({GPU0: 0.7, GPU1: 0.7, GPU2: 0.4})
    # [3.5, 5.5]: stage 0 busy 3.5–5 (1.5 of 2 s), stage 1 busy throughout.
    assert metrics.device_activity_at(tiny, 4.5, window_s=2.0) == pytest.approx({GPU0: 0.75, GPU1: 0.75, GPU2: 1.0})
    assert metrics.device_activity_at(tiny, 5.5, window_s=0.0) == {GPU0: 0.0, GPU1: 0.0, GPU2: 1.0}
    default = metrics.device_activity_at(tiny, 5.5)  # 1 % of 10 s: [5.45, 5.55], stage 0 idle
    assert default[GPU0] == 0.0 and default[GPU2] == 1.0


def test_memory_at_a_moment(tiny):
    assert metrics.memory_occupancy_at(tiny, 1.0) == {GPU0: 30 * GIB, GPU2: 12 * GIB}
    fractions = metrics.memory_fraction_at(tiny, 6.0)
    assert fractions[GPU0] == pytest.approx(70 / 80)
    assert fractions[GPU2] == pytest.approx(22 / 16)  # above 1: the device overflows


def test_window_average_is_exact_time_weighted_mean():
    s = Series("x", "fraction", [0.0, 1.0, 1.5, 3.0], [0.0, 1.0, 0.0, 0.5])
    edges, means = metrics.window_average(s, 4.0, 4)
    assert edges.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert means.tolist() == pytest.approx([0.0, 0.5, 0.0, 0.5])
    assert metrics.window_average(s, 4.0, 1)[1].tolist() == pytest.approx([0.25])
    assert metrics.series_value_at(s, 1.2) == 1.0 and metrics.series_value_at(s, 9.0, end=4.0) == 0.0


def test_results_without_series_give_empty_answers():
    bare = metrics_only_result()
    assert metrics.link_utilisation_at(bare, 0.5) == {}
    assert metrics.average_device_activity(bare) == {}
    assert metrics.memory_occupancy_at(bare, 0.5) == {}
    assert metrics.time_span(bare) == 1.0 and metrics.busiest_links(bare) == []


def test_real_run_satisfies_physics():
    """On a real run: utilisations within [0, 1], every compute device covered, busy ≤ 1."""
    from tilewright.engine.io import load_project
    from tilewright.engine.simulate import simulate

    result = simulate(load_project("presets/projects/chiplet-bert-large.json"))
    avg = metrics.average_link_utilisation(result)
    assert avg and all(0.0 <= v <= 1.0 + 1e-9 for v in avg.values())
    t = result.iteration_time_s / 2
    at = metrics.link_utilisation_at(result, t)
    assert set(at) == set(avg) and all(0.0 <= v <= 1.0 + 1e-9 for v in at.values())
    busy = metrics.average_device_activity(result)
    devices = {d for ds in result.lane_devices.values() for d in ds}
    assert set(busy) == devices
    assert all(0.0 < v <= 1.0 for v in busy.values())
    # The busiest link's mean agrees with a brute-force integral of its series.
    series, mean = metrics.busiest_links(result, 1)[0]
    times = np.append(series.times, result.iteration_time_s)
    brute = float(np.sum(np.diff(times) * np.asarray(series.values))) / result.iteration_time_s
    assert mean == pytest.approx(brute)
