"""A studio process that used the clipboard must exit cleanly (PySide6 crashed at exit when the
clipboard held a Python-made QMimeData)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    from PySide6.QtWidgets import QApplication
    app = QApplication([])
    from tilewright.studio.ui.clipboard import copy_components, pasted_components
    from tests.factories import gpu
    copy_components([gpu()])
    assert pasted_components()[0].name == "gpu"
    """
)


def test_process_exits_cleanly_after_copy():
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
