"""A per-object method cache: what ``functools.cache`` on a method would give, without its leak.

``functools.cache`` on a method keeps one module-level table keyed by ``self``, so every plan ever built
(and the elaborated hardware graph it holds) stays alive for the life of the process — the studio,
which plans once per run, grew by every run. Here each object keeps its own table in its ``__dict__``
and takes it with it when it is freed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def memo_method(fn: F) -> F:
    """Cache ``fn(self, *args)`` (positional, hashable arguments) on ``self``."""
    name = fn.__qualname__

    @functools.wraps(fn)
    def wrapper(self, *args):
        table = self.__dict__.get("_memo")
        if table is None:
            table = self.__dict__["_memo"] = {}
        key = (name, *args)
        try:
            return table[key]
        except KeyError:
            value = table[key] = fn(self, *args)
            return value

    return wrapper  # type: ignore[return-value]
