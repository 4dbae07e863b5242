"""Where the studio keeps window layout and recent files.

``TILEWRIGHT_SETTINGS`` points at an INI file instead of the user's settings, so tests and scripted
screenshots never touch (or depend on) a real user's layout.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QSettings

ORGANISATION = "Tilewright"
APPLICATION = "Tilewright Studio"
MAX_RECENT = 8


def make_settings() -> QSettings:
    override = os.environ.get("TILEWRIGHT_SETTINGS")
    if override:
        return QSettings(override, QSettings.Format.IniFormat)
    return QSettings(ORGANISATION, APPLICATION)


def recent_files(settings: QSettings) -> list[str]:
    value = settings.value("recentFiles", [])
    if isinstance(value, str):  # QSettings returns a bare string for a one-element list
        value = [value]
    return [str(v) for v in (value or []) if v]


def add_recent_file(settings: QSettings, path: Path) -> list[str]:
    text = str(Path(path).resolve())
    files = [text, *(f for f in recent_files(settings) if f != text)][:MAX_RECENT]
    settings.setValue("recentFiles", files)
    return files
