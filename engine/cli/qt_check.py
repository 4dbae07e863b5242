"""Explain a failed Qt import in words a user can act on (missing system libraries on Debian/Ubuntu)."""

from __future__ import annotations

QT_DEBIAN_PACKAGES = "libegl1 libgl1 libxkbcommon0 libfontconfig1 libdbus-1-3 libglib2.0-0"


def explain_qt_import_error(exc: BaseException) -> str:
    text = str(exc)
    if "No module named" in text and "PySide6" in text:
        return "tilewright: PySide6 is not installed; run `make studio` (it installs the project into .venv)."
    return (
        f"tilewright: Qt could not load ({text}).\n"
        f"Qt needs these system libraries; on Debian/Ubuntu install them with:\n"
        f"  sudo apt-get install {QT_DEBIAN_PACKAGES}"
    )
