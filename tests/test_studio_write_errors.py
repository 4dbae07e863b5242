"""The studio's image writes are atomic and their OS errors readable: a screenshot that cannot be written
exits 2 naming the path; a canvas export leaves no temporary file, and one that cannot be written says
why; a CSV export into a folder holding other files is refused and leaves them alone."""

from __future__ import annotations

import os
from argparse import Namespace

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtGui import QImage  # noqa: E402
from tilewright.studio import app  # noqa: E402
from tilewright.studio.samples import wafer_project  # noqa: E402


@pytest.fixture(autouse=True)
def private_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_SETTINGS", str(tmp_path / "settings.ini"))


def test_a_screenshot_that_cannot_be_written_exits_2_naming_it(qapp, tmp_path, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    target = blocker / "shot.png"  # a folder inside a file
    ns = Namespace(
        project=None, run=False, screenshot=str(target), size="1280x800", presentation=False, allow_large=False
    )
    assert app.main(ns) == 2
    err = capsys.readouterr().err
    assert str(target) in err and "Traceback" not in err


def test_a_canvas_export_replaces_the_png_atomically_or_says_why(make_window, tmp_path):
    w = make_window(wafer_project())
    errors = []
    w.show_error = lambda _title, text: errors.append(text)
    png = tmp_path / "canvas.png"
    assert w.export(png)
    assert not QImage(str(png)).isNull()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "s.ini") == ["canvas.png"]  # no temp left
    blocked = tmp_path / "canvas.png" / "inside.png"  # a file where a folder should be
    assert not w.export(blocked)
    assert errors and str(blocked) in errors[0]


def test_a_csv_export_into_a_folder_with_other_files_is_refused(make_window, tmp_path, qtbot):
    from tests.studio_engine_double import FakeEngine

    w = make_window(wafer_project(), simulate=FakeEngine())
    with qtbot.waitSignal(w.runner.done, timeout=10_000):
        assert w.run_simulation()
    errors = []
    w.show_error = lambda _title, text: errors.append(text)
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    assert w.actions_.exports.export_csv(folder) is None
    assert errors and "notes.txt" in errors[0]
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
