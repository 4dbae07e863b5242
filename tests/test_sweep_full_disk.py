"""A sweep on a full disk, end to end through the CLI: ``tilewright sweep`` exits 2 naming the CSV and the
reason (no traceback), and ``--resume`` — running the same command again — gives exactly the rows of an
uninterrupted sweep. The disk fills without root: the child process gets a file-size limit
(``RLIMIT_FSIZE``, with SIGXFSZ ignored, so a write past it is cut short and the next fails with EFBIG),
set half-way through the clean sweep's CSV; and ``/dev/full`` answers every write with ENOSPC."""

from __future__ import annotations

import csv
import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

from tilewright.engine.io import save_project

from tests.factories import small_project

ROOT = Path(__file__).resolve().parents[1]
SWEEP_TIMEOUT_S = 300


def _spec(tmp_path: Path) -> Path:
    save_project(small_project(), tmp_path / "base.json")
    spec = {
        "base": "base.json",
        "set": {"run.engine": "analytic"},
        "parameters": [
            {"path": "mapping.micro_batch", "values": [1, 2, 4]},
            {"path": "mapping.recompute", "values": ["none", "full"]},
        ],
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def _sweep(spec: Path, out: Path | str, file_limit: int | None = None) -> subprocess.CompletedProcess:
    def limit_file_size() -> None:  # runs in the child, before it starts the CLI
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tilewright.engine.cli",
            "sweep",
            str(spec),
            "--out",
            str(out),
            "--quiet",
            "--workers",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SWEEP_TIMEOUT_S,
        preexec_fn=limit_file_size if file_limit is not None else None,
    )


def _comparable(path: Path) -> list[dict[str, str]]:
    """The rows, in key order, without the one column that differs from run to run (wall time)."""
    with path.open(newline="", encoding="utf-8") as fh:
        rows = [{k: v for k, v in row.items() if k != "wall_time_s"} for row in csv.DictReader(fh)]
    return sorted(rows, key=lambda r: r["key"])


def test_a_full_disk_exits_2_naming_the_csv_and_resume_gives_the_uninterrupted_result(tmp_path):
    spec = _spec(tmp_path)
    clean = tmp_path / "clean.csv"
    done = _sweep(spec, clean)
    assert done.returncode == 0, done.stderr
    full_size = clean.stat().st_size

    out = tmp_path / "full.csv"
    limit = full_size // 2  # past the header, inside some row
    failed = _sweep(spec, out, file_limit=limit)
    assert failed.returncode == 2, failed.stderr
    assert f"{out}: cannot write the results: File too large" in failed.stderr
    assert "Traceback" not in failed.stderr
    assert out.stat().st_size == limit  # the disk "filled" inside a row: half a row is on disk
    assert not out.read_bytes().endswith(b"\n")

    resumed = _sweep(spec, out)
    assert resumed.returncode == 0, resumed.stderr
    assert _comparable(out) == _comparable(clean)


def test_a_sweep_into_dev_full_exits_2_naming_it(tmp_path):
    proc = _sweep(_spec(tmp_path), "/dev/full")
    assert proc.returncode == 2
    assert "/dev/full: cannot write the results: No space left on device" in proc.stderr
    assert "Traceback" not in proc.stderr
