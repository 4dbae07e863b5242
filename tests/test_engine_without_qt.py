"""The engine imports and works with Qt absent: a subprocess blocks PySide6/pyqtgraph and imports every module."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import importlib, importlib.abc, pkgutil, sys

    class BlockQt(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("PySide6", "shiboken6", "pyqtgraph", "PyQt5", "PyQt6"):
                raise ImportError(f"Qt is blocked in this test: {name}")
            return None

    sys.meta_path.insert(0, BlockQt())
    import engine
    count = 0
    for mod in pkgutil.walk_packages(engine.__path__, "engine."):
        importlib.import_module(mod.name)
        count += 1
    leaked = [m for m in sys.modules if m.split(".")[0] in ("PySide6", "pyqtgraph", "shiboken6")]
    assert not leaked, leaked
    print(count)
    """
)


def test_engine_imports_without_qt():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip()) >= 10


def test_cli_schema_runs_without_qt():
    code = SCRIPT.split("import engine")[0] + "from engine.cli import main\nraise SystemExit(main(['schema']))\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert '"Project"' in proc.stdout or '"hardware"' in proc.stdout
