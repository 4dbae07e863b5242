"""Pareto fronts on hand-made points."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from tilewright.engine.search.pareto import dominated, pareto_front

MIN2 = [("time", "min"), ("cost", "min")]


def pts(*pairs: tuple[float, float]) -> list[dict[str, float]]:
    return [{"time": t, "cost": c} for t, c in pairs]


def test_two_objectives_by_hand():
    # (1, 9) and (9, 1) are extremes; (3, 3) beats (4, 4) and (3, 5); (5, 2) is on the front
    points = pts((1, 9), (3, 3), (4, 4), (3, 5), (9, 1), (5, 2))
    assert pareto_front(points, MIN2) == [0, 1, 4, 5]


def test_maximise_flips_the_sense():
    points = [{"speed": 10, "cost": 5}, {"speed": 8, "cost": 5}, {"speed": 12, "cost": 9}]
    assert pareto_front(points, [("speed", "max"), ("cost", "min")]) == [0, 2]


def test_duplicates_stay_and_ties_on_one_objective_are_dominated():
    points = pts((2, 2), (2, 2), (2, 3), (1, 5))
    # (2, 3) is no better than (2, 2) anywhere and worse on cost
    assert pareto_front(points, MIN2) == [0, 1, 3]


def test_missing_or_nan_values_take_no_part():
    points = [{"time": 1.0, "cost": float("nan")}, {"time": 2.0}, {"time": 3.0, "cost": 1.0}]
    assert pareto_front(points, MIN2) == [2]
    assert pareto_front([], MIN2) == []


def test_single_objective_keeps_all_minima():
    points = pts((3, 0), (1, 0), (1, 0), (2, 0))
    assert pareto_front(points, [("time", "min")]) == [1, 2]


@pytest.mark.parametrize("seed", range(5))
def test_matches_the_definition_on_random_points(seed: int):
    rng = random.Random(seed)
    values = np.array([[rng.randint(0, 6) for _ in range(3)] for _ in range(40)], dtype=float)
    flags = dominated(values)
    for i, j in itertools.product(range(len(values)), repeat=2):
        if np.all(values[j] <= values[i]) and np.any(values[j] < values[i]):
            assert flags[i]
    for i in np.flatnonzero(flags):
        assert any(np.all(values[j] <= values[i]) and np.any(values[j] < values[i]) for j in range(len(values)))
