"""The serving runtime's host work per iteration (``Compute.runtime_step_s``): the device waits for it once
per prefill and once per decode step, in ``run`` and in the serving simulator alike."""

from __future__ import annotations

import pytest
from tilewright.engine.ir import Project
from tilewright.engine.serving import ServingConfig, simulate_serving
from tilewright.engine.simulate import simulate

from tests.engine_cases import llama_inference

STEP = 3e-4


def _with_step(seconds: float, pp: int = 1, engine: str = "analytic") -> Project:
    data = llama_inference().model_dump(mode="json")
    data["run"] |= {"engine": engine, "contention": False}
    data["mapping"] |= {"pp": pp, "tp": 4 // pp}

    def walk(c: dict) -> None:
        if c.get("compute"):
            c["compute"]["runtime_step_s"] = seconds
        for ch in c.get("children", []):
            walk(ch)

    walk(data["hardware"])
    return Project.model_validate(data)


@pytest.mark.parametrize("engine", ["analytic", "event"])
def test_each_iteration_waits_once_for_the_runtime(engine):
    """TTFT grows by one step (the prefill iteration), TPOT by one step (one per decode step), and the
    whole request by output_tokens steps."""
    base = simulate(_with_step(0.0, engine=engine)).metrics_json()
    slow = simulate(_with_step(STEP, engine=engine)).metrics_json()
    assert slow["ttft_s"] - base["ttft_s"] == pytest.approx(STEP, rel=1e-6)
    assert slow["tpot_s"] - base["tpot_s"] == pytest.approx(STEP, rel=1e-6)
    outputs = llama_inference().run.inference.output_tokens
    assert slow["e2e_s"] - base["e2e_s"] == pytest.approx(outputs * STEP, rel=1e-6)
    # the breakdown says where it went: the device idle for the host, not a memory stall
    waited = slow["time_breakdown_s"]["host_wait"] - base["time_breakdown_s"]["host_wait"]
    assert waited == pytest.approx(outputs * STEP, rel=1e-6)
    assert slow["time_breakdown_s"]["memory_stall"] == pytest.approx(base["time_breakdown_s"]["memory_stall"], rel=1e-9)


def test_with_a_pipeline_only_the_first_stage_pays_it():
    """pp 2, one micro-batch: the step's wait sits on the first stage only, so a decode step grows by it once."""
    data = _with_step(0.0, pp=2).model_dump(mode="json")
    data["run"]["inference"]["batch"] = 1
    base = simulate(Project.model_validate(data)).metrics_json()
    data = _with_step(STEP, pp=2).model_dump(mode="json")
    data["run"]["inference"]["batch"] = 1
    slow = simulate(Project.model_validate(data)).metrics_json()
    assert slow["tpot_s"] - base["tpot_s"] == pytest.approx(STEP, rel=1e-6)


def test_serving_pays_it_every_iteration_as_run_does():
    project = _with_step(STEP)
    data = project.model_dump(mode="json")
    data["run"]["inference"]["batch"] = 1
    project = Project.model_validate(data)
    single = simulate(project).metrics_json()
    prompt = project.run.inference.prompt_tokens
    result = simulate_serving(project, ServingConfig(rate=1e-3, count=2, chunk=prompt))
    for r in result.records:
        assert r.ttft_s == pytest.approx(single["ttft_s"], rel=1e-9)
        assert r.tpot_s == pytest.approx(single["tpot_s"], rel=1e-6)
    none = simulate_serving(_with_step(0.0).model_copy(update={"run": project.run}), ServingConfig(rate=1e-3, count=2,
                                                                                                   chunk=prompt))
    assert result.records[0].ttft_s - none.records[0].ttft_s == pytest.approx(STEP, rel=1e-6)
