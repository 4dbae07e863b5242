"""Icons shipped as ``tilewright.icons`` package data, loaded once and cached."""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from pathlib import Path

from PySide6.QtGui import QIcon


def icons_dir() -> Path:
    """The ``tilewright.icons`` package data (the repository's ``icons/`` in an editable install)."""
    return Path(str(files("tilewright.icons")))


def icon_path(name: str) -> Path:
    return icons_dir() / f"{name}.svg"


@cache
def icon(name: str) -> QIcon:
    """The icon ``icons/<name>.svg``; a missing file gives an empty icon rather than an error, so a
    renamed icon degrades to text instead of stopping the studio."""
    path = icon_path(name)
    return QIcon(str(path)) if path.is_file() else QIcon()


def kind_icon(kind: str) -> QIcon:
    """One icon per component kind; kinds without their own drawing share the chip's."""
    return icon(f"kind-{kind}") if icon_path(f"kind-{kind}").is_file() else icon("kind-chip")
