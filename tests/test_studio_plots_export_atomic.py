"""Plots exports replace their folder whole (like the CSV export): an export that fails half-way leaves
the earlier export complete (never plots of two runs), leaves no temporary folder, and a folder holding
other files is refused in a dialog that names them, without touching them. The breakdown bar's own PNG
is written atomically too."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtGui import QImage  # noqa: E402
from tilewright.studio import exporting  # noqa: E402
from tilewright.studio.samples import wafer_project  # noqa: E402

from tests.studio_engine_double import FakeEngine  # noqa: E402


@pytest.fixture(autouse=True)
def private_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_SETTINGS", str(tmp_path / "settings.ini"))


@pytest.fixture
def ran(make_window, qtbot):
    w = make_window(wafer_project(), simulate=FakeEngine())
    with qtbot.waitSignal(w.runner.done, timeout=10_000):
        assert w.run_simulation()
    w.errors = []
    w.show_error = lambda _title, text: w.errors.append(text)
    return w


def _contents(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_a_failed_plots_export_leaves_the_earlier_one_whole(ran, tmp_path, monkeypatch, fmt):
    folder = tmp_path / "plots"
    first = ran.actions_.exports.export_plots(fmt, folder)
    assert first and {p.name for p in first} == set(_contents(folder))
    before = _contents(folder)
    writer = "write_plot_png" if fmt == "png" else "write_plot_svg"
    real, calls = getattr(exporting, writer), []

    def fail_on_second(widget, path, **kw):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(widget, path, **kw)

    monkeypatch.setattr(exporting, writer, fail_on_second)
    assert ran.actions_.exports.export_plots(fmt, folder) is None
    assert len(calls) == 2 and ran.errors and "No space left" in ran.errors[0]
    assert _contents(folder) == before  # the earlier export, every file, not a mix
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_a_plots_folder_with_other_files_is_refused_in_a_dialog(ran, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    assert ran.actions_.exports.export_plots("png", folder) is None
    assert ran.errors and "notes.txt" in ran.errors[0] and str(folder) in ran.errors[0]
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


def test_svg_plots_do_not_replace_a_folder_of_png_plots(ran, tmp_path):
    folder = tmp_path / "plots"
    pngs = ran.actions_.exports.export_plots("png", folder)
    assert ran.actions_.exports.export_plots("svg", folder) is None
    assert ran.errors and "links.png" in ran.errors[0]
    assert sorted(_contents(folder)) == sorted(p.name for p in pngs)


def test_the_breakdown_png_replaces_the_old_file_atomically(ran, tmp_path, monkeypatch):
    bar = ran.results.breakdown
    assert bar.segments
    path = tmp_path / "bar.png"
    path.write_bytes(b"old")
    written = []
    with monkeypatch.context() as m:
        m.setattr("tilewright.engine.io.atomic.os.replace", lambda a, b: written.append((a, b)))
        bar.save_png(path)
    assert written and os.fspath(written[0][1]) == os.path.realpath(path)  # a finished temp file renamed over it
    assert path.read_bytes() == b"old"  # untouched until that rename
    size = bar.save_png(path)
    image = QImage(str(path))
    assert (image.width(), image.height()) == (size.width(), size.height())
