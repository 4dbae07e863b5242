"""A line all-gather's link fed by too few worker cores (``CollectiveCosts.workers_to_fill_link``).

tt-metal's line all-gather multicasts with one worker core per link (each member injects its own shard, the
routers forward the others'), and on Wormhole one worker cannot keep a link fed where two can (ttnn
all_gather_multicast_factory.cpp / all_gather_unicast_factory.cpp). So on the T3000 a 2-chip line's link,
which carries one shard per direction, runs at half its bandwidth, while a longer line's end link carries N - 1
shards from N - 1 workers and stays link-bound. Expected times are derived here from the preset's link and
collective figures (the α terms as ``collective_costs`` documents them), not read back from the engine; the
same system with the field at its default is the control.
"""

from __future__ import annotations

import json

import pytest
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import Component
from tilewright.engine.perf.collectives import collective

MiB = 2**20
T3K = "wormhole-t3000"


def system(name: str, workers: int | None = None) -> Component:
    """The preset, with ``workers_to_fill_link`` replaced when given."""
    data = load_system(name).model_dump(mode="json")
    if workers is not None:
        data["interconnect"]["collective"]["workers_to_fill_link"] = workers
    return Component.model_validate(data)


def row(hw, n: int) -> list[int]:
    """The first ``n`` chips of the mesh's first row, in order."""
    first = sorted((d for d in hw.devices if d.coord is not None and d.coord[0] == 0), key=lambda d: d.coord)
    return [d.index for d in first[:n]]


def figures(hw, a: int, b: int):
    (lk,) = hw.device_route(a, b)
    return hw.links[lk].bandwidth, hw.links[lk].latency_s, hw.interconnects[hw.links[lk].level].collective


def alpha(costs, hop: float, diameter: int) -> float:
    """One operation's latency: launch, connection handshakes, the diameter crossed ``diameter_crossings`` times."""
    return costs.fixed_s + costs.handshake_hops * hop + costs.diameter_crossings * diameter * hop


@pytest.fixture(scope="module")
def t3k():
    return elaborate(system(T3K)), elaborate(system(T3K, workers=1))


def test_the_wormhole_presets_need_two_workers_to_fill_a_link():
    for name in ("wormhole-t3000", "wormhole-n300", "wormhole-galaxy"):
        assert load_system(name).interconnect.collective.workers_to_fill_link == 2
    assert load_system("blackhole-galaxy").interconnect.collective.workers_to_fill_link == 1


@pytest.mark.parametrize("size", [64 * 1024, 16 * MiB])
def test_a_two_chip_line_all_gather_runs_at_half_the_link(t3k, size):
    """Each direction of the one link carries one member's half of the tensor, injected by its one worker: it
    takes as long as two halves would at the link's bandwidth."""
    hw, _ = t3k
    pair = row(hw, 2)
    bw, hop, costs = figures(hw, *pair)
    c = collective(hw, "all-gather", pair, size, algorithm="line")
    expected = alpha(costs, hop, 1) + 2 * (size / 2) / bw
    assert c.time(hw) == pytest.approx(expected, rel=1e-9)


def test_the_two_chip_all_gather_is_the_only_line_that_slows(t3k):
    """4 and 8 chips on a line: the end link carries N - 1 >= 2 workers' shards, so it stays link-bound and the
    time is that of the same fabric without the limit."""
    hw, unlimited = t3k
    for n in (3, 4):
        group = row(hw, n)
        a = collective(hw, "all-gather", group, 16 * MiB, algorithm="line")
        b = collective(unlimited, "all-gather", row(unlimited, n), 16 * MiB, algorithm="line")
        assert a.time(hw) == pytest.approx(b.time(unlimited), rel=1e-12)
    two = collective(hw, "all-gather", row(hw, 2), 16 * MiB, algorithm="line")
    free = collective(unlimited, "all-gather", row(unlimited, 2), 16 * MiB, algorithm="line")
    bw, _, _ = figures(hw, *row(hw, 2))
    assert two.time(hw) - free.time(unlimited) == pytest.approx(16 * MiB / 2 / bw, rel=1e-9)  # one more half


@pytest.mark.parametrize("kind", ["reduce-scatter", "all-gather", "all-reduce"])
def test_rings_and_reduce_scatters_are_unchanged(t3k, kind):
    """The ring runs two workers per direction and the reduce-scatter several per link through a mux: neither is
    limited, so the 8-chip ring and every reduce-scatter keep their times."""
    hw, unlimited = t3k
    ring = collective(hw, kind, [d.index for d in hw.devices], 16 * MiB, algorithm="ring")
    free = collective(unlimited, kind, [d.index for d in unlimited.devices], 16 * MiB, algorithm="ring")
    assert ring.time(hw) == pytest.approx(free.time(unlimited), rel=1e-12)
    if kind == "reduce-scatter":
        a = collective(hw, kind, row(hw, 2), 16 * MiB, algorithm="line")
        b = collective(unlimited, kind, row(unlimited, 2), 16 * MiB, algorithm="line")
        assert a.time(hw) == pytest.approx(b.time(unlimited), rel=1e-12)


def test_a_two_chip_all_reduce_pays_the_slow_gather_after_a_full_rate_reduce_scatter(t3k):
    """ttnn's all_reduce is a reduce-scatter then an all-gather (S8): on 2 chips the first moves its half at the
    link's bandwidth (store-and-forward hop, a neighbour round trip every ``reduce_sync_packets`` packets),
    the second at half of it."""
    hw, _ = t3k
    pair = row(hw, 2)
    size = 16 * MiB
    bw, hop, costs = figures(hw, *pair)
    half = size / 2
    payload = hw.interconnects[hw.links[hw.device_route(*pair)[0]].level].framing.payload_bytes
    rs = alpha(costs, hop, 1) + costs.reduce_hop_s + half / bw + half / (costs.reduce_sync_packets * payload) * 2 * hop
    ag = alpha(costs, hop, 1) + 2 * half / bw
    c = collective(hw, "all-reduce", pair, size, algorithm="line")
    assert c.time(hw) == pytest.approx(rs + ag, rel=1e-9)


def test_a_system_at_the_default_saves_without_the_field():
    data = json.loads(json.dumps(load_system("blackhole-galaxy").model_dump(mode="json", exclude_defaults=False)))
    assert "workers_to_fill_link" not in data["interconnect"]["collective"]
    dumped = load_system(T3K).model_dump(mode="json", exclude_defaults=False)
    assert dumped["interconnect"]["collective"]["workers_to_fill_link"] == 2
