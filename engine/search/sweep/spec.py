"""Sweep specifications and their points: grid, random, or Latin hypercube over any project field.

A spec (JSON) names a base project and parameters, each a dotted path into the project (as
``tilewright run --set``) with either a list of ``values`` or a ``min``/``max`` range::

    {"base": "megatron-18b-dgx-a100", "method": "lhs", "samples": 32, "seed": 1,
     "set": {"run.engine": "analytic"},
     "parameters": [{"path": "mapping.micro_batch", "values": [1, 2, 4]},
                    {"path": "hardware.children.0.children.0.memories.0.bandwidth_bytes_per_s",
                     "min": 1e12, "max": 4e12, "log": true}],
     "objectives": [{"metric": "iteration_time_s", "sense": "min"}, {"metric": "power_w", "sense": "min"}]}

Latin hypercube sampling (McKay, Beckman & Conover, Technometrics 1979) via ``scipy.stats.qmc`` puts one
sample in each of ``samples`` equal slices of every parameter, covering ranges far better than random
points for the same budget. A point is keyed by a hash of its overrides, so a resumed sweep recognises
the points it already ran whatever order they come in.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator
from tilewright.engine.ir.common import StrictModel


class Parameter(StrictModel):
    path: str = Field(min_length=1, description="dotted path into the project, e.g. mapping.tp")
    values: list[Any] | None = Field(None, min_length=1, description="discrete choices")
    min: float | None = None
    max: float | None = None
    steps: Annotated[int, Field(ge=2)] | None = Field(None, description="grid points of a range")
    log: bool = Field(False, description="sample a range evenly in log space")
    integer: bool = Field(False, description="round sampled range values to integers")

    @model_validator(mode="after")
    def _one_kind(self) -> Parameter:
        ranged = self.min is not None or self.max is not None
        if self.values is None and not ranged:
            raise ValueError("give either values or min and max")
        if self.values is not None and ranged:
            raise ValueError("give values or min/max, not both")
        if ranged:
            if self.min is None or self.max is None:
                raise ValueError("a range needs both min and max")
            if self.max < self.min:
                raise ValueError(f"max ({self.max}) is below min ({self.min})")
            if self.log and self.min <= 0:
                raise ValueError("a log range needs min > 0")
        return self

    def at(self, u: float) -> Any:
        """The value at quantile ``u`` ∈ [0, 1)."""
        if self.values is not None:
            return self.values[min(int(u * len(self.values)), len(self.values) - 1)]
        lo, hi = float(self.min), float(self.max)  # type: ignore[arg-type]
        x = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))) if self.log else lo + u * (hi - lo)
        return int(round(x)) if self.integer else x

    def grid(self) -> list[Any]:
        if self.values is not None:
            return list(self.values)
        if self.steps is None:
            raise ValueError("steps: a range needs steps for a grid sweep")
        lo, hi = float(self.min), float(self.max)  # type: ignore[arg-type]
        xs = np.geomspace(lo, hi, self.steps) if self.log else np.linspace(lo, hi, self.steps)
        out = [int(round(x)) if self.integer else float(x) for x in xs]
        return list(dict.fromkeys(out))  # integer rounding may repeat values


class Objective(StrictModel):
    metric: str = Field(min_length=1)
    sense: Literal["min", "max"] = "min"


MAX_POINTS = 100_000  # ~a day of 1-second points on a 2-core machine


class SweepSpec(StrictModel):
    base: str | dict[str, Any] = Field(description="a project preset name, a project file, or a project object")
    method: Literal["grid", "random", "lhs"] = "grid"
    samples: Annotated[int, Field(ge=1)] | None = Field(None, description="points for random and lhs")
    seed: int = 0
    parameters: list[Parameter] = Field(min_length=1)
    set: dict[str, Any] = Field(default_factory=dict, description="overrides applied to every point")
    objectives: list[Objective] = Field(
        default_factory=lambda: [Objective(metric="iteration_time_s"), Objective(metric="power_w")],
        min_length=1,
    )

    @model_validator(mode="after")
    def _method(self) -> SweepSpec:
        if self.method != "grid" and self.samples is None:
            raise ValueError(f"samples: required by the {self.method} method")
        if self.method == "grid":
            for i, p in enumerate(self.parameters):
                if p.values is None and p.steps is None:
                    raise ValueError(f"parameters.{i}.steps: a range needs steps for a grid sweep")
        paths = [p.path for p in self.parameters]
        if len(set(paths)) != len(paths):
            raise ValueError("parameters: a path appears twice")
        known = objective_metrics(self)
        for i, o in enumerate(self.objectives):  # an unknown metric is in no row: the front would be empty
            if o.metric not in known:
                raise ValueError(f"objectives.{i}.metric: unknown metric {o.metric!r}; a sweep records "
                                 f"{', '.join(known)}")
        count = point_count(self)
        if count > MAX_POINTS:  # a 200-byte spec must not ask for 10¹² points (they are listed in memory)
            where = "parameters" if self.method == "grid" else "samples"
            raise ValueError(f"{where}: the sweep has {count:,} points (limit {MAX_POINTS:,}); split it")
        return self


def objective_metrics(spec: SweepSpec) -> list[str]:
    """What an objective may name: a column every point records (``point.METRICS``, the hardware's rated
    ``COST_FIELDS``) or a swept parameter's path."""
    from tilewright.engine.search.sweep.point import COST_FIELDS, METRICS

    return [*METRICS, *COST_FIELDS, *(p.path for p in spec.parameters)]


def point_count(spec: SweepSpec) -> int:
    """Points the spec asks for, without listing them (a grid's integer rounding may merge a few)."""
    if spec.method != "grid":
        return spec.samples or 1
    return math.prod(len(p.values) if p.values is not None else (p.steps or 1) for p in spec.parameters)


def points(spec: SweepSpec) -> list[dict[str, Any]]:
    """The sweep's points, each ``{path: value}`` in parameter order."""
    params = spec.parameters
    if spec.method == "grid":
        combos = itertools.product(*(p.grid() for p in params))
        return [dict(zip((p.path for p in params), combo, strict=True)) for combo in combos]
    n = spec.samples or 1
    if spec.method == "lhs":
        from scipy.stats import qmc

        unit = qmc.LatinHypercube(d=len(params), seed=spec.seed).random(n)
    else:
        unit = np.random.default_rng(spec.seed).random((n, len(params)))
    return [{p.path: _plain(p.at(float(u))) for p, u in zip(params, row, strict=True)} for row in unit]


def _plain(value: Any) -> Any:
    """numpy scalars → Python, so values serialise and hash the same everywhere."""
    return value.item() if isinstance(value, np.generic) else value


def point_key(overrides: dict[str, Any]) -> str:
    """A stable identity for a point: the hash of its overrides (sorted, canonical JSON)."""
    text = json.dumps(overrides, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
