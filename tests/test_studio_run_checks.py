"""Run checks the project as ``tilewright run`` does (``check_project``): a project with problems is not
simulated, and the problems are shown. The status bar listed them, yet the main Run used to simulate
anyway (only the size limits were checked)."""

from __future__ import annotations

import html
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from tilewright.engine.io.presets import load_project_preset  # noqa: E402
from tilewright.engine.plan.checks import check_project  # noqa: E402
from tilewright.engine.plan.context_length import model_context  # noqa: E402

from tests.studio_engine_double import FakeEngine  # noqa: E402

H100 = "llama2-70b-h100-inference"


def _past_context():
    project = load_project_preset(H100)
    context, _field = model_context(project.workload)
    inference = project.run.inference.model_copy(update={"prompt_tokens": context, "output_tokens": 200})
    return project.model_copy(update={"run": project.run.model_copy(update={"inference": inference})})


def test_a_project_with_problems_is_not_run_and_its_problems_are_shown(make_window, qtbot):
    project = _past_context()
    problems = check_project(project)
    assert problems  # the case at hand: the status bar lists this
    engine = FakeEngine()
    w = make_window(project, simulate=engine)
    with qtbot.waitSignal(w.runner.done, timeout=10_000):
        w.run_simulation()
    assert engine.calls == []  # never simulated
    text = w.results.text()
    assert "Not run: the project has problems" in text and "The run failed" not in text
    for p in problems:
        assert html.escape(str(p)) in text
    assert w.status.run_state.text() == f"run not started: the project has {len(problems)} problem" + (
        "s" if len(problems) > 1 else "")
    assert w.actions_.run.isEnabled()


def test_a_consistent_project_still_runs(make_window, qtbot):
    project = load_project_preset(H100)
    assert check_project(project) == []
    engine = FakeEngine()
    w = make_window(project, simulate=engine)
    with qtbot.waitSignal(w.runner.done, timeout=10_000):
        w.run_simulation()
    assert [c["project"] for c in engine.calls] == [project.name]
