"""``tilewright presets``: what ships in presets/, with a one-line description of each."""

from __future__ import annotations

import argparse
import re
from typing import Any

from tilewright.engine.io.json_file import dumps_strict
from tilewright.engine.results.text import shorten

KINDS = ("systems", "models", "projects")
DESCRIPTION_WIDTH = 100  # characters of a preset's description the list shows
# A period that ends one of these words ends no sentence ("Devlin et al. 2019", "LeCun et al., Proc. IEEE").
ABBREVIATIONS = frozenset({"al", "e.g", "i.e", "cf", "vs", "Proc", "Fig", "Eq", "Sec", "No", "Vol", "approx"})
SENTENCE_END = re.compile(r"\.\s+(?=[A-Z])")


def first_sentence(text: str) -> str:
    """The text up to the first period that ends a sentence: one followed by a capital letter, not ending
    an abbreviation (a citation's "et al. 2019" or "Proc. IEEE" goes on)."""
    for end in SENTENCE_END.finditer(text):
        words = text[: end.start()].split()
        if not words or words[-1].lstrip("(") not in ABBREVIATIONS:
            return text[: end.start()]
    return text.strip().rstrip(".")


def _describe(data: dict[str, Any]) -> str:
    """The description's (else the comment's) first sentence, cut at a word boundary with "…" when long."""
    text = str(data.get("description") or data.get("comment") or "").strip()
    return shorten(first_sentence(text).strip(), DESCRIPTION_WIDTH)


def catalog() -> dict[str, list[dict[str, str]]]:
    from tilewright.engine.io.json_file import read_json
    from tilewright.engine.io.presets import list_presets, preset_path

    out: dict[str, list[dict[str, str]]] = {}
    for kind in KINDS:
        rows = []
        for name in list_presets(kind):
            data = read_json(preset_path(kind, name))
            rows.append({"name": name, "description": _describe(data if isinstance(data, dict) else {})})
        out[kind] = rows
    return out


def format_catalog(entries: dict[str, list[dict[str, str]]]) -> str:
    lines: list[str] = []
    for kind, rows in entries.items():
        lines.append(f"{kind}:")
        width = max((len(r["name"]) for r in rows), default=0)
        for r in rows:
            lines.append(f"  {r['name']:<{width}}  {r['description']}".rstrip())
        lines.append("")
    return "\n".join(lines).rstrip()


def _cmd_presets(args: argparse.Namespace) -> int:
    entries = catalog()
    print(dumps_strict(entries, indent=2, sort_keys=True) if args.json else format_catalog(entries))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("presets", help="list the preset systems, models and projects")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_presets)
