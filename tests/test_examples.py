"""Every script in examples/ runs, offline, in a fresh interpreter, and prints what it promises (as
pyqtgraph's examples/test_examples.py does). A new example without an entry here fails the suite, so
each one states what its output must show."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# For each example: extra arguments (small sizes) and patterns its output must hold.
EXPECTED: dict[str, tuple[list[str], list[str]]] = {
    "simulate_preset.py": ([], [r"gpt3-dgx-a100: 64 devices, train on the analytic engine",
                               r"iteration time +\d+\.\d+ ms", r"MFU +\d+\.\d %", r"energy +\d+\.\d+ J"]),
    "edit_and_save.py": ([], [r"refused as expected: .*mapping\.tp", r"reads back equal",
                              r"tp 8 pp 4 dp 8 on 256 GPUs: \d+\.\d+ s per iteration"]),
    "parallelism_search.py": (["--devices", "16", "--global-batch", "32"],
                              [r"space [\d,]+ candidates", r"best: tp \d+ × pp \d+ × dp \d+ on \d+ devices",
                               r"re-simulated: \d+\.\d+ s"]),
    "sweep.py": (["--workers", "1"], [r"4 points run, 0 already in", r"on the Pareto front:\n  pp \d dp \d+: "]),
    "serving.py": (["--requests", "40"], [r"40 requests in", r"TTFT p50 \d+ ms",
                                          r"best rate meeting the SLO: (\d+\.\d|None)"]),
}


def test_every_example_is_checked():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name, tmp_path):
    args, patterns = EXPECTED[name]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=tmp_path,  # examples use the installed package, not the source tree
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    for pattern in patterns:
        assert re.search(pattern, proc.stdout), f"{name}: no {pattern!r} in:\n{proc.stdout[-3000:]}"
