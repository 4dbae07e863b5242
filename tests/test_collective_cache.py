"""The collectives' size-independent cache (``perf.collectives._Shape``, kept on the graph) changes no number.

A search decomposes the same groups at many sizes and across many candidates, so ``collective`` keeps each
group's ring orders, routes, domains, merged usage and protocol table on the ``HardwareGraph`` and applies the
size afterwards. These tests decompose many (kind, group, size) on switched clusters (dgx-a100, dgx-h100), a
wafer and a Tenstorrent galaxy twice — on a warm graph, in an order that visits every group at other sizes
first, and cold (the cache dropped before each call) — and require the results to be identical to the bit,
phase objects and shared usage dicts included; then that nothing handed out aliases the cache, and that the
cache lives and dies with its graph.
"""

from __future__ import annotations

import gc
import random
import weakref

import pytest
from tilewright.engine.hardware import elaborate
from tilewright.engine.hardware.graph import HardwareGraph
from tilewright.engine.io.presets import load_system
from tilewright.engine.perf.collectives import Collective, collective, forget_shapes

KINDS = ("all-reduce", "reduce-scatter", "all-gather", "broadcast")
# both sides of the small-message tree threshold (64 KiB), the protocols' crossovers, the bandwidth regime
SIZES = (1.0, 1000.0, 65535.0, 65536.0, 3e5, 1.7e6, 2.0**24 + 3, 2.0**30, 1.234e9)


def _groups(hw: HardwareGraph, seed: int) -> list[list[int]]:
    """Contiguous groups (inside a node, whole nodes: hierarchical), strided rails, scattered members."""
    n = len(hw.devices)
    rng = random.Random(seed)
    groups = []
    for p in (2, 3, 4, 8, 16, 32):
        if p <= n:
            groups += [list(range(p)), list(range(0, n, max(n // p, 1)))[:p], rng.sample(range(n), p)]
    return groups


def _same(a: Collective, b: Collective) -> None:
    assert (a.kind, a.algorithm, a.payload_fraction) == (b.kind, b.algorithm, b.payload_fraction)
    assert len(a.phases) == len(b.phases)
    for pa, pb in zip(a.phases, b.phases, strict=True):
        assert pa.bytes_per_member == pb.bytes_per_member  # exact, not approx
        assert pa.latency_s == pb.latency_s
        assert list(pa.usage.items()) == list(pb.usage.items())  # same links, counts and order
    # which phases are one object, and which share one usage dict (the event engine groups by identity)
    for get in (lambda ph: ph, lambda ph: ph.usage):
        ids_a, ids_b = [id(get(ph)) for ph in a.phases], [id(get(ph)) for ph in b.phases]
        assert [ids_a.index(i) for i in ids_a] == [ids_b.index(i) for i in ids_b]


@pytest.mark.parametrize(
    ("system", "devices"),
    [("dgx-a100", 64), ("dgx-h100", 32), ("wafer-64x64", None), ("wormhole-galaxy", None)],
)
def test_cached_decompositions_equal_cold_ones_bit_for_bit(system: str, devices: int | None) -> None:
    hw = elaborate(load_system(system), devices)
    cases = [(k, g, s) for g in _groups(hw, 7) for k in KINDS for s in SIZES]
    warm = {}
    for kind, group, size in random.Random(3).sample(cases, len(cases)):  # every group warm at other sizes
        warm[(kind, tuple(group), size)] = collective(hw, kind, group, size)  # type: ignore[arg-type]
    algorithms = set()
    for kind, group, size in cases:
        forget_shapes(hw)
        cold = collective(hw, kind, group, size)  # type: ignore[arg-type]
        _same(warm[(kind, tuple(group), size)], cold)
        algorithms.add(cold.algorithm)
    assert len(algorithms) >= 2  # the cases reach more than one algorithm on every system


def test_switched_cases_reach_tree_ring_hierarchical_and_protocols() -> None:
    """The equality above covers every path of the switched decomposition (else it proves little)."""
    hw = elaborate(load_system("dgx-a100"), 64)
    seen = {collective(hw, k, g, s).algorithm for g in _groups(hw, 7) for k in KINDS for s in SIZES}  # type: ignore[arg-type]
    assert {"ring", "hierarchical"} <= seen
    fractions = {collective(hw, "all-reduce", list(range(16)), s).payload_fraction for s in SIZES}
    assert len(fractions) > 1  # the protocol changes with the size on the same cached shape


def test_results_do_not_alias_the_cache() -> None:
    """Each call hands out its own usage dicts: mutating one changes no later result."""
    hw = elaborate(load_system("dgx-a100"), 64)
    for group in (list(range(8)), list(range(32)), [3, 11, 19, 27]):
        first = collective(hw, "all-reduce", group, 2.0**28)
        again = collective(hw, "all-reduce", group, 2.0**28)
        assert not {id(ph.usage) for ph in first.phases} & {id(ph.usage) for ph in again.phases}
        for ph in first.phases:
            for lk in ph.usage:
                ph.usage[lk] = 1e9
        forget_shapes(hw)
        _same(collective(hw, "all-reduce", group, 2.0**28), again)


def test_the_cache_lives_and_dies_with_its_graph() -> None:
    """Kept on the graph itself: another graph of the same system starts cold, and the cache holds no
    reference that keeps a dropped graph alive."""
    hw = elaborate(load_system("dgx-a100"), 16)
    collective(hw, "all-reduce", list(range(16)), 2.0**30)
    other = elaborate(load_system("dgx-a100"), 16)
    assert "_collective_shape" in hw.__dict__ and "_collective_shape" not in other.__dict__
    group = list(range(16))
    _same(collective(other, "all-reduce", group, 2.0**30), collective(hw, "all-reduce", group, 2.0**30))
    ref = weakref.ref(hw)
    del hw
    gc.collect()
    assert ref() is None
