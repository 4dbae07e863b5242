"""Which peak a data type runs at when the device has no units of its own for it."""

from __future__ import annotations

from tilewright.engine.ir import Compute
from tilewright.engine.simulate import make_plan

from tests.engine_cases import dgx


def test_fp8_without_fp8_units_runs_as_fp16_not_on_integer_units():
    c = Compute(peak_flops={"int8": 600e12, "fp16": 300e12, "fp32": 20e12})
    assert c.peak("fp8") == 300e12
    assert c.peak("int8") == 600e12
    assert c.peak("bf16") == 20e12  # no bf16 or tf32: the next wider type the device has
    assert Compute(peak_flops={"fp8": 900e12, "fp16": 300e12}).peak("fp8") == 900e12


def test_a_run_in_a_type_the_device_lacks_says_so():
    project = dgx(tp=1, pp=1, dp=1)
    data = project.model_dump()
    data["run"]["dtype"] = "fp8"
    plan = make_plan(type(project).model_validate(data))
    assert any("no fp8 peak" in n for n in plan.notes)
    native = make_plan(dgx(tp=1, pp=1, dp=1))
    assert not any("peak" in n for n in native.notes)
