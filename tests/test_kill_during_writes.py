"""kill -9 during a write never loses or mixes data: a process writing a project, a trace, a CSV export
folder, or a studio export (PNG plot, trace) over and over (tests/kill_writers.py) is killed at random
moments, several times; each time the target must be exactly the old version or the new one — for the CSV
folder, all four files of one run — and the next write must leave no temporary files behind."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KILLS = 5
EXTRA_KILLS = 15
READY_TIMEOUT_S = 120.0
TEMP_TIMEOUT_S = 30.0


def _content(path: Path) -> bytes | dict[str, bytes] | None:
    """A file's bytes, a folder's files by name, or None when missing."""
    if path.is_dir():
        return {p.name: p.read_bytes() for p in sorted(path.iterdir())}
    return path.read_bytes() if path.exists() else None


def _leftovers(folder: Path) -> list[str]:
    """Temporary files or folders of writes of the target (``.target….tmp`` / ``.old``)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".target"))


def _start(kind: str, folder: Path, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    return subprocess.Popen(
        [sys.executable, "-m", "tests.kill_writers", kind, str(folder), *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _wait_for(condition, timeout: float, proc: subprocess.Popen, what: str, poll_s: float = 0.01) -> None:  # noqa: ANN001
    end = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the writer exited before {what}: {proc.stderr.read().decode()[-2000:]}")
        if time.monotonic() > end:
            proc.kill()
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(poll_s)


def _kill_once(kind: str, folder: Path, rng: random.Random, mid_write: bool) -> bool:
    """Start the writer, kill it -9 at a random moment (``mid_write``: just after a temporary file of the
    target appears, so the kill lands inside a write), and say whether it left a temporary file."""
    (folder / "ready").unlink(missing_ok=True)
    proc = _start(kind, folder)
    try:
        _wait_for((folder / "ready").exists, READY_TIMEOUT_S, proc, "its first writes")
        if mid_write:
            _wait_for(lambda: bool(_leftovers(folder)), TEMP_TIMEOUT_S, proc, "a write in progress", poll_s=0.0)
            time.sleep(rng.choice([0.0, rng.uniform(0.0, 0.01)]))
        else:
            time.sleep(rng.uniform(0.0, 0.3))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    return bool(_leftovers(folder))


@pytest.mark.parametrize("kind", ["project", "trace", "csv", "studio-png", "studio-trace"])
def test_kill_9_during_writes_leaves_old_or_new_and_no_temp_files(tmp_path, kind):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    suffix = {"project": ".json", "trace": ".json", "csv": "", "studio-png": ".png", "studio-trace": ".json"}[kind]
    target = tmp_path / f"target{suffix}"
    left_temp = 0
    i = 0
    # KILLS kills at random moments; then, should none of them have landed inside a write (a small write can
    # finish between seeing its temporary file and the signal arriving on a busy machine), more kills aimed at
    # writes in progress, up to EXTRA_KILLS, so that the test always proves something.
    while i < KILLS or (left_temp == 0 and i < KILLS + EXTRA_KILLS):
        left_temp += _kill_once(kind, tmp_path, rng, mid_write=i == 0 or i >= KILLS or rng.random() < 0.6)
        old, new = _content(tmp_path / f"ref-A{suffix}"), _content(tmp_path / f"ref-B{suffix}")
        assert old != new and old and new
        got = _content(target)
        assert got in (old, new), f"kill {i + 1} (seed {seed}): the target is neither version, or a mix of both"
        i += 1
    # The kills did land inside writes (else this test would prove nothing) ...
    assert left_temp >= 1, f"seed {seed}: no kill hit a write in progress"
    # ... and the next write cleans up what they left.
    proc = _start(kind, tmp_path, "--once")
    _, err = proc.communicate(timeout=READY_TIMEOUT_S)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert _leftovers(tmp_path) == []
    assert _content(target) == _content(tmp_path / f"ref-B{suffix}")
