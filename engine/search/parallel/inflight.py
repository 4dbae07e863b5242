"""Micro-batches a pipeline stage holds activations for, per model chunk, without walking the schedule.

The analytic engine finds a stage's activation peak by walking its schedule (+ each forward, − each
backward), O(m·v) steps. Search needs the same peak for thousands of candidates, so this module
derives the live counts in closed form from the schedules of ``engine.plan.schedules``:

- GPipe: all m micro-batches are live before the first backward;
- 1F1B: stage r warms up with pp−r−1 forwards, so min(pp−r, m) are live at the first backward
  (Narayanan et al., SC'21 §2.2);
- interleaved 1F1B: after the warm-up w = 2(pp−r−1) + (v−1)·pp virtual micro-batches (all of them
  when m = pp), each forward is followed by a backward. Forward k runs chunk (k mod pp·v) // pp,
  backward i chunk v−1−(i mod pp·v) // pp, so the live count of chunk c after forward w+i is
  F_c(w+i+1) − B_c(i), which is periodic in i with period pp·v: checking one period finds the peak.

Each live vector is followed by a backward at the same level, which is when a recomputed layer's
transient buffer adds on top, so peak = max_live · act + transient.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from tilewright.engine.ir.mapping import Schedule


def _count(n: np.ndarray, offset: np.ndarray, pp: int, group: int) -> np.ndarray:
    """How many of the first n virtual micro-batches fall in the block of pp starting at ``offset``."""
    return (n // group) * pp + np.clip(n % group - offset, 0, pp)


@lru_cache(maxsize=4096)
def live_vectors(schedule: Schedule, pp: int, m: int, v: int, rank: int) -> np.ndarray:
    """Candidate live-count vectors (rows; one column per chunk) of stage ``rank``; the peak is at one."""
    if schedule is Schedule.gpipe:
        return np.array([[m]], dtype=float)
    if schedule is Schedule.one_f_one_b or v == 1:
        return np.array([[min(pp - rank, m)]], dtype=float)
    total = m * v
    warm = total if m == pp else min(2 * (pp - rank - 1) + (v - 1) * pp, total)
    if warm >= total:
        return np.full((1, v), float(m))
    group = pp * v
    i = np.arange(min(group, total - warm))[:, None]
    c = np.arange(v)[None, :]
    fwd = _count(warm + i + 1, c * pp, pp, group)
    bwd = _count(i, (v - 1 - c) * pp, pp, group)
    return np.unique(fwd - bwd, axis=0).astype(float)


def peak_activation(
    schedule: Schedule, pp: int, m: int, v: int, rank: int, act_per_chunk: np.ndarray, transient: float
) -> float:
    """Peak stored activation bytes of stage ``rank`` given one micro-batch's bytes per chunk."""
    live = live_vectors(schedule, pp, m, v, rank)
    return float((live @ act_per_chunk).max()) + transient
