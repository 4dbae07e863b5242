"""What every command shares: the name errors cite for flags, and printing a result as text or JSON."""

from __future__ import annotations

from typing import Any

from tilewright.engine.errors import InputError, Problem
from tilewright.engine.io.json_file import dumps_strict

COMMAND_LINE = "command line"


def print_result(data: dict[str, Any], as_json: bool, text: str) -> None:
    """One JSON object on stdout with ``--json`` (sorted keys, so outputs diff cleanly), else the text."""
    print(dumps_strict(data, sort_keys=True) if as_json else text)


def require_positive(flag: str, value: int | float | None) -> None:
    if value is not None and value <= 0:
        raise InputError(COMMAND_LINE, Problem(flag, f"{value} must be positive"))
