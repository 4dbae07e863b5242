"""Inference on the event engine: prefill and decode steps through the pipeline as simulated passes."""

from __future__ import annotations

import numpy as np
import pytest
from tilewright.engine.ir.project import EngineKind
from tilewright.engine.plan.inference_phases import inference_phases
from tilewright.engine.simulate import make_plan, simulate

from tests.engine_cases import llama_inference


def _project(pp: int = 1, contention: bool = True, engine: str = "event"):
    p = llama_inference()
    mapping = p.mapping.model_copy(update={"tp": 2, "pp": pp})
    run = p.run.model_copy(update={"contention": contention, "engine": EngineKind(engine)})
    return p.model_copy(update={"mapping": mapping, "run": run})


@pytest.mark.parametrize("pp", [1, 2])
def test_event_inference_equals_analytic_without_contention(pp):
    event = simulate(_project(pp, contention=False))
    analytic = simulate(_project(pp, engine="analytic"))
    assert event.engine == "event" and analytic.engine == "analytic"
    for name in ("iteration_time_s", "ttft_s", "tpot_s"):
        a, b = getattr(event, name), getattr(analytic, name)
        assert abs(a - b) <= 1e-9 * b, name
    assert event.events > 0


def test_pipelined_inference_keeps_micro_batches_in_flight():
    plan = make_plan(_project(pp=2))
    phases = inference_phases(plan)
    assert phases.micro_batches == 2 and phases.micro_batch * 2 == phases.batch
    result = simulate(_project(pp=2))
    # both stages work at once at some moment: stage 1's prefill of micro-batch 0 overlaps stage 0's of 1
    tl = result.timeline
    a = tl.arrays()
    busy = []
    for lane in range(2):
        rows = a["lane"] == lane
        busy.append(list(zip(a["start"][rows], a["start"][rows] + a["dur"][rows], strict=True)))
    overlap = any(s0 < e1 and s1 < e0 for s0, e0 in busy[0] for s1, e1 in busy[1])
    assert overlap
    # the request ends with the last stage's last decode step, and time splits into its parts
    assert result.ttft_s < result.iteration_time_s
    assert abs(sum(result.time_breakdown_s.values()) - result.iteration_time_s) <= 1e-9 * result.iteration_time_s


def _pages(project, tokens: int):
    inference = project.run.inference.model_copy(update={"kv_block_tokens": tokens})
    return project.model_copy(update={"run": project.run.model_copy(update={"inference": inference})})


def test_kv_cache_grows_token_by_token_to_the_full_cache():
    project = _pages(_project(pp=1), 1)  # one-token pages: the cache grows with every token written
    result = simulate(project)
    analytic = simulate(_pages(_project(pp=1, engine="analytic"), 1))
    track = result.memory[0]
    kv = np.asarray(track.by_category["kv_cache"])
    assert np.all(np.diff(kv) >= 0)
    inf = project.run.inference
    assert len(np.unique(kv[kv > 0])) == inf.output_tokens  # the prompt at the prefill, then one per step
    assert kv[-1] == pytest.approx(analytic.memory[0].by_category["kv_cache"][-1], rel=1e-12)
    assert result.memory_breakdown_bytes["kv_cache"] == pytest.approx(kv[-1], rel=1e-12)


def test_every_decode_step_is_on_the_timeline():
    project = _project(pp=1)
    result = simulate(project)
    labels = set(result.timeline.labels)
    n = project.run.inference.output_tokens
    assert any("prefill" in s for s in labels)
    assert any(s.endswith(f"decode token {n}") or s == f"decode token {n}" for s in labels)
    assert not any(s.endswith(f"decode token {n + 1}") for s in labels)


def test_decode_time_after_prefill_is_tpot_times_tokens():
    project = _project(pp=2)
    result = simulate(project)
    n = project.run.inference.output_tokens
    assert result.tpot_s > 0
    # TTFT is the prefill's end; the rest of the request is its n − 1 decode steps
    assert result.ttft_s + (n - 1) * result.tpot_s == pytest.approx(result.iteration_time_s, rel=1e-12)


def _batch(project, batch: int):
    inference = project.run.inference.model_copy(update={"batch": batch})
    return project.model_copy(update={"run": project.run.model_copy(update={"inference": inference})})


def test_one_sequence_decodes_no_slower_than_several():
    """A fixed per-kernel cost is paid once, not once per padded tile row (a batch-1 GEMM once cost more
    than a batch-8 one)."""
    one, four = simulate(_batch(_project(), 1)), simulate(_batch(_project(), 4))
    assert one.tpot_s <= four.tpot_s
    assert one.ttft_s <= four.ttft_s


def test_an_encoder_answers_in_one_pass():
    from tilewright.engine.io.presets import load_system
    from tilewright.engine.ir import BertSpec, Mapping, Project, RunSettings

    bert = BertSpec(name="bert-test", layers=4, hidden=512, heads=8, seq_len=256)
    project = Project(name="bert", hardware=load_system("dgx-a100"), workload=bert, mapping=Mapping(tp=2),
                      run=RunSettings(mode="infer", inference={"prompt_tokens": 128, "output_tokens": 16, "batch": 2}))
    result = simulate(project)
    assert result.tpot_s is None  # no output token after the first
    assert result.ttft_s == result.iteration_time_s > 0
    assert result.memory_breakdown_bytes["kv_cache"] == 0.0
    assert not any("decode" in s for s in result.timeline.labels)
