"""Atomic, stable JSON writes: a crash never leaves half a file, and diffs stay readable.

A save replaces the file's bytes and nothing else: the file keeps its permission bits (a shared 0664
project stays shared), a symlink stays a link (the file it names is written), and the temporary file of a
writer killed mid-save is removed by the next save of the same file (its name carries the writer's pid).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def dumps_stable(data: Any) -> str:
    """Sorted keys, two-space indent, trailing newline: the same data always gives the same bytes."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def _umask() -> int:
    """The process's umask, read without changing it (``os.umask`` sets it, racing other threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temps(target: Path) -> None:
    """Delete temporary files of earlier saves of ``target`` whose writer no longer runs (killed mid-save)."""
    for tmp in target.parent.glob(f".{target.name}.*.tmp"):
        parts = tmp.name[len(target.name) + 2 :].split(".")
        if parts and parts[0].isdigit() and not _alive(int(parts[0])):
            tmp.unlink(missing_ok=True)


def write_atomic(path: str | Path, text: str) -> None:
    """Write to a temporary file beside ``path`` (or beside the file a symlink ``path`` names), with the
    file's own permission bits, fsync it, then rename it over the file."""
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    remove_stale_temps(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass
