"""Opening another project after a run: the window shows nothing of the old project's run as if it were
the new one's. Its headline, links, memory, the canvas's time span, the status bar's "last run" and the
result exports go back to "no run yet"; a run of the old project still going is cancelled, so its result
never lands on the new project. The Runs tab keeps its history."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.io import load_project  # noqa: E402
from tilewright.studio.model.run_record import prepare_record  # noqa: E402
from tilewright.studio.ui.results.synthetic import tiny_result  # noqa: E402

from tests.studio_engine_double import FakeEngine  # noqa: E402

CHIPLET = "presets/projects/chiplet-bert-large.json"
TPU = "presets/projects/tpu-v4-llama2-7b.json"


@pytest.fixture
def ran(make_window, qtbot):
    """A window on the chiplet preset after a (made-up) run that has links, memory and a 10 s iteration."""
    project = load_project(CHIPLET)
    engine = FakeEngine(result=tiny_result())
    window = make_window(project, size=(1280, 720), persist=False, simulate=engine)
    with qtbot.waitSignal(window.runner.done, timeout=10_000):
        assert window.run_simulation()
    window.results.flush()
    return window, engine


def test_opening_another_project_forgets_the_shown_run(ran, qtbot):
    w, _engine = ran
    exports = w.actions_.exports
    assert "tiny" in w.results.headline.text() and w.results.links.model.rowCount() == 2
    assert all(a.isEnabled() for a in exports.result_actions)
    assert w.canvas.demo.time_label.text() == "t = 0 s of 10 s"
    assert w.status.run_state.text().startswith("last run: 10 s per iteration")
    assert w.open_path(TPU)
    assert w.doc.project.name == load_project(TPU).name
    assert w.results.record is None and w.results.headline.text() == ""
    assert w.results.links.model.rowCount() == 0 and w.results.links.curves == []
    assert w.results.memory.tracks == [] and w.results.gantt.data is None
    assert w.canvas.overlay.result is None and w.canvas.demo.time_label.text() == "no run yet (F5)"
    assert w.status.run_state.text() == "no run yet"
    assert not any(a.isEnabled() for a in exports.result_actions)
    assert exports.export_csv("/nonexistent/never") is None  # "run the project first", nothing written
    assert len(w.results.history) == 1  # the Runs tab still compares with the earlier project's run


def test_a_run_of_the_old_project_is_cancelled_and_never_shown(make_window, qtbot):
    engine = FakeEngine(result=tiny_result(), steps=2000, step_s=0.005)  # 10 s unless cancelled
    w = make_window(load_project(CHIPLET), size=(1280, 720), persist=False, simulate=engine)
    with qtbot.waitSignal(w.runner.progress, timeout=10_000, check_params_cb=lambda f, _p: f > 0):
        assert w.run_simulation()
    job = w.runner.job
    assert w.open_path(TPU)
    assert w.runner.job is None and job.cancelled.is_set()  # the old project's run stops at the engine's next check
    qtbot.waitUntil(lambda: job.ended_at is not None, timeout=5000)
    qtbot.wait(50)
    assert w.runner.last_record is None and w.results.record is None and w.canvas.overlay.result is None
    assert w.status.run_state.text() == "no run yet" and w.actions_.run.isEnabled()
    engine.steps = 0
    with qtbot.waitSignal(w.runner.done, timeout=10_000):  # the new project runs as usual
        assert w.run_simulation()
    assert engine.calls[-1]["project"] == w.doc.project.name
    assert w.results.record is not None and w.canvas.overlay.result is w.results.record.result


def test_an_out_of_memory_run_times_itself_in_the_run_table(make_window):
    """The studio's wall time is a row of the Run table, not of the OUT OF MEMORY table put first."""
    project = load_project(CHIPLET)
    w = make_window(project, size=(1280, 720), persist=False)
    result = tiny_result()
    assert result.oom is not None
    w.results.show_record(prepare_record(project, result, 0.5))
    w.results.show_result(result, 0.5)
    oom_table = w.results.labels[0].text()
    run_table = "".join(label.text() for label in w.results.labels
                        if ">Run<" in label.text() or ">Run, continued<" in label.text())
    assert "OUT OF MEMORY" in oom_table and "run took" not in oom_table
    assert "iteration time" in run_table and "run took (studio)</td><td align='right'>500 ms" in run_table
