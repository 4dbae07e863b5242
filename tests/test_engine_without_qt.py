"""The engine imports and works with Qt absent: a subprocess blocks PySide6, pyqtgraph and the studio, then
imports every module of ``tilewright.engine`` — and must have imported every module file under ``engine/``,
so a folder without an ``__init__.py`` (which ``walk_packages`` would skip) cannot hide a Qt import."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "engine"

BLOCK = textwrap.dedent(
    """
    import importlib, importlib.abc, pkgutil, sys

    class BlockQt(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("PySide6", "shiboken6", "pyqtgraph", "PyQt5", "PyQt6") or \\
                    name.startswith("tilewright.studio"):
                raise ImportError(f"Qt is blocked in this test: {name}")
            return None

    sys.meta_path.insert(0, BlockQt())
    """
)
IMPORT_ALL = textwrap.dedent(
    """
    import tilewright.engine
    names = ["tilewright.engine"]
    for mod in pkgutil.walk_packages(tilewright.engine.__path__, "tilewright.engine."):
        importlib.import_module(mod.name)
        names.append(mod.name)
    leaked = [m for m in sys.modules if m.split(".")[0] in ("PySide6", "pyqtgraph", "shiboken6")]
    assert not leaked, leaked
    print("\\n".join(names))
    """
)


def module_names_on_disk() -> set[str]:
    """Every module file under engine/, as the dotted name it installs under."""
    out = set()
    for path in ENGINE.rglob("*.py"):
        parts = path.relative_to(ENGINE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.add(".".join(("tilewright", "engine", *parts)))
    return out


def test_engine_imports_every_module_without_qt():
    proc = subprocess.run([sys.executable, "-c", BLOCK + IMPORT_ALL], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    imported = set(proc.stdout.split())
    on_disk = module_names_on_disk()
    assert len(on_disk) > 50
    assert on_disk == imported, f"not imported: {sorted(on_disk - imported)}"


def test_a_qt_import_anywhere_in_the_engine_is_caught(tmp_path):
    """The guard itself: a module that imports PySide6 makes the import-all script fail."""
    code = BLOCK + "import PySide6.QtCore\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "Qt is blocked" in proc.stderr


def test_cli_schema_runs_without_qt():
    code = BLOCK + "from tilewright.engine.cli import main\nraise SystemExit(main(['schema']))\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert '"Project"' in proc.stdout or '"hardware"' in proc.stdout
