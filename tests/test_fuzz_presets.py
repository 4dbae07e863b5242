"""A fuzz corpus of mutated preset projects (huge counts, wrong types, missing parts) in CI: every mutant
exits 0, 2 or 3 — never 1 — within 60 s and under 2 GiB, each measured on its own forked process."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("fuzz_presets.py")


def test_mutated_presets_keep_the_exit_code_contract():
    proc = subprocess.run([sys.executable, str(SCRIPT), "400", "--seed", "11", "--seconds-each", "60"],
                          capture_output=True, text=True, timeout=900)
    broken = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and not broken, "\n".join(json.dumps(b) for b in broken[:10]) + proc.stderr[-2000:]
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert peak_kib < 2 * 1024 * 1024, f"{peak_kib / 1024:.0f} MiB"
