"""A CSV export folder is replaced whole: never a mix of two runs, never a user's other files deleted, and
what a writer killed between two renames left is put right by the next export."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from tilewright.engine.errors import InputError
from tilewright.engine.io import atomic
from tilewright.engine.io.atomic import atomic_folder, recover_folder
from tilewright.engine.results.csv_export import CSV_FILES, write_csv
from tilewright.engine.simulate import simulate

from tests.engine_cases import dgx


def _files(folder) -> dict[str, str]:  # noqa: ANN001
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture(scope="module")
def results():
    return simulate(dgx()), simulate(dgx(tp=4, pp=2, dp=1))


@pytest.mark.parametrize("can_exchange", [True, False])
def test_an_export_replaces_the_earlier_one_whole(tmp_path, results, monkeypatch, can_exchange):
    if not can_exchange:  # a system without renameat2: the old folder is renamed aside, then removed
        monkeypatch.setattr(atomic, "exchange", lambda _a, _b: False)
    out = tmp_path / "csv"
    write_csv(results[0], out)
    first = _files(out)
    os.chmod(out, 0o750)
    paths = write_csv(results[1], out)
    assert [p.name for p in paths] == list(CSV_FILES) and all(p.parent == out for p in paths)
    assert _files(out) != first and sorted(_files(out)) == sorted(CSV_FILES)
    assert stat.S_IMODE(out.stat().st_mode) == 0o750  # the folder keeps its permission bits
    assert sorted(p.name for p in tmp_path.iterdir()) == ["csv"]  # no temporary or old folder left


def test_a_folder_with_other_files_is_refused_and_left_alone(tmp_path, results):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    with pytest.raises(InputError) as exc:
        write_csv(results[0], out)
    assert str(out) in str(exc.value) and "notes.txt" in str(exc.value)
    assert _files(out) == {"notes.txt": "my notes"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_an_error_while_writing_keeps_the_old_export(tmp_path, results):
    out = tmp_path / "csv"
    write_csv(results[0], out)
    before = _files(out)
    with pytest.raises(RuntimeError), atomic_folder(out, CSV_FILES) as tmp:
        (tmp / "metrics.csv").write_text("half")
        raise RuntimeError("disk full, say")
    assert _files(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["csv"]


def test_a_symlinked_folder_stays_a_link(tmp_path, results):
    real = tmp_path / "real"
    write_csv(results[0], real)
    link = tmp_path / "link"
    link.symlink_to(real)
    write_csv(results[1], link)
    assert link.is_symlink() and sorted(_files(real)) == sorted(CSV_FILES)


def test_a_writer_killed_between_the_two_renames_is_undone(tmp_path, results):
    """Without an atomic exchange a kill can fall after the old folder was renamed aside and before the
    new one took its name: the next export (or ``recover_folder``) puts the old one back."""
    out = tmp_path / "csv"
    write_csv(results[0], out)
    before = _files(out)
    pid = _dead_pid()
    aside = tmp_path / f".csv.{pid}.1234.old"
    os.rename(out, aside)
    unfinished = tmp_path / f".csv.{pid}.abcd.tmp"
    unfinished.mkdir()
    (unfinished / "metrics.csv").write_text("half")
    recover_folder(out)
    assert _files(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["csv"]
