"""The split choice's shortcut (perf.spatial_choice.choose): it skips layouts by a lower bound instead of
costing every candidate, and must pick exactly what costing every candidate picks.

The reference here is the plain rule, written out: cost every split the policy allows with ``gemm_cost``, in
the order the generators list them, and keep the first with the least time. The bound (``floor_seconds``)
is checked against the time of every split it stands for, and the memo against an edited chip.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.perf import spatial_choice
from tilewright.engine.perf.spatial import gemm_on_grid
from tilewright.engine.perf.spatial_chip import GridChip, grid_chip
from tilewright.engine.perf.spatial_choice import (
    choose,
    dram_sharded,
    dram_sharded_decode,
    full_grid_2d,
    one_d,
    two_d,
)
from tilewright.engine.perf.spatial_cost import GemmCost, GemmProblem, GemmTerms, floor_seconds, gemm_cost


def _chip(name: str, dram: bool = True) -> GridChip:
    c = load_system(name).children[0]
    return grid_chip(c.compute, c.memories[0] if dram else None)


CHIPS = {
    "wormhole-n150": _chip("wormhole-n150"),
    "blackhole-p150": _chip("blackhole-p150"),
    "blackhole-p150 sram only": _chip("blackhole-p150", dram=False),
}
SHAPES = [(32, 4096, 4096), (1, 8192, 28672), (2048, 4096, 11008), (4096, 4096, 32), (96, 512, 64), (8192, 64, 8192)]
FORMATS = [("bf16", "bf16", "HiFi4"), ("bf16", "bfp8", "HiFi2"), ("bf16", "bfp4", "LoFi")]
PLACES = [(True, True, True, False), (True, True, True, True), (False, True, False, False), (True, False, True, False)]


def candidates(ch: GridChip, p: GemmProblem, policy: str):
    if dram_sharded_decode(GemmTerms(ch, p), policy):  # the one program tt-transformers runs these as
        return list(dram_sharded(ch, p))
    if policy == "auto":
        return [*two_d(ch, p), *one_d(ch, p), *full_grid_2d(ch, p)]
    if policy == "2d":
        return list(full_grid_2d(ch, p))
    return list(one_d(ch, p, skinny_only=False))


def first_cheapest(ch: GridChip, p: GemmProblem, policy: str) -> GemmCost:
    best = None
    for s in candidates(ch, p, policy):
        c = gemm_cost(ch, p, s)
        if best is None or c.seconds < best.seconds:
            best = c
    assert best is not None
    return best


def problems():
    for (m, k, n), (fa, fb, fid), (a, b, o, sharded) in itertools.product(SHAPES, FORMATS, PLACES):
        yield GemmProblem(m, k, n, fa, fb, fa, fid, a, b, o, b_sharded=sharded)


@pytest.mark.parametrize("name", sorted(CHIPS))
@pytest.mark.parametrize("policy", ["auto", "2d", "1d"])
def test_the_pick_is_the_first_cheapest_of_every_split(name, policy):
    ch = CHIPS[name]
    for p in problems():
        assert choose.__wrapped__(ch, p, policy) == first_cheapest(ch, p, policy), p


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_the_bound_is_below_every_split_it_stands_for(name):
    ch = CHIPS[name]
    for p in problems():
        g = GemmTerms(ch, p)
        for s in candidates(ch, p, "auto") + candidates(ch, p, "1d"):
            bound = floor_seconds(g, s.kind, s.rows, s.cols, s.per_m, s.per_n, s.k_split)
            seconds = gemm_cost(ch, p, s).seconds
            assert 0 < bound <= seconds, (p, s)


def test_the_bound_skips_most_layouts_of_a_large_gemm(monkeypatch):
    ch = CHIPS["blackhole-p150"]
    p = GemmProblem(4096, 4096, 11008, "bf16", "bfp8", "bf16", "HiFi2")
    costed = []
    real = spatial_choice.pipeline
    monkeypatch.setattr(spatial_choice, "pipeline", lambda g, *f: costed.append(f) or real(g, *f))
    pick = choose.__wrapped__(ch, p, "auto")
    assert pick == first_cheapest(ch, p, "auto")
    assert 0 < len(costed) < len(candidates(ch, p, "auto")) / 2


def test_an_edited_chip_is_costed_again():
    """The memos (``gemm_on_grid``, ``choose``) are keyed on every field of the chip: a preset edited in the
    studio gives a new record, costed afresh; the unedited chip keeps its own answer."""
    ch = CHIPS["wormhole-n150"]
    shape = (32, 8192, 8192, "bf16", "bfp8", "bf16", "HiFi2")  # a decode GEMM, DRAM-bound
    p = GemmProblem(*shape)
    before = gemm_on_grid(ch, *shape)
    slower = dataclasses.replace(ch, dram_peak=ch.dram_peak / 4)
    edited = gemm_on_grid(slower, *shape)
    assert edited == first_cheapest(slower, p, "auto") == choose(slower, p)
    assert edited.seconds > 2 * before.seconds
    assert gemm_on_grid(ch, *shape) == before == first_cheapest(ch, p, "auto")
