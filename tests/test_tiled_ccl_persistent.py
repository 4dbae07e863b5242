"""Persistent collectives (``Compute.runtime_ccl``): what tt-metal's llama3_70b_galaxy decode does not pay.

Its TT_CCL creates the global semaphores and double-buffered persistent buffers once, so a call needs no entry
barrier (the data crosses the diameter once instead of three times) and it runs one-shot collectives: an
all-reduce gathers every member's whole tensor and sums locally, a reduce-scatter writes each shard straight to
its owner. Expected times are derived here from the preset's link and collective figures, not read back from
the engine; the generic model and the GPU fabrics must not move.
"""

from __future__ import annotations

import pytest
from tilewright.engine.cli.preset_projects import _with_compute
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_project_preset, load_system
from tilewright.engine.ir import Component
from tilewright.engine.perf.collectives import collective

KiB = 2**10
MiB = 2**20
GALAXY = "wormhole-galaxy"


def system(name: str, runtime_ccl: str | None) -> Component:
    data = load_system(name).model_dump(mode="json")
    if runtime_ccl is not None:
        data = _with_compute(data, {"runtime_ccl": runtime_ccl}, "")
    return Component.model_validate(data)


def at(hw, r: int, c: int) -> int:
    return next(d.index for d in hw.devices if d.coord == (r, c))


def figures(hw, a: int, b: int):
    """The neighbour link's bandwidth and latency, and the fabric's collective costs."""
    (lk,) = hw.device_route(a, b)
    return hw.links[lk].bandwidth, hw.links[lk].latency_s, hw.interconnects[hw.links[lk].level].collective


@pytest.fixture(scope="module")
def galaxies():
    return elaborate(system(GALAXY, None)), elaborate(system(GALAXY, "persistent"))


def test_a_persistent_runtime_drops_only_the_entry_barrier_and_the_per_call_launch_of_a_gather(galaxies):
    """The same line all-gather along the 8-chip axis: the persistent one is faster by the barrier's two
    crossings of the diameter (n - 1 hops each) and by the generic runtime's per-call launch of an all-gather
    beyond the program launch it still pays (``launch_s_by_kind`` over ``fixed_s``), nothing else."""
    generic, persistent = galaxies
    line = [at(generic, 0, c) for c in range(8)]
    _, hop, costs = figures(generic, line[0], line[1])
    a = collective(generic, "all-gather", line, 1 * MiB)
    b = collective(persistent, "all-gather", line, 1 * MiB)
    assert a.algorithm == b.algorithm == "line"
    barrier = (costs.diameter_crossings - 1) * (len(line) - 1) * hop
    launch = costs.launch_s_by_kind.get("all-gather", costs.fixed_s) - costs.fixed_s
    assert barrier > 0 and launch > 0
    assert a.time(generic) - b.time(persistent) == pytest.approx(barrier + launch, rel=1e-9)


@pytest.mark.parametrize("axis", ["8-chip", "4-chip"])
def test_a_decode_all_reduce_gathers_every_whole_tensor_through_the_end_link(galaxies, axis):
    """all_reduce_async: the line multicasts each member's whole tensor, so the end link carries the n - 1
    others'; one launch, one connection, one crossing of the diameter, and no store-and-forward."""
    _, hw = galaxies
    line = [at(hw, 0, c) for c in range(8)] if axis == "8-chip" else [at(hw, r, 0) for r in range(4)]
    n, nbytes = len(line), 64 * KiB
    bw, hop, costs = figures(hw, line[0], line[1])
    c = collective(hw, "all-reduce", line, nbytes)
    assert c.algorithm.startswith("direct")
    expected = costs.fixed_s + costs.handshake_hops * hop + (n - 1) * hop + (n - 1) * nbytes / bw
    assert c.time(hw) == pytest.approx(expected, rel=1e-9)


def test_a_decode_reduce_scatter_writes_each_shard_to_its_owner(galaxies):
    """llama_reduce_scatter on the 4-chip line: every member sends a quarter to each peer; the middle link
    carries the shards of the two members on one side bound for the two on the other (4 quarters)."""
    _, hw = galaxies
    line = [at(hw, r, 0) for r in range(4)]
    nbytes = 112 * KiB
    bw, hop, costs = figures(hw, line[0], line[1])
    c = collective(hw, "reduce-scatter", line, nbytes)
    assert c.algorithm == "direct"
    expected = costs.fixed_s + costs.handshake_hops * hop + 3 * hop + 2 * 2 * (nbytes / 4) / bw
    assert c.time(hw) == pytest.approx(expected, rel=1e-9)


def test_large_messages_keep_reduce_scatter_then_all_gather(galaxies):
    """The one-shot all-reduce moves n - 1 whole tensors through a link: prefill-sized messages choose the
    bandwidth-optimal reduce-scatter + all-gather, which the persistent runtime also runs (without the barrier)."""
    generic, hw = galaxies
    line = [at(hw, 0, c) for c in range(8)]
    big = collective(hw, "all-reduce", line, 256 * MiB)
    assert not big.algorithm.startswith("direct")
    assert big.time(hw) < collective(hw, "all-reduce", line, 256 * MiB, algorithm="direct").time(hw)
    assert big.time(hw) < collective(generic, "all-reduce", line, 256 * MiB).time(generic)


def test_the_generic_runtime_offers_no_direct_algorithm(galaxies):
    generic, _ = galaxies
    line = [at(generic, 0, c) for c in range(8)]
    with pytest.raises(ValueError):
        collective(generic, "all-reduce", line, 64 * KiB, algorithm="direct")


@pytest.mark.parametrize("kind", ["all-reduce", "reduce-scatter", "all-gather"])
def test_switched_fabrics_ignore_the_flag(kind):
    """NCCL's fabrics time collectives with their protocols: the flag changes nothing there, bit for bit."""
    plain, flagged = elaborate(system("dgx-a100", None)), elaborate(system("dgx-a100", "persistent"))
    group = list(range(8))
    for nbytes in (16 * KiB, 4 * MiB, 512 * MiB):
        a, b = collective(plain, kind, group, nbytes), collective(flagged, kind, group, nbytes)
        assert (a.algorithm, a.time(plain)) == (b.algorithm, b.time(flagged))


def test_only_the_galaxy_project_runs_persistent_collectives_and_systems_save_without_the_field():
    project = load_project_preset("wormhole-galaxy-llama3-70b-inference")
    assert {d.compute.runtime_ccl for d in elaborate(project.hardware).devices} == {"persistent"}
    other = load_project_preset("wormhole-t3000-llama2-70b-inference")
    assert {d.compute.runtime_ccl for d in elaborate(other.hardware).devices} == {"generic"}
    assert "runtime_ccl" not in str(load_system(GALAXY).model_dump(mode="json"))
