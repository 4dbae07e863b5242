"""Opening a large project: its device graph is elaborated on a worker, never on the GUI thread, and the
opening flow's bookkeeping holds (a newer open wins, closing stops the worker). How long the event loop
waits meanwhile is a speed target: ``benchmarks/bench_responsiveness.py`` runs tests/open_large_checks.py."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from tilewright.engine.io import load_project  # noqa: E402
from tilewright.studio import opening  # noqa: E402
from tilewright.studio.samples import new_project, wafer_project  # noqa: E402


def test_a_large_project_is_elaborated_off_the_gui_thread(make_window, qtbot, monkeypatch, tmp_path):
    """Opening a project past ``BACKGROUND_DEVICES``: every elaboration of its hardware happens on a worker
    thread (the GUI thread only builds the canvas items from the caches), behind a busy indicator. How long
    the event loop then waits is measured by ``benchmarks/bench_responsiveness.py`` (tests/open_large_checks.py),
    not here: speed targets live in benchmarks."""
    import threading

    from tilewright.studio import mapping as studio_mapping

    calls: list[tuple[int, bool]] = []
    real = studio_mapping.elaborate

    def recording(hardware, devices_needed=None):  # noqa: ANN001, ANN202
        calls.append((hardware.device_count(), threading.current_thread() is threading.main_thread()))
        return real(hardware, devices_needed=devices_needed)

    monkeypatch.setattr(studio_mapping, "elaborate", recording)
    from tests.open_large_checks import _wafer_file

    path = _wafer_file(tmp_path, 40)  # palm-wafer with one die of 40 × 40 tiles: 1,600 devices
    w = make_window(new_project())
    assert opening.opens_in_background(load_project(path))
    with qtbot.waitSignal(w.opened, timeout=120_000):
        assert w.open_path(path)
        assert w.opening is not None and w.busy.isVisible() and w.doc.read_only
    big = [on_gui for devices, on_gui in calls if devices > opening.BACKGROUND_DEVICES]
    assert big and not any(big)  # elaborated, and never on the GUI thread
    assert w.doc.project.name == "large wafer" and not w.busy.isVisible() and w.canvas.scene.grids


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
