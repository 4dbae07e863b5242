"""Atomic, stable writes: a crash never leaves half a file (or half a folder), and diffs stay readable.

A save replaces the file's bytes and nothing else: the file keeps its permission bits (a shared 0664
project stays shared), a symlink stays a link (the file it names is written), and the temporary file of a
writer killed mid-save is removed by the next save of the same file (its name carries the writer's pid).

A folder of files that belong together (a run's CSV export) is replaced whole: written into a sibling
temporary folder, then swapped in with one ``renameat2(RENAME_EXCHANGE)`` (Linux), so the folder always
holds either the old export or the new one, never a mix; the old one is then removed. Where the kernel or
file system cannot exchange, the old folder is renamed aside first and put back by the next write if the
writer died between the two renames.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tilewright.engine.errors import InputError, Problem


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


def _dead_writers_leftovers(target: Path, suffix: str) -> Iterator[Path]:
    """``.NAME.PID.*SUFFIX`` beside ``target`` whose writer PID no longer runs."""
    for tmp in target.parent.glob(f".{target.name}.*{suffix}"):
        parts = tmp.name[len(target.name) + 2 :].split(".")
        if parts and parts[0].isdigit() and not _alive(int(parts[0])):
            yield tmp


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def remove_stale_temps(target: Path) -> None:
    """Delete temporary files (or folders) of earlier writes of ``target`` whose writer no longer runs
    (killed mid-save)."""
    for tmp in _dead_writers_leftovers(target, ".tmp"):
        _remove(tmp)


def write_atomic(path: str | Path, text: str) -> None:
    """Write to a temporary file beside ``path`` (or beside the file a symlink ``path`` names), with the
    file's own permission bits, fsync it, then rename it over the file."""
    write_atomic_bytes(path, text.encode("utf-8"))


def write_atomic_bytes(path: str | Path, data: bytes) -> None:
    """``write_atomic`` for bytes (an image, say). A device, pipe or socket (``/dev/stdout``, ``/dev/null``,
    a FIFO) is written in place, since renaming over it would replace the device node with a file. An OS
    error names ``path`` as the user gave it (not the temporary file), so it can be reported as theirs."""
    with _naming(path):
        if _is_special(path):
            with open(path, "wb") as fh:
                fh.write(data)
            return
        _write_replacing(Path(os.path.realpath(path)), data)


def _is_special(path: str | Path) -> bool:
    """Whether ``path`` (through any symlinks) is there and neither a regular file nor a folder."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _write_replacing(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    remove_stale_temps(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)  # make the rename itself durable


@contextmanager
def _naming(path: str | Path) -> Iterator[None]:
    """Re-raise an ``OSError`` of writing ``path`` with ``path`` as its file name: a full disk raises from
    ``write`` with no name at all, and a read-only folder names the temporary file the user never chose."""
    try:
        yield
    except OSError as exc:
        if exc.filename == str(path) or exc.errno is None:
            raise
        raise type(exc)(exc.errno, exc.strerror or os.strerror(exc.errno), str(path)) from exc


def _fsync_dir(folder: Path) -> None:
    try:
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


# -- folders ----------------------------------------------------------------------------------------
AT_FDCWD = -100
RENAME_EXCHANGE = 2


def _load_renameat2() -> Any:
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError, TypeError):  # not Linux/glibc: the two-rename fallback
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _load_renameat2()


def exchange(a: Path, b: Path) -> bool:
    """Swap the names ``a`` and ``b`` in one atomic step; False when this system cannot (then nothing
    changed)."""
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def recover_folder(target: Path) -> None:
    """Undo what a writer killed mid-swap left: an old folder renamed aside while ``target`` is missing
    goes back; other leftovers of dead writers (temporary or old folders) are removed."""
    for old in _dead_writers_leftovers(target, ".old"):
        if not target.exists():
            os.rename(old, target)
        else:
            _remove(old)
    remove_stale_temps(target)


def _foreign_entries(target: Path, allowed: Collection[str]) -> list[str]:
    return sorted(n for n in os.listdir(target) if n not in allowed)


def check_replaceable_folder(path: str | Path, allowed: Collection[str]) -> None:
    """Raise ``InputError`` unless ``path`` is missing, or a folder holding nothing but ``allowed`` names
    (what ``atomic_folder`` may replace); callers check before long work, so it is not wasted."""
    target = Path(os.path.realpath(path))
    if not target.exists():
        return
    if not target.is_dir():
        raise InputError(str(path), Problem("", "is a file; name a folder"))
    foreign = _foreign_entries(target, allowed)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        reason = f"holds other files ({shown}); an export replaces the whole folder, so name a new or empty folder"
        raise InputError(str(path), Problem("", reason))


@contextmanager
def atomic_folder(path: str | Path, allowed: Collection[str]) -> Iterator[Path]:
    """Yield a new, empty temporary folder beside ``path``; when the block ends without an error it
    replaces ``path`` whole (see the module's docstring). Only a folder that is new, empty or holds
    nothing but ``allowed`` names (an earlier export) is replaced: a folder with anything else in it is
    refused (``InputError``), since replacing it would delete the user's other files."""
    target = Path(os.path.realpath(path))
    with _naming(path):
        target.parent.mkdir(parents=True, exist_ok=True)
        recover_folder(target)
    check_replaceable_folder(path, allowed)
    with _naming(path):
        mode = target.stat().st_mode & 0o7777 if target.exists() else 0o777 & ~_umask()
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent))
    try:
        with _naming(path):
            os.chmod(tmp, mode)
            yield tmp
            _fsync_dir(tmp)
            _swap_in(tmp, target)
    finally:
        _remove(tmp)  # after a swap it holds the old export; after an error the unfinished new one
    _fsync_dir(target.parent)


def _swap_in(new: Path, target: Path) -> None:
    """``new`` takes ``target``'s name; whatever ``target`` held ends up under ``new``'s name."""
    if not target.exists():
        os.rename(new, target)
        return
    if exchange(new, target):
        return
    aside = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.old"
    os.rename(target, aside)
    os.rename(new, target)
    os.rename(aside, new)  # removed with the temporary folder
