"""Runs tests/open_large_checks.py (opening a large project never blocks the event loop) in a fresh
interpreter, as a studio session would be (see tests/test_studio_responsiveness.py for why); and checks
the opening flow's bookkeeping here: a newer open wins, closing stops the worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from tilewright.studio import opening  # noqa: E402
from tilewright.studio.samples import new_project, wafer_project  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_opening_a_large_project_never_blocks_the_event_loop():
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/open_large_checks.py", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "3 passed" in proc.stdout


def test_a_newer_open_wins_and_closing_stops_the_worker(make_window, qtbot, monkeypatch):
    monkeypatch.setattr(opening, "BACKGROUND_DEVICES", 0)  # every project opens through the worker
    w = make_window(new_project())
    first, second = wafer_project(), wafer_project().model_copy(update={"name": "second"})
    with qtbot.waitSignal(w.opened, timeout=60_000):
        w.open_project(first)
        overtaken = w.opening
        w.open_project(second)
    assert overtaken.cancelled.is_set()
    qtbot.wait(200)  # the first job's late answer, if any, must change nothing
    assert w.doc.project is second and w.opening is None and not w.busy.isVisible()
    w.open_project(first)
    job = w.opening
    assert job is not None
    w.close()
    assert job.cancelled.is_set() and w.opening is None
