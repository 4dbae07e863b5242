"""What every command shares: the name errors cite for flags, and printing a result as text or JSON."""

from __future__ import annotations

from typing import Any

from tilewright.engine.errors import InputError, Problem
from tilewright.engine.io.json_file import dumps_strict

COMMAND_LINE = "command line"


def print_result(data: dict[str, Any], as_json: bool, text: str) -> None:
    """One JSON object on stdout with ``--json`` (sorted keys, so outputs diff cleanly), else the text."""
    print(dumps_strict(data, sort_keys=True) if as_json else text)


def finite_float(text: str) -> float:
    """An argparse type: a finite number. ``float`` takes 'nan' and 'inf', which then failed far later as
    "not JSON data: Out of range float values", naming no flag."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number ≥ 0 (a count that may be zero, as ``--offload-layers 0``); argparse
    names the flag in its refusal (exit 2)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value}: give a count ≥ 0")
    return value


def require_positive(flag: str, value: int | float | None) -> None:
    if value is not None and value <= 0:
        raise InputError(COMMAND_LINE, Problem(flag, f"{value} must be positive"))


def refuse_overwriting_inputs(outputs: dict[str, str | None], inputs: list[str | None]) -> None:
    """Refuse an output path that is one of the command's input files (through symlinks, ``./`` and the
    like): ``--trace p.json`` with ``p.json`` the project, ``-o config.json`` with the config read, would
    replace the design with the output."""
    import os

    files = {os.path.realpath(i): i for i in inputs if i and i != "-" and os.path.isfile(i)}
    for flag, out in outputs.items():
        if out and os.path.realpath(out) in files:
            what = files[os.path.realpath(out)]
            raise InputError(COMMAND_LINE, Problem(flag, f"{out} is the input file {what} itself; choose another path"))


def refuse_unreachable_outputs(outputs: dict[str, str | None]) -> None:
    """Refuse an output path below a file (``--trace afile/t.json``): the folders on the way cannot be
    made, which ``mkdir`` reports only as "File exists" after the whole run, naming neither flag nor file."""
    from pathlib import Path

    for flag, out in outputs.items():
        if not out:
            continue
        for parent in Path(out).absolute().parents:
            if parent.exists():
                if not parent.is_dir():
                    raise InputError(COMMAND_LINE, Problem(flag, f"{out}: {parent} is a file, not a folder"))
                break


def refuse_file_outputs_at_folders(outputs: dict[str, str | None]) -> None:
    """Refuse a file output that names an existing folder: the write would fail only at the end, as
    "Is a directory", naming neither the flag nor what to do."""
    import os

    for flag, out in outputs.items():
        if out and os.path.isdir(out):
            raise InputError(COMMAND_LINE, Problem(flag, f"{out} is a folder; name a file"))
