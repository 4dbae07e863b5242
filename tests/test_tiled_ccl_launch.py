"""A generic runtime's per-call launch of a collective (``CollectiveCosts.launch_s_by_kind``): tt-transformers' legacy
CCLs on a Wormhole Galaxy wait ~21 us before each all-gather and ~7 us before each reduce-scatter (tt-metal issue
#15605), where an ordinary program waits ``fixed_s``. The expected differences are derived here from the preset's own
figures (the per-kind launch over ``fixed_s``, once per operation), with the field taken away for the reference: the
bytes, hops and barriers must not move, nor the persistent runtime, nor a kind the fabric does not name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tilewright.engine.cli.preset_projects import _with_compute
from tilewright.engine.hardware import elaborate
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import Component
from tilewright.engine.perf.collectives import collective
from tilewright.engine.simulate import simulate

KiB = 2**10
MiB = 2**20
GALAXY = "wormhole-galaxy"
BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def galaxy(launch: dict[str, float] | None = None, runtime_ccl: str | None = None) -> Component:
    """The Galaxy system, its per-kind launches replaced by ``launch`` (None: the preset's)."""
    data = load_system(GALAXY).model_dump(mode="json")
    if launch is not None:
        data["interconnect"]["collective"]["launch_s_by_kind"] = launch
    if runtime_ccl is not None:
        data = _with_compute(data, {"runtime_ccl": runtime_ccl}, "")
    return Component.model_validate(data)


def at(hw, r: int, c: int) -> int:
    return next(d.index for d in hw.devices if d.coord == (r, c))


def costs():
    return load_system(GALAXY).interconnect.collective


def extra(kind: str) -> float:
    """What the preset's per-call launch of ``kind`` adds over the program launch every operation pays."""
    c = costs()
    return c.launch_s_by_kind[kind] - c.fixed_s


@pytest.fixture(scope="module")
def machines():
    return elaborate(galaxy()), elaborate(galaxy({}))


def test_the_galaxy_preset_names_a_launch_for_both_kinds_above_a_program_launch():
    c = costs()
    assert set(c.launch_s_by_kind) == {"all-gather", "reduce-scatter"}
    assert all(v > c.fixed_s for v in c.launch_s_by_kind.values())
    # the all-gather's launch is the slower one (#15605: 21 vs 7 us)
    assert c.launch_s_by_kind["all-gather"] > c.launch_s_by_kind["reduce-scatter"]


@pytest.mark.parametrize("nbytes", [8 * KiB, 1 * MiB])
@pytest.mark.parametrize("axis", ["4-chip", "8-chip"])
def test_each_operation_pays_its_kinds_launch_instead_of_fixed_s(machines, axis, nbytes):
    """A line all-gather pays the all-gather's launch, a reduce-scatter the reduce-scatter's, and an all-reduce
    (reduce-scatter then all-gather) both, whatever the message: a fixed cost per call."""
    hw, plain = machines
    line = [at(hw, r, 0) for r in range(4)] if axis == "4-chip" else [at(hw, 0, c) for c in range(8)]
    expected = {"all-gather": extra("all-gather"), "reduce-scatter": extra("reduce-scatter"),
                "all-reduce": extra("all-gather") + extra("reduce-scatter")}
    for kind, delta in expected.items():
        a = collective(hw, kind, line, nbytes, algorithm="line")
        b = collective(plain, kind, line, nbytes, algorithm="line")
        assert a.algorithm == b.algorithm
        assert [ph.bytes_per_member for ph in a.phases] == [ph.bytes_per_member for ph in b.phases]
        assert a.time(hw) - b.time(plain) == pytest.approx(delta, rel=1e-9)


def test_a_kind_the_fabric_does_not_name_pays_fixed_s_bit_for_bit():
    only_gather = elaborate(galaxy({"all-gather": 21e-6}))
    plain = elaborate(galaxy({}))
    line = [at(plain, r, 0) for r in range(4)]
    a = collective(only_gather, "reduce-scatter", line, 64 * KiB, algorithm="line")
    b = collective(plain, "reduce-scatter", line, 64 * KiB, algorithm="line")
    assert a.time(only_gather) == b.time(plain)


@pytest.mark.parametrize("kind", ["all-reduce", "reduce-scatter", "all-gather"])
def test_the_persistent_runtime_launches_at_fixed_s(kind):
    """llama3_70b_galaxy's persistent collectives send no kernel to the Ethernet cores per call: the per-call
    launch does not apply, bit for bit."""
    with_launch = elaborate(galaxy(None, "persistent"))
    without = elaborate(galaxy({}, "persistent"))
    line = [at(without, 0, c) for c in range(8)]
    for nbytes in (16 * KiB, 4 * MiB):
        a, b = collective(with_launch, kind, line, nbytes), collective(without, kind, line, nbytes)
        assert (a.algorithm, a.time(with_launch)) == (b.algorithm, b.time(without))


def test_systems_without_the_field_save_without_it():
    """An old system file saves back unchanged: the field is quiet at its default."""
    dumped = load_system("wormhole-t3000").model_dump(mode="json")
    assert "launch_s_by_kind" not in str(dumped)
    assert "launch_s_by_kind" in str(load_system(GALAXY).model_dump(mode="json"))


@pytest.fixture(scope="module")
def llm():
    sys.path.insert(0, str(BENCH))
    try:
        import calibrate_tiled_llm

        yield calibrate_tiled_llm
    finally:
        sys.path.remove(str(BENCH))


def test_tt_transformers_decode_grows_by_the_launches_of_its_layers_collectives(llm):
    """tt-transformers at batch 1 on the Galaxy (``calibrate_tiled_llm.TG_MODELS``, the 16- and 32-layer Llamas):
    the launches add a time per layer, the same for a small and a large layer. Below hidden 8192 each decoder layer
    makes eight all-gathers and no reduce-scatter (mapping.tp_axes_collectives 'tt-transformers': the two norms'
    statistics, the users after attention, and the partial sums of QKV, WO, FF1, FF3 and FF2, each gathered then
    summed locally), so the step of the 32-layer model grows by 16 x 8 x (an all-gather's launch) more than the
    16-layer one's; the per-step collectives (embedding, final norm, sampling) cancel in the difference."""
    small, large = llm.TG_MODELS[0], llm.TG_MODELS[2]

    def tpot(c, launch: dict[str, float] | None) -> tuple[int, float]:
        p = llm.configured(c)
        if launch is not None:
            p = p.model_copy(update={"hardware": galaxy(launch)})
        return p.workload.layers, simulate(p, series=False).tpot_s

    (n_small, s1), (_, s0) = tpot(small, None), tpot(small, {})
    (n_large, l1), (_, l0) = tpot(large, None), tpot(large, {})
    assert n_large - n_small == 16
    assert llm.configured(large).workload.hidden < 8192
    per_layer = 8 * extra("all-gather")
    # to 1e-4: TPOT is the generation's mean over sampled contexts, not one step
    assert (l1 - l0) - (s1 - s0) == pytest.approx((n_large - n_small) * per_layer, rel=1e-4)
    assert s1 - s0 > n_small * per_layer  # and the per-step collectives pay theirs too


def test_the_tt_tg_report_prices_the_launches_of_the_layers_eleven_calls(llm):
    """tt-transformers' TG layer makes seven all-gathers (two norms' statistics, QKV's partial sums, the users after
    attention, WO's and FF2's gathers, the SiLU product) and four reduce-scatters (WO, FF1, FF3, FF2): their launches
    at the preset's per-kind figures."""
    import tiled_galaxy_ops as ops

    kinds = [c.kind for c in ops.TT_TG_CALLS]
    assert (kinds.count("all-gather"), kinds.count("reduce-scatter")) == (7, 4)
    c = costs()
    project = llm.configured(llm.TG_MODELS[-1])
    expected = 7 * c.launch_s_by_kind["all-gather"] + 4 * c.launch_s_by_kind["reduce-scatter"]
    assert ops.tt_tg_launch_s(project) == pytest.approx(expected, rel=1e-12)
