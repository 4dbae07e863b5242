"""Which command-line flag set a project field, so a refusal of a value a flag gave names the flag, not the file.

``run``, ``serve`` and ``search`` load a project file, let flags edit its raw JSON (``--tp 3``, ``--hidden``,
``--set mapping.tp=3``…) and then validate and check the whole. Validation and the project checks know only
the source they are given — the file — so ``tilewright run gpt3.json --tp 3`` used to print
"gpt3.json: mapping.sequence_parallel: tp (3) does not divide seq_len (2048)", blaming a file that is fine.

``FlagEdits`` records what the flags changed (the raw data before and after them, and every ``--set`` path) and,
when an ``InputError`` names the file, re-attributes each problem about a changed field — the field itself, a
field inside or around it, or a reason naming it ("tp (3)") — to the flag that set it, with its value:
"command line: --tp 3: mapping.sequence_parallel: tp (3) does not divide seq_len (2048)". A problem the flags
did not touch keeps the file's name.
"""

from __future__ import annotations

import argparse
import copy
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tilewright.engine.cli.common import COMMAND_LINE
from tilewright.engine.errors import InputError, Problem

# Fields a flag of another name sets (argparse dests, the first given wins); any other field is set by the flag
# whose dest is the field's own name (--tp: mapping.tp, --seq-len: workload.seq_len, --batch:
# run.inference.batch), else by the flag that replaced the part holding it (--system, --model).
FIELD_FLAGS: dict[str, tuple[str, ...]] = {
    "mapping.dp": ("dp", "devices"),
    "mapping.tp_axes": ("tp",),
    "mapping.schedule": ("schedule", "interleave"),
    "mapping.recompute": ("recompute", "recompute_modules"),
    "mapping.tp_overlap_reduce_scatter": ("tp_overlap_rs",),
    "mapping.grad_reduce_in_fp32": ("grad_reduce_dtype", "main_grads_dtype"),
    "mapping.optimizer_moments": ("optimizer_moments", "exp_avg_dtype", "exp_avg_sq_dtype",
                                  "use_precision_aware_optimizer"),
    "mapping.optimizer_master": ("main_params_dtype", "store_param_remainders", "use_precision_aware_optimizer"),
    "mapping.formats.fp8_scaling": ("fp8_recipe",),
    "mapping.formats.bf16_first_layers": ("fp8_bf16_layers",),
    "mapping.formats.bf16_last_layers": ("fp8_bf16_layers",),
    "mapping.formats.kv_cache": ("kv_dtype",),
    "mapping.fusion": ("attention",),
    "run.aggregate": ("no_aggregate",),
    "workload.qkv_bias": ("bias",),
    "workload.out_bias": ("bias",),
    "workload.mlp_bias": ("bias",),
    "workload.moe.experts": ("moe_experts",),
    "workload.moe.top_k": ("moe_top_k",),
    "workload.moe.expert_ffn": ("moe_expert_ffn", "moe_experts"),
    "workload.moe.shared_experts": ("moe_shared_experts",),
    "workload.moe.capacity_factor": ("moe_capacity_factor",),
    "workload.moe.first_dense_layers": ("moe_first_dense",),
    "workload.moe": ("moe_experts", "moe_top_k"),
    "workload.mla": ("mla",),
    "workload": ("model",),
    "hardware": ("system",),
}
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class FlagEdits:
    """The edits a command's flags made to a project file's raw data; ``blamed()`` re-attributes refusals."""

    def __init__(self, args: argparse.Namespace, source: str, base: dict[str, Any]) -> None:
        self.args = args
        self.source = source  # the project file, as the errors name it
        self.base = copy.deepcopy(base)
        self.flagged: dict[str, Any] | None = None  # the data after the flags, before --set
        self.sets: dict[str, str] = {}  # dotted path → "--set PATH=VALUE" (the last one given wins)

    def after_flags(self, data: dict[str, Any]) -> None:
        """Note the data as the flags left it (``--set`` options are noted one by one)."""
        self.flagged = copy.deepcopy(data)

    def set_option(self, path: str, option: str) -> None:
        self.sets[path] = f"--set {option}"

    @contextmanager
    def blamed(self) -> Iterator[None]:
        """Re-raise an ``InputError`` naming the file with the problems about flag-set fields named by flag."""
        try:
            yield
        except InputError as exc:
            if exc.source != self.source:
                raise
            raise self.attribute(exc) from None

    def attribute(self, exc: InputError) -> InputError:
        edits = self.edits()
        if not edits:
            return exc
        flags = [_culprit(problem, edits) for problem in exc.problems]
        if not any(flags):
            return exc
        blamed: list[tuple[str, Problem]] = []
        for flag, problem in zip(flags, exc.problems, strict=True):
            if flag:
                blamed.append((COMMAND_LINE, Problem(f"{flag}: {problem.path}" if problem.path else flag,
                                                     problem.reason)))
            elif not problem.path:  # a note on the others ("past the size limits; …") goes with them
                blamed.append((COMMAND_LINE, problem))
            else:
                blamed.append((self.source, problem))
        if all(source == COMMAND_LINE for source, _ in blamed):
            return InputError(COMMAND_LINE, [p for _, p in blamed])
        return InputError("", [Problem(f"{s}: {p.path}" if p.path else s, p.reason) for s, p in blamed])

    def edits(self) -> dict[str, tuple[str, bool]]:
        """Every field the flags changed: dotted path → (the flag with its value, whether it names the field
        itself rather than a part it replaced, as --system the hardware)."""
        out: dict[str, tuple[str, bool]] = {}
        if self.flagged is not None:
            for path in _changed(self.base, self.flagged, ""):
                found = self._flag_for(path)
                if found:
                    out[path] = found
        for path, option in self.sets.items():  # --set comes last, over anything a flag set there
            for key in [k for k in out if k == path or k.startswith(path + ".")]:
                del out[key]
            out[path] = (option, True)
        return out

    def _flag_for(self, path: str) -> tuple[str, bool] | None:
        parts = path.split(".")
        for depth in range(len(parts), 0, -1):
            here = ".".join(parts[:depth])
            leaf = parts[depth - 1]
            for dest in FIELD_FLAGS.get(here, (leaf,) if not leaf.isdigit() else ()):
                text = self._given(dest)
                if text:
                    return text, depth == len(parts)
        return None

    def _given(self, dest: str) -> str | None:
        """The flag of ``dest`` as typed (``--tp 3``, ``--fsdp``) when given, else None."""
        if dest in ("set", "project"):
            return None
        value = getattr(self.args, dest, None)
        if value is None or (value is False and not _stores_false(self.args, dest)):
            return None
        option = _option(self.args, dest)
        if isinstance(value, bool):
            return option
        return f"{option} {value}"


def _option(args: argparse.Namespace, dest: str) -> str:
    parser = getattr(args, "command_parser", None)
    for action in getattr(parser, "_actions", ()):
        if action.dest == dest and action.option_strings:
            return max(action.option_strings, key=len)
    return "--" + dest.replace("_", "-")


def _stores_false(args: argparse.Namespace, dest: str) -> bool:
    """A ``store_false`` flag (``--no-gradient-accumulation-fusion``) is given when its dest is False."""
    parser = getattr(args, "command_parser", None)
    return any(a.dest == dest and isinstance(a, argparse._StoreFalseAction) for a in getattr(parser, "_actions", ()))


def _changed(before: Any, after: Any, prefix: str) -> Iterator[str]:
    """Dotted paths of the leaves (and replaced parts) that differ between two raw JSON values."""
    if isinstance(before, dict) and isinstance(after, dict):
        for key in after:
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in before:  # a part the flags added: each of its fields (--heads on no file)
                yield from _changed({}, after[key], path) if isinstance(after[key], dict) else (path,)
            elif before[key] != after[key]:
                yield from _changed(before[key], after[key], path)
        return
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            if b != a:
                yield from _changed(b, a, f"{prefix}.{i}")
        return
    if before != after:
        yield prefix


def _culprit(problem: Problem, edits: dict[str, tuple[str, bool]]) -> str | None:
    """The flag(s) that set the field a problem is about: one of the problem's fields (a model validator may
    name several, comma-separated) is a changed field, inside one, or (below the top level) holds one; and the
    fields a flag set that the reason names ("tp (3) does not divide seq_len")."""
    fields = [p.strip() for p in problem.path.split(",") if p.strip()]
    hits: list[str] = []
    for path, (flag, _) in edits.items():
        for field in fields:
            inside = path.startswith(field + ".") and "." in field
            if field == path or field.startswith(path + ".") or inside:
                hits.append(flag)
    words = set(_WORD.findall(problem.reason))  # and the fields its reason names ("does not divide hidden (100)")
    hits += [flag for path, (flag, direct) in edits.items() if direct and _leaf(path) in words]
    unique = list(dict.fromkeys(hits))
    return ", ".join(unique) if unique else None


def _leaf(path: str) -> str:
    parts = [p for p in path.split(".") if not p.isdigit()]
    return parts[-1] if parts else path
