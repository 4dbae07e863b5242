"""Writes onto targets that are not plain files, and OS errors that name the user's path: a device, a FIFO
or ``/dev/stdout`` is written in place (renaming over it would replace the device node with a file); a full
disk or a read-only folder raises naming the path the user gave, never the temporary file (or nothing)."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import threading

import pytest
from tilewright.engine.cli import main
from tilewright.engine.io import atomic
from tilewright.engine.io.atomic import write_atomic


def test_a_fifo_is_written_in_place_not_replaced_by_a_file(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_atomic(fifo, "through the pipe\n")
    reader.join(10)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert got == [b"through the pipe\n"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_a_symlink_to_a_fifo_writes_the_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "out.json"
    link.symlink_to(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_atomic(link, "x")
    reader.join(10)
    assert link.is_symlink() and stat.S_ISFIFO(os.stat(fifo).st_mode) and got == [b"x"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_dev_full_raises_enospc_naming_it_and_stays_a_device(tmp_path):
    # a writer that renamed over /dev/full would replace the machine's device node (as root): try a
    # special file of our own first, and touch /dev/full only when that one was written in place
    probe = tmp_path / "null"
    os.symlink("/dev/null", probe)
    if atomic._is_special(probe) is not True:
        pytest.fail("special files are not recognised; not risking /dev/full")
    with pytest.raises(OSError) as info:
        write_atomic("/dev/full", "x" * 100_000)
    assert info.value.errno == errno.ENOSPC and info.value.filename == "/dev/full"
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_full_disk_names_the_path_the_user_gave(tmp_path, monkeypatch):
    def no_space(_fd):
        raise OSError(errno.ENOSPC, "No space left on device")  # as write/fsync raise it: no file name

    monkeypatch.setattr(atomic.os, "fsync", no_space)
    target = tmp_path / "out.json"
    with pytest.raises(OSError) as info:
        write_atomic(target, "{}")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(target)
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_folder_names_the_target_not_the_temp_file(tmp_path, monkeypatch):
    def read_only(*_a, dir=None, **_k):  # noqa: A002 - mkstemp's own keyword
        raise OSError(errno.EROFS, "Read-only file system", os.path.join(dir, ".out.json.123.abc.tmp"))

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with pytest.raises(OSError) as info:
        write_atomic(tmp_path / "out.json", "{}")
    assert info.value.filename == str(tmp_path / "out.json")


def test_run_onto_a_full_disk_exits_2_with_one_line_naming_the_trace(tmp_path, capsys, monkeypatch):
    def no_space(_fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", no_space)
    trace = tmp_path / "t.json"
    assert main(["run", "hypar-vgg-a", "--engine", "analytic", "--trace", str(trace)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"{trace}: No space left on device"


def test_a_csv_export_onto_a_full_disk_names_the_folder(tmp_path, capsys, monkeypatch):
    def no_space(_fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", no_space)
    folder = tmp_path / "csv"
    assert main(["run", "hypar-vgg-a", "--engine", "analytic", "--csv", str(folder)]) == 2
    assert capsys.readouterr().err.strip() == f"{folder}: No space left on device"
    assert [p.name for p in tmp_path.iterdir()] == []
