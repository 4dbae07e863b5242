"""The distributed optimizer's weight all-gather after the step is drawn on each stage's lane by both engines.

The event engine charged it (``dp_comm``, the iteration's end) but drew no slice for it, so a ZeRO-1 stage's
lane stopped at its optimizer step, short of the iteration: the studio's Timeline then gave a span shorter than
the headline's iteration time (Mixtral 8x7B with cp 2: 2.83 s against 2.86 s). The analytic engine drew it,
but also drew a "ZeRO weight gather" of ~1e-18 s (a difference of sums) in runs that gather nothing."""

from __future__ import annotations

import numpy as np
import pytest
from tilewright.engine.io.presets import load_system
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings
from tilewright.engine.results.timeline import CATEGORIES
from tilewright.engine.simulate import simulate

GATHER = "ZeRO weight gather"


def project(engine: str, zero: int, pp: int = 1, contention: bool = True) -> Project:
    """A small GPT on one DGX-H100 node (8 GPUs): dp 8 / pp, the distributed optimizer at ``zero``."""
    spec = GPTSpec(name="g", layers=4, hidden=2048, heads=16, seq_len=2048, vocab=32000)
    return Project(name="gather", hardware=load_system("dgx-h100"), workload=spec,
                   mapping=Mapping(dp=8 // pp, pp=pp, micro_batch=1, global_batch=16, zero=zero),
                   run=RunSettings(dtype="bf16", engine=engine, contention=contention))


def stage_slices(result) -> dict[str, list[tuple[float, float, str, str]]]:
    """Each compute lane's slices: (start, end, category, label), in time order."""
    a, tl = result.timeline.arrays(), result.timeline
    out: dict[str, list[tuple[float, float, str, str]]] = {}
    for i, lane in enumerate(tl.lanes):
        if lane.group != "compute":
            continue
        rows = np.flatnonzero(a["lane"] == i)
        out[lane.name] = sorted((float(a["start"][k]), float(a["start"][k] + a["dur"][k]),
                                 CATEGORIES[a["category"][k]], tl.labels[a["label"][k]]) for k in rows)
    return out


@pytest.mark.parametrize("pp", [1, 2])
def test_event_engine_draws_the_post_step_gather_up_to_the_iteration_end(pp):
    result = simulate(project("event", zero=1, pp=pp))
    end = result.iteration_time_s
    for lane, slices in stage_slices(result).items():
        gathers = [s for s in slices if s[3] == GATHER]
        assert len(gathers) == 1, lane
        start, stop, category, _ = gathers[0]
        assert category == "dp_comm"
        # it follows the optimizer step directly and is the lane's last slice
        step = next(s for s in slices if s[3] == "optimizer step")
        assert start == pytest.approx(step[1], abs=1e-12)
        assert stop == pytest.approx(max(s[1] for s in slices), abs=1e-12)
    # the stage the iteration ends on reaches it: the lanes no longer stop short of the headline's time
    assert max(s[1] for slices in stage_slices(result).values() for s in slices) == pytest.approx(end, rel=1e-12)


def test_without_contention_both_engines_draw_the_same_gather():
    event = stage_slices(simulate(project("event", zero=1, contention=False)))
    analytic = stage_slices(simulate(project("analytic", zero=1, contention=False)))
    ev = [s for s in event["stage 0"] if s[3] == GATHER]
    an = [s for s in analytic["stage 0"] if s[3] == GATHER]
    assert len(ev) == len(an) == 1
    assert ev[0][0] == pytest.approx(an[0][0], rel=1e-9)
    assert ev[0][1] == pytest.approx(an[0][1], rel=1e-9)
    assert ev[0][1] > ev[0][0]  # a real all-gather: ZeRO-1 over 8 ranks re-gathers every updated weight


def test_the_gather_slices_and_the_gradient_reduction_hold_the_stage_s_dp_comm():
    result = simulate(project("event", zero=1))
    slices = stage_slices(result)["stage 0"]
    drawn = sum(stop - start for start, stop, category, _ in slices if category == "dp_comm")
    assert drawn == pytest.approx(result.time_breakdown_s["dp_comm"], rel=1e-9)


@pytest.mark.parametrize("engine", ["event", "analytic"])
@pytest.mark.parametrize("zero", [0, 3])
def test_no_gather_slice_where_the_step_gathers_nothing(engine, zero):
    """ZeRO 0 keeps whole weights; ZeRO 3 gathers each layer's inside its passes: no post-step gather."""
    result = simulate(project(engine, zero=zero))
    labels = {s[3] for slices in stage_slices(result).values() for s in slices}
    assert GATHER not in labels
