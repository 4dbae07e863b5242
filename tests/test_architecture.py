"""The layer table of ARCHITECTURE.md as import-linter contracts (pyproject.toml ``[tool.importlinter]``):
`make test` fails when a module imports across a layer it must not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lint_imports(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--no-cache", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_every_import_linter_contract_is_kept():
    proc = lint_imports()
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout and "kept" in proc.stdout


def test_the_contracts_catch_a_broken_layer(tmp_path):
    """The guard itself: a layer contract that the code breaks on purpose (the plan above the engines)
    must be reported broken, so a misconfigured root package cannot make every contract pass vacuously."""
    config = tmp_path / "contracts.toml"
    config.write_text(
        '[tool.importlinter]\nroot_packages = ["tilewright.engine"]\n\n'
        '[[tool.importlinter.contracts]]\nname = "inverted on purpose"\ntype = "layers"\n'
        'containers = ["tilewright.engine"]\nlayers = ["plan", "engines"]\n'
    )
    proc = lint_imports("--config", str(config))
    assert proc.returncode != 0 and "BROKEN" in proc.stdout
