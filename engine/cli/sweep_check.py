"""Refuse a sweep spec whose paths name no project field, before any point runs.

A path is applied to each point's copy of the base project, and a point whose project does not validate
is recorded as ``invalid`` without stopping the sweep — right for a value that makes an inconsistent
design (tp not dividing the heads), wrong for a misspelt path (``mapping.bogus``), which makes every point
invalid and the sweep "succeed" having measured nothing. So each path is tried once on the base project,
with its first value, and a fault of the path itself (an unknown field, no such field, a list index out of
range) refuses the whole spec, naming the file, the path and the reason; faults of the value are left to
the points.

A range (``min``/``max``) over a whole-number field (``mapping.dp``) without ``"integer": true`` samples
fractional values that every point would then fail on; the spec is refused up front, naming the parameter
and asking for ``"integer": true`` (which rounds the samples), rather than rounded silently: a range that
is meant to be continuous and one meant to be counted read the same otherwise.
"""

from __future__ import annotations

import copy
from typing import Any

from tilewright.engine.errors import InputError, Problem

# Reasons that blame the path, not the value (engine/io/errors.py and engine/io/overrides.py word them).
_PATH_FAULTS = ("unknown field", "no such field", "out of range (0", "is a value, not an object",
                "cannot set a field inside")


def check_sweep_paths(spec: Any, base: dict[str, Any], spec_path: str) -> None:
    """Raise ``InputError`` (citing ``spec_path``) for every parameter or ``set`` path that is not a field."""
    from tilewright.engine.io.overrides import apply_overrides
    from tilewright.engine.io.project_file import project_from_data

    tries = [(f"set.{k}", k, v) for k, v in spec.set.items()]
    tries += [(f"parameters.{i}.path", p.path, p.at(0.0)) for i, p in enumerate(spec.parameters)]
    problems: list[Problem] = []
    for i, p in enumerate(spec.parameters):
        if p.values is None and not p.integer:
            tries.append((f"parameters.{i}.integer", p.path, float(p.min) + 0.5))  # a fractional sample
    for where, path, value in tries:
        data = copy.deepcopy(base)
        try:
            apply_overrides(data, path, value, spec_path)
            project_from_data(data, spec_path)
        except InputError as exc:
            if where.endswith(".integer"):
                problems += [Problem(where, f"'{path}' is a whole-number field and the range would sample fractions "
                                            f"(e.g. {value:g}); add \"integer\": true to round the samples")
                             for p in exc.problems if p.path == path and "valid integer" in p.reason]
                continue
            problems += [Problem(where, f"'{path}': {p.reason}") for p in exc.problems if _blames(p, path)]
    if problems:
        raise InputError(spec_path, problems)


def _blames(problem: Problem, path: str) -> bool:
    """The problem is about ``path`` itself (or a prefix of it) and says the field is not there."""
    on_path = problem.path == path or path.startswith(problem.path + ".")
    return on_path and any(fault in problem.reason for fault in _PATH_FAULTS)
