"""The user's narrowing of the search's second stage, from text (CLI flags, studio fields) to the ``narrow``
keywords of ``extended.default_extensions``.

One parser for both front ends so the CLI and the studio accept the same lists and refuse bad ones with the
same message (each problem names the flag it came from).
"""

from __future__ import annotations

from typing import Any

from tilewright.engine.errors import InputError, Problem
from tilewright.engine.perf.recompute import MODULES, unknown_modules
from tilewright.engine.search.parallel.candidate import DISPATCHERS
from tilewright.engine.search.parallel.extended import ZERO_CHOICES

# How each list is named in messages: the CLI's flags (the studio passes its fields' labels).
FLAGS = {"ep": "--ep", "cp": "--cp", "zero": "--zero", "ep_dispatcher": "--ep-dispatcher",
         "recompute_modules": "--recompute-modules"}


def module_lists(flag: str, text: str | None, source: str) -> list[tuple[str, ...]] | None:
    """``"core_attn,mlp;mla_up_proj,layernorm,moe_act"`` → the recompute-module lists the second stage tries
    (``extended.RECOMPUTE_RECIPES``' place); ``"none"`` → none; ``None`` (not given) → the recipes the model
    has. Names are Megatron-Core's (``perf.recompute.MODULES``)."""
    if text is None:
        return None
    if text.strip().lower() == "none":
        return []
    lists = [tuple(dict.fromkeys(v.strip() for v in part.split(",") if v.strip())) for part in text.split(";")]
    lists = [mods for mods in lists if mods]
    unknown = sorted({m for mods in lists for m in unknown_modules(mods)})
    if not lists or unknown:
        raise InputError(source, Problem(flag, f"{text!r}: give module lists separated by ';', each comma-separated "
                                               f"from {', '.join(MODULES)} (or 'none')"))
    return list(dict.fromkeys(lists))


def int_list(flag: str, text: str | None, source: str) -> list[int] | None:
    """``"1,2,4"`` → ``[1, 2, 4]``; ``None`` (not given) → ``None`` (the default space)."""
    if text is None:
        return None
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        raise InputError(source, Problem(flag, f"{text!r}: give whole numbers ≥ 1, comma-separated (e.g. 1,2,4)"))
    return values


def _choices(flag: str, text: str | None, allowed: tuple[str, ...], source: str) -> list[str] | None:
    if text is None:
        return None
    chosen = [v.strip() for v in text.split(",") if v.strip()]
    if not chosen or any(v not in allowed for v in chosen):
        raise InputError(source, Problem(flag, f"{text!r}: choose from {', '.join(allowed)}"))
    return chosen


def narrowing(
    source: str,
    *,
    ep: str | None = None,
    cp: str | None = None,
    zero: str | None = None,
    ep_dispatcher: str | None = None,
    recompute_modules: str | None = None,
    offload: bool = True,
    overlap: bool = True,
    names: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The ``narrow`` dict for ``search``: a text left ``None`` keeps that part of the default space;
    ``offload``/``overlap`` False take those options out. Raises ``InputError`` (from ``source``) naming the
    list whose text is bad (``names`` maps ep, cp, zero, ep_dispatcher, recompute_modules to how the user knows
    them; the CLI's flags by default)."""
    name = {**FLAGS, **(names or {})}
    out: dict[str, Any] = {}
    if (eps := int_list(name["ep"], ep, source)) is not None:
        out["eps"] = eps
    if (cps := int_list(name["cp"], cp, source)) is not None:
        out["cps"] = cps
    if (zeros := _choices(name["zero"], zero, ZERO_CHOICES, source)) is not None:
        out["zeros"] = zeros
    if (dispatchers := _choices(name["ep_dispatcher"], ep_dispatcher, tuple(DISPATCHERS), source)) is not None:
        out["dispatchers"] = dispatchers
    if (recipes := module_lists(name["recompute_modules"], recompute_modules, source)) is not None:
        out["recipes"] = recipes
    if not offload:
        out["offload"] = False
    if not overlap:
        out["overlap"] = False
    return out
