"""A per-object method cache: what ``functools.cache`` on a method would give, without its leak.

``functools.cache`` on a method keeps one module-level table keyed by ``self``, so every plan ever built
(and the elaborated hardware graph it holds) stays alive for the life of the process — the studio,
which plans once per run, grew by every run. Here the first access on an object wraps the method in
its own ``functools.cache``, stored on the object: later calls find it in the instance ``__dict__`` and
run at C speed, and the table goes with the object when it is freed.

The stored cache reaches its object through a weak reference, not a bound method: a bound method in
the object's own ``__dict__`` is a reference cycle, which made every plan (its ops, its hardware graph,
some 14,000 objects for a wafer) garbage that only the cyclic collector could free — in the studio, a
30–75 ms pass on the GUI thread after each run. Without the cycle, reference counting frees a plan
where its last user drops it.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any


class memo_method:  # noqa: N801 - used as a decorator, named like one
    """Cache ``fn(self, *args)`` (hashable arguments) on ``self``."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.key = f"_memo_{fn.__qualname__}"
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        cached = obj.__dict__.get(self.key)
        if cached is None:
            cached = obj.__dict__[self.key] = weak_cache(self.fn, obj)
        # The most derived implementation also takes the attribute's name on the object, so the next
        # lookup skips this descriptor; one reached through super() (an override calling its base) must
        # not, or the override would be bypassed.
        if getattr(type(obj), self.name, None) is self:
            obj.__dict__[self.name] = cached
        return cached


def weak_cache(fn: Callable[..., Any], obj: Any, maxsize: int | None = None) -> Callable[..., Any]:
    """``functools.lru_cache(maxsize)`` of ``fn`` bound to ``obj`` through a weak reference: the cache can
    be kept on ``obj`` without making a reference cycle."""
    ref = weakref.ref(obj)

    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(ref(), *args, **kwargs)

    return functools.update_wrapper(functools.lru_cache(maxsize)(call), fn)
