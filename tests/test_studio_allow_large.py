"""Runs past the size limits in the studio: asked about (Run Anyway / Cancel), or started without asking
when Run ▸ Allow Large Runs is on — which ``tilewright studio --allow-large`` turns on."""

from __future__ import annotations

import os
from argparse import Namespace

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from tilewright.engine.cli.dispatch import build_parser  # noqa: E402
from tilewright.engine.io import save_project  # noqa: E402
from tilewright.engine.plan.budget import MAX_STEPS, estimate  # noqa: E402
from tilewright.studio import app  # noqa: E402

from tests.factories import small_project  # noqa: E402
from tests.studio_engine_double import FakeEngine  # noqa: E402


def too_many_steps():
    """A small system asked for more pipeline steps than the limit: refused from the IR alone."""
    project = small_project(global_batch=4 * MAX_STEPS)
    assert estimate(project).problems()
    return project


@pytest.fixture(autouse=True)
def private_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_SETTINGS", str(tmp_path / "settings.ini"))


def test_a_large_run_asks_and_cancel_keeps_it_from_starting(make_window):
    engine = FakeEngine()
    w = make_window(too_many_steps(), simulate=engine)
    asked = []
    w.ask_run_anyway = lambda problems: asked.append(problems) or False
    assert not w.run_simulation()
    assert asked and any("pipeline steps" in p for p in asked[0])
    assert not w.runner.running and engine.calls == []
    assert "size limits" in w.status.run_state.text()


def test_run_anyway_runs_it_past_the_limits(make_window, qtbot):
    engine = FakeEngine()
    w = make_window(too_many_steps(), simulate=engine)
    w.ask_run_anyway = lambda _problems: True
    with qtbot.waitSignal(w.runner.done, timeout=10_000):
        assert w.run_simulation()
    assert [c["project"] for c in engine.calls] == ["test"]  # the worker's own size check let it through
    assert w.runner.last_record is not None


def test_without_the_override_the_worker_still_refuses(make_window, qtbot):
    """The question is the window's; the worker checks again (a caller that skips the window is refused)."""
    engine = FakeEngine()
    w = make_window(too_many_steps(), simulate=engine)
    with qtbot.waitSignal(w.runner.done, timeout=10_000):
        assert w.runner.run(w.doc.project)
    assert engine.calls == [] and "pipeline steps" in w.runner.last_message


def test_the_menu_toggle_runs_without_asking(make_window, qtbot):
    engine = FakeEngine()
    w = make_window(too_many_steps(), simulate=engine)
    w.ask_run_anyway = lambda _problems: pytest.fail("asked although Allow Large Runs is on")
    toggle = w.actions_.allow_large
    assert toggle.isCheckable() and not toggle.isChecked()
    assert toggle in w.menuBar().actions()[3].menu().actions()  # Run ▸ Allow Large Runs
    toggle.trigger()
    assert w.allow_large
    with qtbot.waitSignal(w.runner.done, timeout=10_000):
        assert w.run_simulation()
    assert len(engine.calls) == 1


def test_studio_allow_large_flag(qapp, tmp_path):
    parsed = build_parser().parse_args(["studio", "p.json", "--allow-large"])
    assert parsed.allow_large
    project = tmp_path / "large.json"
    save_project(too_many_steps(), project)

    def studio(**flags) -> FakeEngine:
        engine = FakeEngine()
        ns = Namespace(
            project=str(project),
            run=True,
            screenshot=str(tmp_path / "s.png"),
            size="900x640",
            presentation=False,
            **flags,
        )
        assert app.main(ns, simulate=engine) == 0
        return engine

    assert studio(allow_large=True).calls  # ran, past the limits
    assert studio(allow_large=False).calls == []  # a scripted window does not ask: it does not run


def _too_many_devices(tmp_path):
    """A tiny file asking for a wafer of 1000 × 1000 tiles per die: drawing it alone would exhaust memory."""
    import json

    from tilewright.engine.io.presets import preset_path

    data = json.loads(preset_path("projects", "palm-wafer-t18b").read_text())
    data["hardware"]["children"][0]["children"][0].update(rows=1000, cols=1000)
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(data))
    return path


def test_a_project_too_large_to_draw_is_refused_at_start(qapp, tmp_path, capsys):
    path = _too_many_devices(tmp_path)
    ns = Namespace(
        project=str(path),
        run=False,
        screenshot=str(tmp_path / "s.png"),
        size="900x640",
        presentation=False,
        allow_large=False,
    )
    assert app.main(ns) == 2
    err = capsys.readouterr().err
    assert f"{path}: hardware:" in err and "devices to elaborate" in err and "--allow-large" in err
    assert not (tmp_path / "s.png").exists()


def test_file_open_refuses_a_project_too_large_to_draw_unless_allowed(make_window, tmp_path):
    path = _too_many_devices(tmp_path)
    w = make_window(small_project())
    errors, opened = [], []
    w.show_error = lambda _title, text: errors.append(text)
    assert not w.open_path(path)
    assert errors and str(path) in errors[0] and "devices to elaborate" in errors[0]
    assert w.doc.project.name == "test"
    w.open_project = lambda project, file_path=None: opened.append((project.name, file_path))  # not drawn here
    w.set_allow_large(True)
    assert w.open_path(path) and [f for _, f in opened] == [path]
