"""Under ``mapping.fsdp`` each layer's gradient reduce-scatter overlaps the backward whatever
``overlap_grad_reduce`` says (``engine.plan.sharding``): PyTorch FSDP reduce-scatters on a stream of its own and
has no serial mode. ZeRO-2/3 without FSDP keep the flag's meaning, and the studio shows the flag idle under FSDP.

Expected bytes are derived here from the stage's parameters: fp32 gradients, 4 B per parameter, reduce-scattered
once per micro-batch."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.io.presets import load_system  # noqa: E402
from tilewright.engine.ir import GPTSpec, Mapping, Project, RunSettings  # noqa: E402
from tilewright.engine.simulate import make_plan, simulate  # noqa: E402
from tilewright.studio.ui.overlap_options import OVERLAP_GRAD_FSDP_TIP, overlap_reason  # noqa: E402

DP = 8
SPEC = GPTSpec(name="gpt-zero", layers=8, hidden=2048, heads=16, seq_len=1024, vocab=51200)
GRAD_BYTES = 4  # fp32 gradients (mixed precision)


def _project(engine: str = "analytic", **mapping) -> Project:
    m = {"tp": 1, "pp": 1, "dp": DP, "micro_batch": 4, "global_batch": 4 * DP * 4} | mapping
    return Project(name="zero", hardware=load_system("dgx-a100"), workload=SPEC, mapping=Mapping(**m),
                   run=RunSettings(dtype="bf16", engine=engine, contention=False))


def _reduced(plan) -> float:
    """The reduce-scatter bytes the backward of chunk 0 leaves exposed."""
    return sum(seg.comm[1] for seg in plan.stages[0].passes[(0, "B")].segments
               if seg.comm is not None and seg.comm[0] == "dp:reduce-scatter")


def test_zero3_without_the_flag_reduces_every_layer_in_the_open():
    """The flag still means what it says without FSDP: off, every layer's gradients are reduce-scattered in the
    open, all the stage's gradients per micro-batch; on, they hide behind the next layer's backward."""
    off, on = (make_plan(_project(zero=3, overlap_param_gather=True, overlap_grad_reduce=f)) for f in (False, True))
    assert _reduced(off) == pytest.approx(off.stages[0].params * GRAD_BYTES, rel=1e-9)
    assert _reduced(on) < _reduced(off) / 2


def test_fsdp_overlaps_its_reduce_scatters_whatever_the_flag_says():
    off, on = (make_plan(_project(fsdp=True, overlap_grad_reduce=f)) for f in (False, True))
    assert not off.project.mapping.overlap_grad_reduce  # the saved flag is left as written
    assert _reduced(off) == pytest.approx(_reduced(on), rel=1e-12)
    assert _reduced(off) < off.stages[0].params * GRAD_BYTES / 2
    a, b = (simulate(_project(fsdp=True, overlap_grad_reduce=f)) for f in (False, True))
    assert a.iteration_time_s == pytest.approx(b.iteration_time_s, rel=1e-12)
    zero3 = simulate(_project(zero=3, overlap_param_gather=True, overlap_grad_reduce=False))
    assert a.time_breakdown_s["dp_comm"] < zero3.time_breakdown_s["dp_comm"]


def test_both_engines_agree_under_fsdp_without_the_flag():
    a, e = (simulate(_project(engine, fsdp=True, overlap_grad_reduce=False)) for engine in ("analytic", "event"))
    assert e.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-6)


def test_the_studio_shows_the_flag_idle_under_fsdp():
    assert overlap_reason("overlap_grad_reduce", _project(fsdp=True)) == OVERLAP_GRAD_FSDP_TIP
    assert overlap_reason("overlap_grad_reduce", _project(zero=3)) is None
