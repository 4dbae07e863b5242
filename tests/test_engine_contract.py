"""The engine contract: both engines run a plan with ``run(plan, *, progress, cancel) -> Result``, build it
in one place, honour the job protocol, and agree exactly when the event engine's contention is off."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tilewright.engine.engines import engine_for
from tilewright.engine.engines.analytic.engine import AnalyticEngine
from tilewright.engine.engines.event.engine import EventEngine
from tilewright.engine.ir.project import EngineKind, Project
from tilewright.engine.jobs import Cancelled
from tilewright.engine.simulate import make_plan, simulate

from tests.engine_cases import dgx, llama_inference, small_cluster, small_wafer

ENGINE = Path(__file__).resolve().parents[1] / "engine"


def _on(project: Project, engine: str, **run) -> Project:
    update = {"engine": EngineKind(engine), "contention": False} | run
    return project.model_copy(update={"run": project.run.model_copy(update=update)})


def _inference(pp: int, **mapping) -> Project:
    p = llama_inference()
    return p.model_copy(update={"mapping": p.mapping.model_copy(update={"tp": 2, "pp": pp} | mapping)})


AGREEMENT = {
    "1f1b": lambda: dgx(),
    "gpipe": lambda: dgx(schedule="gpipe"),
    "interleaved": lambda: dgx(tp=1, pp=4, dp=1, schedule="interleaved-1f1b", interleave=2),
    "full-recompute-zero": lambda: dgx(recompute="full", zero=1),
    "overlapped-reduction": lambda: dgx(recompute="selective", sequence_parallel=True, overlap_grad_reduce=True),
    "wafer-dram": small_wafer,
    "infer-pp1": lambda: _inference(1),
    "infer-pp2": lambda: _inference(2),
    "infer-pp4": lambda: _inference(4, tp=1),
}
PER_DEVICE = {"1f1b": lambda: dgx(), "interleaved": lambda: dgx(interleave=2), "cluster": small_cluster,
              "infer-pp2": lambda: _inference(2)}


def _assert_same(event, analytic) -> None:
    t = analytic.iteration_time_s
    assert event.iteration_time_s == pytest.approx(t, rel=1e-9)
    for k, v in analytic.time_breakdown_s.items():
        assert event.time_breakdown_s.get(k, 0.0) == pytest.approx(v, abs=1e-9 * t), k
    for name in ("ttft_s", "tpot_s", "model_flops_per_iteration", "devices", "samples_per_iteration"):
        expected = getattr(analytic, name)  # None: training has no time to first token
        assert getattr(event, name) == (expected if expected is None else pytest.approx(expected, rel=1e-9)), name
    assert event.peak_memory_bytes == pytest.approx(analytic.peak_memory_bytes, rel=1e-9)


@pytest.mark.parametrize("name", sorted(AGREEMENT))
def test_event_without_contention_equals_analytic(name):
    project = AGREEMENT[name]()
    event, analytic = simulate(_on(project, "event")), simulate(_on(project, "analytic"))
    assert (event.engine, analytic.engine) == ("event", "analytic")
    _assert_same(event, analytic)


@pytest.mark.parametrize("name", sorted(PER_DEVICE))
def test_per_device_event_without_contention_equals_analytic(name):
    project = PER_DEVICE[name]()
    event = simulate(_on(project, "event", aggregate=False))
    _assert_same(event, simulate(_on(project, "analytic")))


def test_one_result_constructor_in_the_engine():
    """Every ``Result`` the engine hands out comes from ``engines.result_builder``."""
    sites = [
        f"{path.relative_to(ENGINE)}:{n}"
        for path in sorted(ENGINE.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"(?<![\w.])Result\(", line)
    ]
    assert sites and all(s.startswith("engines/result_builder.py:") for s in sites) and len(sites) == 1, sites


def test_one_pipeline_recurrence():
    """The uncontended pipeline is resolved in one place; neither engine imports the other."""
    recurrences = [p for p in ENGINE.rglob("*.py") if "def run_table(" in p.read_text(encoding="utf-8")]
    assert [p.relative_to(ENGINE).as_posix() for p in recurrences] == ["plan/recurrence.py"]
    for path in (ENGINE / "engines" / "analytic").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "engines.event" not in text and "import simpy" not in text, path
    for path in (ENGINE / "engines" / "event").rglob("*.py"):
        assert "engines.analytic" not in path.read_text(encoding="utf-8"), path


@pytest.mark.parametrize("make", [dgx, lambda: _inference(2)], ids=["train", "infer"])
def test_engine_for_follows_the_project(make):
    project = make()
    assert isinstance(engine_for(_on(project, "analytic")), AnalyticEngine)
    event = engine_for(_on(project, "event", aggregate=False))
    assert isinstance(event, EventEngine) and not event.aggregate and not event.contention


@pytest.mark.parametrize("engine", ["event", "analytic"])
@pytest.mark.parametrize("make", [dgx, lambda: _inference(2)], ids=["train", "infer"])
def test_both_engines_report_progress_and_stop_when_cancelled(engine, make, monkeypatch):
    import tilewright.engine.engines.event.simulation as simulation

    monkeypatch.setattr(simulation, "CHECK_EVERY", 10)  # small runs: report often enough to see it
    project = _on(make(), engine)
    plan = make_plan(project)
    calls: list[tuple[float, str]] = []
    quiet = engine_for(project).run(plan)
    reported = engine_for(project).run(plan, progress=lambda f, text: calls.append((f, text)))
    assert calls and all(0.0 <= f <= 1.0 and isinstance(text, str) for f, text in calls)
    assert calls[-1][0] == 1.0 and [f for f, _ in calls] == sorted(f for f, _ in calls)
    assert reported.metrics_json() == quiet.metrics_json()  # watching a run does not change it
    asked = []

    def cancel_on_second_check() -> bool:  # after the run started: it stops between batches of work
        asked.append(True)
        return len(asked) > 1

    with pytest.raises(Cancelled):
        engine_for(project).run(make_plan(project), cancel=cancel_on_second_check)
    assert len(asked) == 2


def test_event_count_comes_from_the_engine():
    plan = make_plan(dgx())
    assert EventEngine().run(plan).events > 0
    assert AnalyticEngine().run(plan).events == 0
