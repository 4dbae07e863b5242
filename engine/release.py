"""Freeing large structures a piece at a time, so a worker thread never holds the GIL for long.

Dropping the last reference to a big object graph frees it in one cascade of deallocations, which runs
without releasing the GIL: half a million elaborated nodes take 120-140 ms, a finished event simulation
20-40 ms. In the studio the engine runs in a worker thread, and the GUI thread cannot paint while such a
cascade runs. Freed in pieces, the interpreter can switch threads between them.
"""

from __future__ import annotations

from typing import Any

SLICE = 20_000  # list items freed per step: a few ms at most


def release_lists(*lists: list, chunk: int = SLICE) -> None:
    """Empty each list from its end, ``chunk`` items at a time."""
    for items in lists:
        while items:
            del items[-chunk:]


def release_attributes(obj: Any) -> None:
    """Drop ``obj``'s attributes one at a time (lists a slice at a time), so that no single step frees the
    whole of what it held. ``obj`` is unusable afterwards."""
    for name in list(vars(obj)):
        value = vars(obj).pop(name)
        if isinstance(value, list):
            release_lists(value)
        del value
