"""The studio's layers, read from the source: the non-UI modules (app aside, which opens the window) never
import ``studio.ui``, and ``studio.model`` imports no Qt at all — so runs, workers and the data they
prepare can be used and tested without widgets."""

from __future__ import annotations

import ast
from pathlib import Path

STUDIO = Path(__file__).resolve().parents[1] / "studio"
QT = ("PySide6", "shiboken6", "pyqtgraph")


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_non_ui_studio_modules_never_import_the_ui():
    files = [p for p in [*STUDIO.glob("*.py"), *(STUDIO / "model").glob("*.py")] if p.name != "app.py"]
    assert len(files) > 20 and any(p.name == "run_controller.py" for p in files)
    offenders = {p.name: sorted(m for m in imported(p) if m.startswith("tilewright.studio.ui")) for p in files}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_studio_model_is_qt_free():
    files = sorted((STUDIO / "model").glob("*.py"))
    assert {p.stem for p in files} >= {"run_record", "metrics", "gantt_data", "palette"}
    offenders = {p.name: sorted(m for m in imported(p) if m.split(".")[0] in QT) for p in files}
    assert {k: v for k, v in offenders.items() if v} == {}
