"""Pareto fronts on hand-made points."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
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


def reference_dominated(values: np.ndarray) -> np.ndarray:
    """The definition, all pairs (what ``dominated`` computed before it was sort-based)."""
    out = np.zeros(len(values), dtype=bool)
    for i in range(len(values)):
        out[i] = bool(np.any(np.all(values <= values[i], axis=1) & np.any(values < values[i], axis=1)))
    return out


# Few distinct values, so ties on one objective and exact duplicates are common; signed zeros and
# infinities too (``dominated`` takes any comparable floats).
_coordinate = st.one_of(
    st.integers(-3, 3).map(float), st.sampled_from([0.0, -0.0, float("inf"), -float("inf"), 0.5, 1e300])
)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5).flatmap(lambda k: st.lists(st.lists(_coordinate, min_size=k, max_size=k), max_size=60)))
def test_sort_based_front_matches_the_definition(rows: list[list[float]]):
    k = len(rows[0]) if rows else 2
    values = np.array(rows, dtype=float).reshape(len(rows), k)
    assert dominated(values).tolist() == reference_dominated(values).tolist()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 4), st.integers(1, 3000))
def test_fronts_match_the_definition_on_larger_inputs(seed: int, k: int, n: int):
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 12, size=(n, k)).astype(float)
    if seed % 2:  # an anti-correlated cloud: a large front
        values[:, -1] = values[:, :-1].sum(axis=1) * -1 + rng.integers(0, 3, size=n)
    assert dominated(values).tolist() == reference_dominated(values).tolist()


def test_pareto_front_matches_the_reference_with_senses_and_missing_values():
    rng = random.Random(7)
    points = [{"a": rng.randint(0, 9), "b": rng.randint(0, 9), "c": rng.choice([rng.random(), None])}
              for _ in range(500)]
    objectives = [("a", "min"), ("b", "max"), ("c", "min")]
    usable = [i for i, p in enumerate(points) if p["c"] is not None]
    values = np.array([[points[i]["a"], -points[i]["b"], points[i]["c"]] for i in usable], dtype=float)
    expect = [i for i, d in zip(usable, reference_dominated(values), strict=True) if not d]
    assert pareto_front(points, objectives) == expect
    assert pareto_front(points, []) == list(range(500))
