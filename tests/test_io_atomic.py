"""Saves change a file's bytes and nothing else: permission bits, symlinks and stray temp files."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from tilewright.engine.io.atomic import write_atomic


def test_a_save_keeps_the_files_permission_bits(tmp_path):
    path = tmp_path / "shared.json"
    path.write_text("{}\n")
    os.chmod(path, 0o664)
    write_atomic(path, '{"a": 1}\n')
    assert stat.S_IMODE(path.stat().st_mode) == 0o664
    assert path.read_text() == '{"a": 1}\n'


def test_a_new_file_gets_the_umask_default_not_0600(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "new.json", "{}\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o644


def test_a_save_through_a_symlink_writes_the_file_it_names(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("{}\n")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_atomic(link, '{"b": 2}\n')
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == '{"b": 2}\n'


def test_the_temp_file_of_a_killed_writer_is_removed_by_the_next_save(tmp_path):
    path = tmp_path / "p.json"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".p.json.{dead.pid}.abc123.tmp"
    stale.write_bytes(b"x" * 1000)
    live = tmp_path / f".p.json.{os.getpid()}.def456.tmp"  # a save in flight in a running process
    live.write_bytes(b"y")
    write_atomic(path, "{}\n")
    assert not stale.exists() and live.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["p.json", live.name])


def test_a_failed_save_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    path.write_text("old\n")

    def boom(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        write_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]
